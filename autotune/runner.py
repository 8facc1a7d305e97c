"""Launch trials and turn whatever happens to them into recorded results.

The file contract: the driver writes ``spec.json``, starts ``python -m autotune.trial``
in a new process group, waits up to the time limit, and reads ``result.json``. A process
that ends without a result is ``crash``; one that outlives its limit is killed, with its
whole process group, and recorded as ``timeout``. ``WarmWorker`` keeps the same contract
with one process serving consecutive trials (``trial.reuse_worker=true``).
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional


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


def _prepare(spec: dict, trial_dir: Path) -> tuple:
    trial_dir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path, log_path = trial_dir / "spec.json", trial_dir / "result.json", trial_dir / "log.txt"
    result_path.unlink(missing_ok=True)
    spec = dict(spec, result=str(result_path), launched_at=time.time())
    spec_path.write_text(json.dumps(spec, indent=1))
    return spec_path, result_path, log_path


def _collect(result_path: Path, log_path: Path, timeout_s: float, timed_out: bool, returncode) -> dict:
    """The trial's result file, or the status its process's end implies."""
    if timed_out:
        return {"status": "timeout", "cause": f"no result within the {timeout_s:g} s limit; killed"}
    if result_path.is_file():
        try:
            return json.loads(result_path.read_text())
        except json.JSONDecodeError as e:
            return {"status": "crash", "cause": f"unreadable result file {result_path}: {e}"}
    how = (f"killed by signal {signal.Signals(-returncode).name}" if returncode is not None and returncode < 0
           else f"exited with code {returncode}")
    return {"status": "crash", "cause": f"process {how} without a result; log: {_tail(log_path)}"}


def _start(argv: list, env: Optional[dict], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *argv], start_new_session=True, preexec_fn=_die_with_parent,
                            env={**os.environ, **(env or {})}, **kw)


def run_trial(spec: dict, trial_dir: Path, timeout_s: float, env: dict | None = None) -> dict:
    """Run the trial described by ``spec`` in a fresh process; never raises for trial faults."""
    spec_path, result_path, log_path = _prepare(spec, trial_dir)
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = _start(["autotune.trial", str(spec_path)], env, stdout=log, stderr=subprocess.STDOUT)
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
    result = _collect(result_path, log_path, timeout_s, timed_out, returncode)
    result["wall_s"] = time.perf_counter() - start
    return result


class WarmWorker:
    """A ``runner`` that sends consecutive trials to one warm ``python -m autotune.worker``.

    A worker serves one allocator setting (it is fixed when CUDA starts); a trial with
    another starts a new worker. A worker that reports a failed trial exits by itself, one
    that dies is found by its closed control channel, one that outlives the time limit is
    killed with its process group; in each case the next trial gets a fresh worker. The
    result is read from the trial's result file, as for a fresh process.
    """

    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen] = None
        self.env: Optional[dict] = None

    def __call__(self, spec: dict, trial_dir: Path, timeout_s: float, env: dict | None = None) -> dict:
        if self.proc is not None and (self.proc.poll() is not None or (env or {}) != self.env):
            self.close()
        if self.proc is None:
            trial_dir.parent.mkdir(parents=True, exist_ok=True)
            with open(trial_dir.parent / "worker.log", "ab") as log:  # before its first trial
                self.proc = _start(["autotune.worker"], env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=log)
            self.env = dict(env or {})
        spec_path, result_path, log_path = _prepare(spec, trial_dir)
        start = time.perf_counter()
        timed_out, answer = False, ""
        try:
            self.proc.stdin.write(f"{spec_path}\n".encode())
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
            if ready:
                answer = self.proc.stdout.readline().decode()
            else:
                timed_out = True
        except BrokenPipeError:
            pass  # it died before reading: no answer
        except BaseException:  # Ctrl-C or a signal to the driver: leave no trial behind
            self.close()
            raise
        returncode = None
        if not answer or json.loads(answer).get("status") != "ok":
            if timed_out:
                _kill_group(self.proc)
            returncode = self.proc.wait()
            self.close()
        result = _collect(result_path, log_path, timeout_s, timed_out, returncode)
        result["wall_s"] = time.perf_counter() - start
        return result

    def close(self) -> None:
        if self.proc is not None:
            _kill_group(self.proc)
            self.proc.wait()
            self.proc = None
