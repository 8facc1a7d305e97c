"""How precisely a trial measures: a probe, or a full measurement that may race.

A configuration only needs the precision its verdict needs (issue 29):

* **probe**: the steps until the peak is settled, and speed from a few steps after it.
  Training memory repeats from the second optimizer step on: the first step allocates the
  optimizer state lazily and warms the kernels, and every later step repeats the same
  allocations. So a probe runs the first step, then the memory window (CPU: the memory
  step; CUDA: the caching allocator's peak from the second step on), then ``PROBE_STEPS``
  timed steps (two where two take ``PROBE_ENOUGH_S``), with no minimum time. Its peak is the full measurement's peak (tested on
  CPU and GPU, tests/test_fidelity.py and tests/test_gpu.py); its speed is marked low
  precision.
* **full**: the whole window (``warmup_steps``, at least ``measure_steps`` timed steps and
  ``min_measure_s`` seconds). Given ``race_speed``, the samples/s range in which its verdict
  against the best is still open, it stops early once its interval (median +- IQR, the
  spread every verdict uses) leaves that range (decided: below or above it); such a run is
  recorded ``raced``: precise enough to rank, not the whole window. One whose interval lies
  inside the range after ``measure_steps`` steps is tied within noise: it runs on to the
  whole window (``race: tied``, fidelity ``full``), as it may be named best, and a
  configuration named best always has a run of the whole window (study/fidelity.py).
"""
from __future__ import annotations

import statistics
from typing import List, Optional, Sequence

FIDELITIES = ("probe", "raced", "full")  # what a run measured; "raced": a full one its race stopped early
PROBE_STEPS = 3  # timed steps of a probe: a median of three resists one outlier
PROBE_ENOUGH_S = 1.0  # ...or two, where two take this long (slow steps: offload, fp32 at a large batch)
RACE_MIN_STEPS = 4  # a raced measurement decides on no fewer timed steps (an IQR needs four)


def speed_interval(step_times: Sequence[float], global_batch: int) -> tuple:
    """(low, median, high) samples/s: the median's samples/s -+ the IQR/median spread, as
    ``scoring.score.speed_bounds`` reads a trial's figure."""
    times = sorted(step_times)
    median = statistics.median(times)
    if len(times) >= 4:
        q = statistics.quantiles(times, n=4, method="inclusive")
        spread = (q[2] - q[0]) / median
    else:
        spread = (times[-1] - times[0]) / median
    sps = global_batch / median
    return max(0.0, sps * (1 - spread)), sps, sps * (1 + spread)


def race_verdict(step_times: Sequence[float], global_batch: int, undecided: Optional[List[float]],
                 min_steps: int) -> Optional[str]:
    """``below`` or ``above`` the open range, or ``tied`` inside it, once the timed steps so far settle the question, else
    None (go on). ``undecided``: [low, high] samples/s where the verdict is still open."""
    if not undecided or len(step_times) < max(RACE_MIN_STEPS, 1):
        return None
    lo, _, hi = speed_interval(step_times, global_batch)
    u_lo, u_hi = sorted(float(v) for v in undecided)
    if hi < u_lo:
        return "below"
    if lo > u_hi:
        return "above"
    if len(step_times) >= min_steps and u_lo <= lo and hi <= u_hi:
        return "tied"
    return None


def probe_steps(step_s: float) -> int:
    """Timed steps a probe takes at ``step_s`` seconds a step (``run.py`` stops as this says)."""
    return 2 if 2 * step_s >= PROBE_ENOUGH_S else PROBE_STEPS
