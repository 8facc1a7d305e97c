"""``workers=N``: N drivers on one study, the study storage their only coordinator.

The driver the user started is worker 0. It starts N-1 more ``python -m autotune``
processes with the same command, the same study and storage, each in a run directory of
its own (``<run>/workers/<k>/``) and pinned to a GPU of its own through
``CUDA_VISIBLE_DEVICES`` or, on CPU, to an equal share of the cores (so that workers do not
time each other's load). Each claims configurations from the queue in the storage (the
storage's atomic claim: no configuration runs twice), and a worker that dies leaves its
trial to be closed and retried by another (``claims.recover``). Worker 0 waits for
the others, then writes the outputs, which cover the whole study.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
from pathlib import Path

from autotune.train.device import DeviceInfo

log = logging.getLogger("autotune")


CPU_SHARE_ENV = "AUTOTUNE_CPU_SHARE"  # "k/n": this CPU worker runs on the k-th of n shares of the cores


def take_cpu_share(workers: int, device: DeviceInfo) -> list | None:
    """On CPU with several workers, pin this driver to its share of the cores (worker 0 the
    first, the others by CPU_SHARE_ENV); returns the cores, or None when nothing was pinned."""
    if device.kind != "cpu":
        return None
    share = os.environ.get(CPU_SHARE_ENV)
    if share:
        k, n = (int(x) for x in share.split("/"))
    elif workers > 1:
        k, n = 0, workers
    else:
        return None
    from autotune.system.linux import pin_to_share

    return pin_to_share(k, n)


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (no CUDA context made)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def worker_count(value, device: DeviceInfo | None) -> int:
    """``workers`` as a number: ``auto`` is one per visible GPU on CUDA, one on CPU."""
    if value == "auto":
        return max(1, len(visible_gpus())) if device is not None and device.kind == "cuda" else 1
    return int(value)


def hydra_quoted(value: str) -> str:
    """``value`` as one quoted value of Hydra's override grammar (spaces, commas, brackets and
    quotes in a run directory's path survive)."""
    return "'" + value.replace("'", "\\'") + "'"  # a backslash escapes only a quote there


def start_workers(n: int, overrides: list[str], run_dir: Path, study_name: str, storage: str,
                  device: DeviceInfo) -> list[subprocess.Popen]:
    """Start workers 1..n-1; worker 0 is the calling driver."""
    from autotune.trial.runner import _start

    gpus = []
    if device.kind == "cuda":
        visible = visible_gpus()
        mine = visible[device.index] if device.index < len(visible) else str(device.index)
        gpus = [g for g in visible if g != mine]
    keep = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in
            ("workers", "study_name", "storage", "hydra.run.dir", "hydra.job.name", "device")]
    procs = []
    for k in range(1, n):
        # The study's name and storage travel by environment (tune.STORAGE_ENV): a name that
        # needs quoting survives, and a password stays out of argv and the worker's .hydra/.
        env = {"AUTOTUNE_STORAGE": storage, "AUTOTUNE_STUDY_NAME": study_name}
        if device.kind == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = gpus[k - 1]
        else:
            env[CPU_SHARE_ENV] = f"{k}/{n}"  # the worker pins itself to its share of the cores
        wdir = run_dir / "workers" / str(k)
        wdir.mkdir(parents=True, exist_ok=True)
        argv = ["autotune", *keep, "workers=1", f"hydra.run.dir={hydra_quoted(str(wdir))}",
                "device=cuda:0" if device.kind == "cuda" else f"device={device.kind}"]
        with open(wdir / "worker.log", "wb") as out:
            proc = _start(argv, {**env, "AUTOTUNE_WORKER": str(k)}, stdout=out, stderr=subprocess.STDOUT)
        where = f" on GPU {env['CUDA_VISIBLE_DEVICES']}" if "CUDA_VISIBLE_DEVICES" in env else ""
        log.info(f"worker {k} started{where} (pid {proc.pid}, log {wdir / 'worker.log'})")
        procs.append(proc)
    return procs


def wait_workers(procs: list[subprocess.Popen]) -> None:
    for k, proc in enumerate(procs, start=1):
        code = proc.wait()
        if code != 0:  # killed, or stopped by an error; a trial it left running was retried by another
            log.warning(f"worker {k} (pid {proc.pid}) ended with exit code {code}; see its worker.log")


def stop_workers(procs: list[subprocess.Popen]) -> None:
    """Interrupt the other workers as Ctrl-C interrupts this one (they record what they ran)."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
