"""A warm trial process: consecutive trials in one interpreter, without paying the start-up
(interpreter, imports, CUDA context: about 10 s of a BERT-large trial's 16 s on the H200)
each time.

    python -m autotune.worker        # reads one spec.json path per line on stdin

For each path it runs the trial exactly as ``python -m autotune.trial`` would (the same
``run_spec_file``), with its output going to that trial's ``log.txt``, then frees what the
trial held (collect garbage, empty the CUDA cache, reset the allocator's statistics) and
answers one line on the control channel (its original stdout). After any trial that did
not end ``ok`` it exits, so a failure's leftovers (a poisoned CUDA context, a leaked
reference) never reach the next trial: the driver starts a fresh worker.
"""
from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path

import torch

from autotune.trial import run_spec_file


def release() -> None:
    """Give back everything a finished trial held, so the next one starts as in a fresh process."""
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.reset_accumulated_memory_stats()  # num_alloc_retries counts per trial


def main() -> int:
    control = os.fdopen(os.dup(1), "w", buffering=1)
    served = 0
    while line := sys.stdin.readline():
        spec_path = Path(line.strip())
        fd = os.open(spec_path.with_name("log.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        result = run_spec_file(spec_path, {"worker_trial": served})
        served += 1
        sys.stdout.flush()
        sys.stderr.flush()
        control.write(json.dumps({"status": result["status"]}) + "\n")
        if result["status"] != "ok":
            return 0  # before touching CUDA again: the context may be poisoned
        release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
