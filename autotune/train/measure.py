"""Memory and time measurement inside a trial process.

CUDA: the caching allocator's peaks (reset at the start of the measured window), its
retry counter, and NVML's device-level used memory, which includes the CUDA context that
the allocator does not see.

CPU: the process's peak resident set size during one optimizer step, above its size just
before the model was built. glibc's heap keeps freed tensors' pages, so a plain RSS peak
is the high-water mark of every earlier step and hides what checkpointing saves
(measured: equal peaks with and without it). So the probe makes glibc map each
allocation over 64 KiB on its own (returned to the system when freed) from before the
model is built until that memory step ends, resets the kernel's peak counter at its start
(/proc/self/clear_refs), then gives glibc its usual heap back (mmap threshold 32 MiB, its
own maximum) for the warm-up and timed steps. Pages of mapped files (library code) that
become resident after the baseline are subtracted: they are not the trial's memory, and a
process forked from a pre-imported parent maps them again as it first runs the code
(measured: +20 % on a tiny model's peak without this correction).
Nor is process memory that the first step left resident and that holds no training tensor
(the autograd engine's and the thread pools' first allocations, and the code and caches
torch.compile builds for torchao's optimizers: 36 MB and 89 MB on a 5 MB model): at the
memory step's start, what is resident beyond the weights and the optimizer state is
subtracted from its peak, so the peak is those tensors plus what the step itself added.
"""
from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from autotune.system.linux import mmap_threshold, peak_rss_bytes, reset_peak_rss, rss_bytes, status_bytes
from autotune.train.device import GIB, nvml_handle, nvml_used_bytes


def _rss_file_bytes() -> int:
    """Resident pages of mapped files (the libraries' code and data): not the trial's memory."""
    return status_bytes("RssFile") or 0


class CpuMemory:
    device = "cpu"
    separate_window = True  # memory is measured in a step of its own, before the timed ones

    def __init__(self) -> None:
        self.mapped = mmap_threshold(64 * 1024)
        self.baseline = rss_bytes()
        self.baseline_file = _rss_file_bytes()
        self.method = "lifetime peak RSS"

    def start_window(self, tensor_bytes: int | None = None) -> None:
        """``tensor_bytes``: the training tensors resident now (weights, optimizer state)."""
        self.untracked = 0
        if tensor_bytes is not None:
            anon = rss_bytes() - self.baseline - max(0, _rss_file_bytes() - self.baseline_file)
            self.untracked = max(0, anon - tensor_bytes)
        if reset_peak_rss() and self.mapped:  # else the lifetime peak it is, recorded as such
            self.method = "peak RSS of one step, large allocations mapped"

    def end_window(self) -> dict[str, Any]:
        result = self.finish()
        mmap_threshold(32 * 1024 * 1024)
        return result

    def in_use(self) -> int:
        return rss_bytes() - self.baseline

    def finish(self) -> dict[str, Any]:
        library_pages = max(0, _rss_file_bytes() - self.baseline_file)
        peak = peak_rss_bytes() - self.baseline - library_pages
        untracked = getattr(self, "untracked", 0)
        return {"peak_memory_gib": (peak - untracked) / GIB, "peak_rss_gib": peak / GIB,
                "untracked_rss_gib": untracked / GIB, "baseline_rss_gib": self.baseline / GIB,
                "cpu_memory_method": self.method + (", less untracked resident memory" if untracked else "")}


class CudaMemory:
    device = "cuda"
    separate_window = False  # the peak covers the timed steps themselves

    def __init__(self, index: int) -> None:
        self.index = index
        self.handle = nvml_handle(index)
        self.nvml_before = nvml_used_bytes(self.handle)  # other processes' use, before our context
        torch.cuda.set_device(index)
        torch.cuda.mem_get_info(index)  # creates the context, and allocates nothing
        torch.cuda.synchronize(index)
        after = nvml_used_bytes(self.handle)
        self.context = (None if after is None or self.nvml_before is None
                        else after - self.nvml_before - torch.cuda.memory_reserved(index))

    def limit(self, budget_gib: float | None) -> dict[str, Any]:
        """Simulate a card of ``budget_gib``: cap this process's caching allocator at the
        budget less the CUDA context, so a trial that would not fit such a card runs out of
        memory here too. Not simulated: the other card's speed, and memory other processes
        or the driver would hold on it."""
        if not budget_gib:
            return {}
        total = torch.cuda.get_device_properties(self.index).total_memory
        cap = budget_gib * GIB - (self.context or 0)
        torch.cuda.set_per_process_memory_fraction(max(0.0, min(1.0, cap / total)), self.index)
        return {"memory_cap_gib": cap / GIB}

    def start_window(self) -> None:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def in_use(self) -> int:
        return torch.cuda.memory_allocated()

    def finish(self) -> dict[str, Any]:
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        reserved = torch.cuda.max_memory_reserved()
        out = {
            "peak_memory_gib": reserved / GIB,  # the figure ROI and the Pareto front use
            "peak_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
            "peak_reserved_gib": reserved / GIB,
            "fragmentation_gib": (torch.cuda.memory_reserved() - torch.cuda.memory_allocated()) / GIB,
            "num_alloc_retries": int(stats.get("num_alloc_retries", 0)),
        }
        used = nvml_used_bytes(self.handle)
        if used is not None and self.nvml_before is not None and self.context is not None:
            out["nvml_used_gib"] = (used - self.nvml_before) / GIB  # this process's share, context included
            out["cuda_context_gib"] = self.context / GIB
            # What the device must hold for this configuration: the fit test uses this.
            out["device_peak_gib"] = (reserved + self.context) / GIB
        else:
            out["device_peak_gib"] = reserved / GIB
        return out


def host_link_gib_s(index: int, size_mib: int = 256, repeats: int = 3) -> float:
    """The fastest copy between pinned host memory and device ``index`` seen in either
    direction, in GiB/s: the rate offload's copies can reach at best. Run after a trial's
    measurement, never before it."""
    host = torch.empty(size_mib << 20, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty_like(host, device=f"cuda:{index}")
    best = 0.0
    for _ in range(repeats):
        for dst, src in ((dev, host), (host, dev)):
            torch.cuda.synchronize(index)
            t = time.perf_counter()
            dst.copy_(src)
            torch.cuda.synchronize(index)
            best = max(best, (size_mib / 1024) / (time.perf_counter() - t))
    del host, dev
    torch.cuda.empty_cache()
    return best


def memory_probe(device: str) -> CudaMemory | CpuMemory:
    if device.startswith("cuda"):
        return CudaMemory(int(device.split(":")[1]) if ":" in device else 0)
    return CpuMemory()


def step_time_stats(step_times: list[float], global_batch: int) -> dict[str, Any]:
    """Median step time, its spread (IQR / median) and samples per second."""
    times = sorted(step_times)
    median = statistics.median(times)
    if len(times) >= 4:
        q = statistics.quantiles(times, n=4, method="inclusive")
        iqr = q[2] - q[0]
    else:
        iqr = times[-1] - times[0]
    return {
        "step_time_s": median,
        "step_time_min_s": times[0],
        "step_time_max_s": times[-1],
        "time_spread": iqr / median if median > 0 else float("nan"),
        "samples_per_s": global_batch / median if median > 0 else float("nan"),
    }


def memory_growth_gib(in_use_after_each_step: list[int]) -> float | None:
    """Memory held after the last measured step minus after the first: a leak signal."""
    if len(in_use_after_each_step) < 2:
        return None
    return (in_use_after_each_step[-1] - in_use_after_each_step[0]) / GIB
