"""Launch trials and turn whatever happens to them into recorded results.

The file contract: the driver writes ``spec.json``, starts ``python -m autotune.trial``
in a new process group, waits up to the time limit, and reads ``result.json``. A process
that ends without a result is ``crash``; one that outlives its limit is killed, with its
whole process group, and recorded as ``timeout``. ``ForkServer`` keeps the same contract
with each trial forked from a parent that has already imported everything
(``trial.isolation=fork``, the default); ``run_trial`` starts a new interpreter per trial
(``trial.isolation=fresh``).
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
from typing import Protocol, runtime_checkable

from autotune.system.linux import die_with_parent
from autotune.trial.contract import ResultError, TrialResult, TrialSpec, check_result


@runtime_checkable
class Runner(Protocol):
    """The seam where a trial is run: given a spec, a folder of its own and a time limit,
    return its result, whatever happened to it (never raise for a trial's fault).
    Implemented by ``run_trial`` (a new interpreter), ``ForkServer`` (a forked child, the
    default) and ``study.replay.Replay`` (a recorded table, no process)."""

    def __call__(self, spec: dict, trial_dir: Path, timeout_s: float, env: dict | None = None) -> TrialResult: ...


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])[-800:]


def _kill_pgid(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    _kill_pgid(proc.pid)


def _prepare(spec: dict, trial_dir: Path, launched_at: float | None = None) -> tuple:
    trial_dir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path, log_path = trial_dir / "spec.json", trial_dir / "result.json", trial_dir / "log.txt"
    result_path.unlink(missing_ok=True)
    checked = TrialSpec.from_dict(spec).but(result=str(result_path), launched_at=launched_at or time.time())
    spec_path.write_text(json.dumps(checked.to_dict(), indent=1))
    return spec_path, result_path, log_path


def _collect(result_path: Path, log_path: Path, timeout_s: float, timed_out: bool, returncode) -> dict:
    """The trial's result file, or the status its process's end implies."""
    if timed_out:
        return {"status": "timeout", "cause": f"no result within the {timeout_s:g} s limit; killed"}
    if result_path.is_file():
        try:
            return dict(check_result(json.loads(result_path.read_text())))
        except json.JSONDecodeError as e:
            return {"status": "crash", "cause": f"unreadable result file {result_path}: {e}"}
        except ResultError as e:  # the trial and the driver disagree on the contract: a fault of ours, said
            return {"status": "error", "cause": f"{e} ({result_path})"}
    how = (f"killed by signal {signal.Signals(-returncode).name}" if returncode is not None and returncode < 0
           else f"exited with code {returncode}")
    return {"status": "crash", "cause": f"process {how} without a result; log: {_tail(log_path)}"}


def _start(argv: list, env: dict | None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *argv], start_new_session=True, preexec_fn=die_with_parent,
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


class ForkServerError(RuntimeError):
    """The fork server did not start: no trial can run, so the study stops."""


class ForkServer:
    """A ``runner`` whose trials are children forked from a ``python -m autotune.trial.forkserver``
    that has imported torch and the model's builder but never touched CUDA (see
    ``autotune/trial/forkserver.py``): each trial is a fresh process, as with ``run_trial``,
    without the interpreter's start-up.

    A server serves one environment (the allocator setting must be in place before a
    child's CUDA starts), so there is one per environment. A child that outlives the time
    limit is killed with its process group; a server that dies or stops answering is
    replaced for the next trial. The result is read from the trial's result file, as for
    a fresh process.
    """

    READY_TIMEOUT_S = 300.0  # imports of torch, transformers and the builder, on a slow disk

    def __init__(self, preload: str | None = None) -> None:
        self.preload = preload
        self.servers: dict = {}  # frozen environment -> Popen
        self.fresh_reason: str | None = None  # why the server could not fork trials, once it said so
        self.starting: dict = {}  # frozen environment -> Popen started by prestart, not yet ready
        self.used = False  # a trial asked for a server (its log then matters), kept once they are closed

    def pids(self) -> list:
        """The servers' process ids, started or starting."""
        return [p.pid for p in [*self.servers.values(), *self.starting.values()]]

    def prestart(self, env: dict | None, log_dir: Path) -> None:
        """Start the server for ``env`` now and return at once: its imports (seconds: torch,
        transformers, the builder) then overlap the driver's own set-up before the first trial."""
        key = frozenset((env or {}).items())
        if key not in self.servers and key not in self.starting and not self.fresh_reason:
            self.starting[key] = self._launch(env, log_dir)

    def _launch(self, env: dict | None, log_dir: Path) -> subprocess.Popen:
        log_dir.mkdir(parents=True, exist_ok=True)
        argv = ["autotune.trial.forkserver"] + (["--preload", self.preload] if self.preload else [])
        with open(log_dir / "forkserver.log", "ab") as log:
            # Unbuffered: select() must see every line that has arrived, none held in a buffer.
            return _start(argv, env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, bufsize=0)

    def _server(self, env: dict | None, log_dir: Path) -> subprocess.Popen | None:
        self.used = True
        key = frozenset((env or {}).items())
        proc = self.servers.get(key)
        if proc is not None and proc.poll() is None:
            return proc
        proc = self.starting.pop(key, None)
        if proc is None or proc.poll() is not None:
            proc = self._launch(env, log_dir)
        self.servers[key] = proc
        line = _read_line(proc, self.READY_TIMEOUT_S)
        if line.startswith("unforkable "):
            self._stop(key)
            self.fresh_reason = line[len("unforkable "):].strip()
            print(f"trial.isolation=fork cannot run here: {self.fresh_reason}; every trial runs in a fresh "
                  "interpreter instead (as trial.isolation=fresh, some seconds more each)", flush=True)
            return None
        if not line.startswith("ready"):
            self._stop(key)
            raise ForkServerError(f"the trial fork server did not start (it said {line!r}); see "
                               f"{log_dir / 'forkserver.log'}")
        return proc

    def __call__(self, spec: dict, trial_dir: Path, timeout_s: float, env: dict | None = None) -> dict:
        launched = time.time()  # a server started for this trial: its start-up is this trial's
        start = time.perf_counter()
        proc = None if self.fresh_reason else self._server(env, trial_dir.parent)
        if proc is None:
            return run_trial(spec, trial_dir, timeout_s, env=env)
        spec_path, result_path, log_path = _prepare(spec, trial_dir, launched)
        pid, returncode, timed_out = None, None, False
        try:
            assert proc.stdin is not None  # the server is started with pipes
            proc.stdin.write(f"{spec_path}\n".encode())
            proc.stdin.flush()
            started = _read_line(proc, 60.0)
            if started.startswith("started "):
                pid = int(started.split()[1])
                left = timeout_s - (time.perf_counter() - start)
                ended = _read_line(proc, max(left, 0.0))
                if not ended:
                    timed_out = proc.poll() is None
                    _kill_pgid(pid)
                    ended = _read_line(proc, 30.0)
                if ended.startswith("exited "):
                    returncode = int(ended.split()[2])
        except (BrokenPipeError, OSError, ValueError):
            pass  # the server died: the trial has no result, and the next one gets a new server
        except BaseException:  # Ctrl-C or a signal to the driver: leave no trial behind
            if pid is not None:
                _kill_pgid(pid)
            self.close()
            raise
        if pid is not None:
            _kill_pgid(pid)  # anything the trial started and left behind
        if returncode is None:
            self._stop(frozenset((env or {}).items()))
        result = _collect(result_path, log_path, timeout_s, timed_out, returncode)
        result["wall_s"] = time.perf_counter() - start
        return result

    def _stop(self, key) -> None:
        proc = self.servers.pop(key, None)
        if proc is not None:
            _kill_group(proc)
            proc.wait()

    def close(self) -> None:
        for key in list(self.servers):
            self._stop(key)
        for key in list(self.starting):
            proc = self.starting.pop(key)
            _kill_group(proc)
            proc.wait()


def _read_line(proc: subprocess.Popen, timeout_s: float) -> str:
    """One line from a server's control channel, or "" if none came in time (or it died)."""
    assert proc.stdout is not None  # the server is started with pipes
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return proc.stdout.readline().decode() if ready else ""
