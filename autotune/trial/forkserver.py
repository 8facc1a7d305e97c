"""The fork server: every trial in a fresh process, without paying the interpreter's start-up.

    python -m autotune.trial.forkserver [--preload package.module:builder]

imports torch, autotune's trial code and the model builder's module once (on the H200
that is 9-11 s of a fresh interpreter's start-up), never touches CUDA, and then, for each
``spec.json`` path it reads on stdin, forks one child that runs that trial exactly as
``python -m autotune.trial spec.json`` would (the same ``run_spec_file``) and exits. The
child creates its own CUDA context (0.3-0.4 s on the H200), so its allocator has never
served another trial: nothing one trial held, cached or capped can reach the next. That is
the point: a warm process reused for consecutive trials carried earlier trials' memory
into later ones (peaks 28-43 % high, out-of-memory errors that a fresh process did not
have), and no amount of cleaning up after a trial makes that structurally impossible.

Control channel (the server's original stdout), one line each:
``ready`` once the imports are done; then per trial ``started PID`` and, when the child
has ended, ``exited PID CODE`` (CODE as ``subprocess`` reports it: negative for a signal).
Each child leads a process group of its own, so the driver can kill it, and anything it
started, at the time limit; it also dies with the server, which dies with the driver.

The server is not single-threaded: the libraries it imports start idle native thread pools
(numpy's OpenBLAS pool at import, one thread per extra core), which Python 3.12 warns about
at every fork. Those pools hold no lock while idle, and OpenBLAS shuts its pool down before
a fork (its own atfork handler) and starts it again when next used, so the warning is
silenced here. What must not happen before a fork, CUDA or an OpenMP parallel region,
``preload`` never does.

Hand-written rather than ``multiprocessing``'s forkserver start method: that one cannot
run a trial in a new process group with its output in the trial's log, report the exit of
a child that was killed, or preload the user's builder, and it pickles what it runs.
"""
from __future__ import annotations

import os
import signal
import sys
import time
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path

from autotune.system.quiet import quiet_third_party
from autotune.trial.runner import die_with_parent


@contextmanager
def unimportable(module: str):
    """``module`` absent while the block runs, importable again after it.

    With torchao installed, transformers imports it with any model (its quantizers), and
    torchao's import asks ``torch.utils._triton.has_triton()``, which reads the device's
    properties and so starts CUDA (seen on the H100; ``benchmarks/model-state-h100-2026-12-06``).
    ``sys.modules[module] = None`` makes ``importlib.util.find_spec`` answer None, so
    transformers takes torchao for absent and skips it; a trial that needs torchao's
    optimizers imports it in its own child (0.5 s on a 2-core CPU), after its CUDA started.
    A builder that itself imports torchao fails here and is imported again by its trial; a
    model quantised through transformers' torchao integration would find it missing in a
    forked trial (trial.isolation=fresh serves that case)."""
    if module in sys.modules:  # already imported (by whoever started the server): nothing to hide
        yield
        return
    sys.modules[module] = None  # type: ignore[assignment]  # import then raises ImportError
    try:
        yield
    finally:
        if sys.modules.get(module, 0) is None:
            del sys.modules[module]


class CudaStarted(RuntimeError):
    """The builder's import started CUDA (as transformers' did through torchao before
    ``unimportable``); every trial then runs in a fresh interpreter instead."""


def preload(target: str | None) -> None:
    """Import what every trial needs (``trial.preload``), so that a forked child finds it
    imported. Nothing here may start CUDA (a forked child cannot use a context, or a
    driver, its parent started) or run a parallel CPU kernel (OpenMP's thread pool does not
    survive a fork)."""
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # is_available() without cuInit, if anything asks
    import torch

    from autotune.trial.run import preload as preload_trial

    with unimportable("torchao"):
        preload_trial(target)
    if torch.cuda.is_initialized():
        raise CudaStarted(f"importing {target} started CUDA, which a forked child could not use")


def _child(spec_path: Path, control_fd: int) -> None:
    """In the forked child: run one trial, then exit without returning to the server loop."""
    code = 1
    try:
        os.close(control_fd)
        die_with_parent()
        if os.getppid() == 1:  # the server died before the line above took effect
            os._exit(1)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        log = os.open(spec_path.with_name("log.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        from autotune.trial.run import run_spec_file

        run_spec_file(spec_path, {"isolation": "fork"})
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(control, control_fd: int) -> None:
    warnings.filterwarnings("ignore", message=r".*is multi-threaded, use of fork\(\) may lead to deadlocks",
                            category=DeprecationWarning)
    while line := sys.stdin.readline():
        spec_path = Path(line.strip())
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)
            _child(spec_path, control_fd)
        try:
            os.setpgid(pid, pid)  # here too, so the group exists before the driver may kill it
        except OSError:
            pass  # the child already did it, or already exited
        control.write(f"started {pid}\n")
        _, status = os.waitpid(pid, 0)
        control.write(f"exited {pid} {os.waitstatus_to_exitcode(status)}\n")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    target = argv[1] if len(argv) == 2 and argv[0] == "--preload" else None
    if argv and target is None:
        print("usage: python -m autotune.trial.forkserver [--preload package.module:builder]", file=sys.stderr)
        return 2
    control_fd = os.dup(1)
    control = os.fdopen(control_fd, "w", buffering=1)
    os.dup2(2, 1)  # the server's own prints go to its log, never onto the control channel
    start = time.perf_counter()
    quiet_third_party()  # its trials' logs start clean too (system/quiet.py)
    try:
        preload(target)
    except CudaStarted as e:  # the driver runs every trial in a fresh interpreter instead
        control.write(f"unforkable {e}\n")
        return 0
    control.write(f"ready {time.perf_counter() - start:.3f}\n")
    serve(control, control_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
