"""Consecutive trials in ONE process, which autotune never does: what each leaves alive.

    python -m tests.inprocess OUT.json SPEC.json [SPEC.json ...]

A leak probe for the tests: after each trial it collects garbage and records how many of
the parameters of the models built so far are still alive and, on CUDA, what the
allocator still holds. The clean-start check (which would refuse the second trial) is
reset before each one, since this measures leaks, not trials.
"""
import gc
import json
import sys
from pathlib import Path

import torch

from autotune.trial import clean_start
from autotune.trial.run import preload, run_spec_file


def main(argv) -> int:
    out, specs = Path(argv[0]), [Path(a) for a in argv[1:]]
    preload(json.loads(specs[0].read_text())["model"]["target"])
    report = []
    for path in specs:
        clean_start._trials_started = 0
        result = run_spec_file(path)
        gc.collect()
        entry = {"status": result["status"], "alive_parameters": len(clean_start._earlier_parameters)}
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
            # What PyTorch itself keeps for the process, not the trial: cuBLAS's workspaces
            # (32 MiB per handle on Hopper) and the allocator's cache.
            torch._C._cuda_clearCublasWorkspaces()
            torch.cuda.empty_cache()
            entry.update(allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved())
        report.append(entry)
    out.write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
