"""Launch one trial process and turn whatever happens to it into a recorded result.

The file contract: the driver writes ``spec.json``, starts ``python -m autotune.trial``
in a new process group, waits up to the time limit, and reads ``result.json``. A process
that ends without a result is ``crash``; one that outlives its limit is killed, with its
whole process group, and recorded as ``timeout``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])[-800:]


def _die_with_parent() -> None:
    """In the child: get SIGKILL when the driver dies, even by SIGKILL (Linux prctl)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_trial(spec: dict, trial_dir: Path, timeout_s: float, env: dict | None = None) -> dict:
    """Run the trial described by ``spec`` in a fresh process; never raises for trial faults."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path, log_path = trial_dir / "spec.json", trial_dir / "result.json", trial_dir / "log.txt"
    result_path.unlink(missing_ok=True)
    spec = dict(spec, result=str(result_path), launched_at=time.time())
    spec_path.write_text(json.dumps(spec, indent=1))

    start = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "autotune.trial", str(spec_path)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent,
                                env={**os.environ, **(env or {})})
        try:
            returncode = proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            returncode = proc.wait()
        except BaseException:  # Ctrl-C or a signal to the driver: leave no trial behind
            _kill_group(proc)
            proc.wait()
            raise
        _kill_group(proc)  # anything the trial started and left behind
    wall = time.perf_counter() - start

    if timed_out:
        result = {"status": "timeout", "cause": f"no result within the {timeout_s:g} s limit; killed"}
    elif result_path.is_file():
        try:
            result = json.loads(result_path.read_text())
        except json.JSONDecodeError as e:
            result = {"status": "crash", "cause": f"unreadable result file {result_path}: {e}"}
    else:
        how = (f"killed by signal {signal.Signals(-returncode).name}" if returncode < 0
               else f"exited with code {returncode}")
        result = {"status": "crash", "cause": f"process {how} without a result; log: {_tail(log_path)}"}
    result["wall_s"] = wall
    return result
