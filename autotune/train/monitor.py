"""Memory monitoring for your own training code.

    from autotune.train.monitor import track_memory, LeakCheck

    with track_memory("forward+backward") as mem:   # or @track_memory("train_step")
        loss = model(batch).loss; loss.backward()
    print(mem.stats.peak_allocated_gib)

    leaks = LeakCheck()
    for step in ...:
        train_step()
        leaks.step()          # warns (MemoryGrowthWarning) once memory grows step after step

CUDA: ``track_memory`` resets the allocator's peak counters on entry (so an enclosing
``torch.cuda.max_memory_allocated`` reading restarts there too) and reports the peak
allocated and reserved inside the block, and NVML's used memory for the whole device at
its end (the CUDA context and other processes included). CPU: the process's peak resident
set size inside the block, above its size on entry.
"""
from __future__ import annotations

import contextlib
import logging
import statistics
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from autotune.system.linux import heap_in_use_bytes, peak_rss_bytes, reset_peak_rss, rss_bytes
from autotune.train.device import GIB, nvml_handle, nvml_used_bytes

log = logging.getLogger("autotune")


@dataclass
class MemoryStats:
    device: str
    peak_allocated_gib: float | None = None  # CUDA: the allocator's peak inside the block
    peak_reserved_gib: float | None = None  # CUDA: the caching allocator's reserved peak
    nvml_used_gib: float | None = None  # CUDA: the device's used memory at the block's end (all processes)
    peak_rss_gib: float | None = None  # CPU: peak resident set size inside the block, above entry

    def __str__(self) -> str:
        parts = [f"{k.removesuffix('_gib').replace('_', ' ')} {v:.3f} GiB" for k, v in vars(self).items()
                 if k.endswith("_gib") and v is not None]
        return ", ".join(parts)


class track_memory(contextlib.ContextDecorator):
    """Measure the memory of a block, as a ``with`` block or a function decorator.

    ``report``: called with (name, MemoryStats) at the end of each use; default: log it on
    the ``autotune`` logger at INFO. ``device``: a CUDA device (default: the current one
    when CUDA is initialised, else the CPU)."""

    def __init__(self, name: str = "block", device: str | torch.device | None = None,
                 report: Callable[..., Any] | None = None) -> None:
        self.name = name
        self.device = torch.device(device) if device is not None else None
        self.report = report or (lambda name, stats: log.info(f"memory of {name}: {stats}"))
        self.stats: MemoryStats | None = None

    def _cuda(self) -> bool:
        if self.device is not None:
            return self.device.type == "cuda"
        return torch.cuda.is_available() and torch.cuda.is_initialized()

    def __enter__(self) -> track_memory:
        if self._cuda():
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._rss0 = rss_bytes()
            reset_peak_rss()  # the kernel's peak RSS counter restarts here
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        if self._cuda():
            torch.cuda.synchronize(self.device)
            index = (self.device.index if self.device is not None and self.device.index is not None
                     else torch.cuda.current_device())
            used = nvml_used_bytes(nvml_handle(index))
            self.stats = MemoryStats("cuda", torch.cuda.max_memory_allocated(index) / GIB,
                                     torch.cuda.max_memory_reserved(index) / GIB,
                                     None if used is None else used / GIB)
        else:
            self.stats = MemoryStats("cpu", peak_rss_gib=max(0, peak_rss_bytes() - self._rss0) / GIB)
        self.report(self.name, self.stats)
        return False


class MemoryGrowthWarning(UserWarning):
    """Memory grew step after step: something keeps references (a leak)."""


class LeakCheck:
    """Call ``step()`` after each training step; warns once when memory in use climbs
    steadily: the trend over the last ``window`` steps (the median of the slopes between
    all pairs of readings) adds up to more than ``min_growth_mib``. In use:
    ``torch.cuda.memory_allocated`` on CUDA; on CPU, the bytes held from malloc (glibc's
    mallinfo2), or the resident set size where the libc has no mallinfo2. RSS alone would
    not do: a steady CPU run's RSS wanders by 100 MiB and more as the heap takes and gives
    back pages, while the bytes held from malloc stay flat to the byte."""

    def __init__(self, window: int = 10, min_growth_mib: float = 16.0,
                 device: str | torch.device | None = None) -> None:
        if window < 3:
            raise ValueError(f"window={window}: must be >= 3 steps")
        self.window, self.min_growth = window, min_growth_mib * 2**20
        self.device = torch.device(device) if device is not None else None
        self.readings: list[int] = []
        self.fired = False

    def _in_use(self) -> int:
        cuda = (self.device.type == "cuda") if self.device is not None else (
            torch.cuda.is_available() and torch.cuda.is_initialized())
        if cuda:
            torch.cuda.synchronize(self.device)
            return torch.cuda.memory_allocated(self.device)
        held = heap_in_use_bytes()
        return held if held is not None else rss_bytes()

    def step(self) -> bool:
        """Record one step; True when it found steady growth (warned the first time)."""
        self.readings.append(self._in_use())
        last = self.readings[-(self.window + 1):]
        if len(last) <= self.window:
            return False
        # The Theil-Sen slope (median of pairwise slopes), not first-to-last: one jump or dip
        # (a cache filled once, memory given back once) moves few of the pairwise slopes; a
        # leak's pairs nearly all climb, so their median is its rate per step.
        slopes = sorted((b - a) / (j - i) for i, a in enumerate(last) for j, b in enumerate(last) if j > i)
        growth = statistics.median(slopes) * self.window
        leaking = growth > self.min_growth
        if leaking and not self.fired:
            self.fired = True
            warnings.warn(f"memory in use rose by {growth / 2**20:.1f} MiB over the last {self.window} steps "
                          "(the trend of its readings): something keeps references from step to step (a stored "
                          "loss tensor instead of loss.item(), a list of outputs, a growing cache)",
                          MemoryGrowthWarning, stacklevel=2)
        return leaking
