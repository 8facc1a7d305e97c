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
import warnings
from dataclasses import dataclass
from typing import Callable, List, Optional

import torch

from autotune.train.device import GIB, nvml_handle, nvml_used_bytes
from autotune.system.linux import peak_rss_bytes, reset_peak_rss, rss_bytes

log = logging.getLogger("autotune")


@dataclass
class MemoryStats:
    device: str
    peak_allocated_gib: Optional[float] = None  # CUDA: the allocator's peak inside the block
    peak_reserved_gib: Optional[float] = None  # CUDA: the caching allocator's reserved peak
    nvml_used_gib: Optional[float] = None  # CUDA: the device's used memory at the block's end (all processes)
    peak_rss_gib: Optional[float] = None  # CPU: peak resident set size inside the block, above entry

    def __str__(self) -> str:
        parts = [f"{k.removesuffix('_gib').replace('_', ' ')} {v:.3f} GiB" for k, v in vars(self).items()
                 if k.endswith("_gib") and v is not None]
        return ", ".join(parts)


class track_memory(contextlib.ContextDecorator):
    """Measure the memory of a block, as a ``with`` block or a function decorator.

    ``report``: called with (name, MemoryStats) at the end of each use; default: log it on
    the ``autotune`` logger at INFO. ``device``: a CUDA device (default: the current one
    when CUDA is initialised, else the CPU)."""

    def __init__(self, name: str = "block", device=None, report: Optional[Callable] = None):
        self.name = name
        self.device = torch.device(device) if device is not None else None
        self.report = report or (lambda name, stats: log.info(f"memory of {name}: {stats}"))
        self.stats: Optional[MemoryStats] = None

    def _cuda(self) -> bool:
        if self.device is not None:
            return self.device.type == "cuda"
        return torch.cuda.is_available() and torch.cuda.is_initialized()

    def __enter__(self) -> "track_memory":
        if self._cuda():
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._rss0 = rss_bytes()
            reset_peak_rss()  # the kernel's peak RSS counter restarts here
        return self

    def __exit__(self, *exc) -> bool:
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
    """Call ``step()`` after each training step; warns once when, over the last ``window``
    steps, memory in use rose by more than ``min_growth_mib`` and a later reading was at
    or above an earlier one in at least ``share`` of all pairs of readings. In use: ``torch.cuda.memory_allocated`` on CUDA, the resident set size on CPU.
    A steady run's memory is flat after its first steps; a leak's climbs every step."""

    def __init__(self, window: int = 10, share: float = 0.8, min_growth_mib: float = 16.0, device=None):
        if window < 3:
            raise ValueError(f"window={window}: must be >= 3 steps")
        self.window, self.share, self.min_growth = window, share, min_growth_mib * 2**20
        self.device = torch.device(device) if device is not None else None
        self.readings: List[int] = []
        self.fired = False

    def _in_use(self) -> int:
        cuda = (self.device.type == "cuda") if self.device is not None else (
            torch.cuda.is_available() and torch.cuda.is_initialized())
        if cuda:
            torch.cuda.synchronize(self.device)
            return torch.cuda.memory_allocated(self.device)
        return rss_bytes()

    def step(self) -> bool:
        """Record one step; True when it found steady growth (warned the first time)."""
        self.readings.append(self._in_use())
        last = self.readings[-(self.window + 1):]
        if len(last) <= self.window:
            return False
        # Rank trend, not step-to-step: of all pairs of readings, the share where the later
        # one is not below the earlier. An allocator hands memory out in chunks and gives
        # some back now and then, so a leak's readings rise with flat steps and a few dips;
        # a steady run's stay flat (every pair "not below", but no growth).
        pairs = [(a, b) for i, a in enumerate(last) for b in last[i + 1:]]
        held = sum(b >= a for a, b in pairs) / len(pairs)
        growth = last[-1] - last[0]
        leaking = held >= self.share and growth > self.min_growth
        if leaking and not self.fired:
            self.fired = True
            warnings.warn(f"memory in use rose by {growth / 2**20:.1f} MiB over the last {self.window} steps, "
                          f"later readings at or above earlier ones in {held:.0%} of pairs: something keeps "
                          "references from step to step (a stored loss tensor instead of loss.item(), a list of "
                          "outputs, a growing cache)", MemoryGrowthWarning, stacklevel=2)
        return leaking
