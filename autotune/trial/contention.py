"""What else used the trial's device while it measured: other processes' CPU time on the
trial's cores and, on CUDA, other processes on the GPU (NVML).

A trial timed on a busy machine reports the machine's load, not the configuration's
speed: on a 2-core CPU a baseline ran at 2.9 samples/s beside another job and 16.6 on a
quiet machine. So the timed window is bracketed: CPU time from /proc/stat for the cores
the trial may run on, less the trial process's own, is what other processes (and other
guests, through steal time) took. The trial is *contended* when those others took a
quarter of a core or more while the cores were oversubscribed (the trial's own use plus
theirs above what the cores give), or when another process computed on its GPU. The
driver re-measures contended trials, and the table prefers their quiet runs.
"""
from __future__ import annotations

import os
import time
from typing import Any

from autotune.system.linux import cpu_busy_seconds, load_average, process_cpu_seconds, usable_cpus

MIN_OTHER_CORES = 0.25  # other processes' CPU use that can count as contention, in cores
SLACK_CORES = 0.25  # own + others within this of all the trial's cores: oversubscribed
GPU_BUSY_UTIL = 5  # percent SM utilisation by another process that counts as contention


class Contention:
    """``start()`` before the timed steps, ``finish()`` after: a dict of result fields."""

    def __init__(self, gpu_handle=None):
        self.gpu = gpu_handle
        self.cpus = usable_cpus()

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.busy0 = cpu_busy_seconds(self.cpus)
        self.own0 = process_cpu_seconds()
        self.gpu_since_us = int(time.time() * 1e6)

    def finish(self) -> dict:
        wall = time.monotonic() - self.t0
        out: dict[str, Any] = {"trial_cores": len(self.cpus), "load_average": load_average()}
        reasons = []
        busy = cpu_busy_seconds(self.cpus)
        if busy is not None and self.busy0 is not None and wall > 0:
            own = (process_cpu_seconds() - self.own0) / wall
            others = max(0.0, (busy - self.busy0) / wall - own)
            out.update(own_cpu_cores=round(own, 3), other_cpu_cores=round(others, 3))
            if others >= MIN_OTHER_CORES and own + others > len(self.cpus) - SLACK_CORES:
                reasons.append(f"other processes used {others:.1f} of the {len(self.cpus)} core(s) the trial "
                               f"ran on (the trial {own:.1f})")
        if self.gpu is not None:
            gpu = gpu_others(self.gpu, self.gpu_since_us)
            out.update(gpu)
            if gpu.get("gpu_other_processes"):
                util = gpu.get("gpu_other_sm_util")
                if util is None or util >= GPU_BUSY_UTIL:
                    reasons.append(f"{gpu['gpu_other_processes']} other process(es) on the GPU "
                                   f"({gpu.get('gpu_other_memory_gib', 0):.1f} GiB"
                                   + (f", up to {util}% of its SMs" if util is not None else "") + ")")
        out["contended"] = bool(reasons)
        out["contention"] = "; ".join(reasons) or None
        return out


def gpu_others(handle, since_us: int) -> dict:
    """Other compute processes on the GPU of ``handle``: how many, their memory and their
    highest SM utilisation since ``since_us`` (None where NVML does not sample it).

    In a container NVML reports host PIDs, so this process may not find its own PID among
    them; then it is the one process that is not another (the driver and the fork server
    never create a CUDA context), and utilisation cannot be told apart: None."""
    import pynvml

    try:
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except pynvml.NVMLError:
        return {}
    me = os.getpid()
    mine = [p for p in procs if p.pid == me]
    others = [p for p in procs if p.pid != me] if mine else procs[1:]
    out = {"gpu_other_processes": len(others),
           "gpu_other_memory_gib": sum((p.usedGpuMemory or 0) for p in others) / 2**30}
    util = None
    if others and mine:
        pids = {p.pid for p in others}
        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(handle, since_us)
            util = max([s.smUtil for s in samples if s.pid in pids], default=0)
        except pynvml.NVMLError:
            util = None
    out["gpu_other_sm_util"] = util
    return out
