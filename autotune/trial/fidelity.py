"""How precisely a trial measures: a probe, or a full measurement that may race.

A configuration only needs the precision its verdict needs (issue 29):

* **probe**: the steps until the peak is settled, and speed from a few steps after it.
  Training memory repeats from the second optimizer step on: the first step allocates the
  optimizer state lazily and warms the kernels, and every later step repeats the same
  allocations, as every micro-step after a step's first repeats the one before. So a probe's
  first step is short: ``FIRST_MICRO_STEPS`` micro-steps and the optimizer step (which
  creates the state and runs every kernel a whole step runs, the accumulation into existing
  gradients included), repeated while the fp16 loss scaler skips the optimizer step (its
  first steps overflow until the scale comes down; a skipped step creates no state). Then
  the memory window (CPU: the memory step; CUDA: the caching allocator's peak from the next
  whole step on), then timed steps until they sum to ``PROBE_ENOUGH_S``, at most
  ``PROBE_STEPS``, with no minimum time: one step where a step takes a second or more, as
  a probe's speed only has to exclude a configuration far from the best. Its peak is the
  full measurement's peak (tested on CPU and GPU, tests/trial/test_fidelity.py and
  tests/test_gpu.py); its speed is marked low precision, and one timed step's spread,
  which one step cannot show, is taken as ``ONE_STEP_SPREAD``.
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
from collections.abc import Sequence

FIDELITIES = ("probe", "raced", "full")  # what a run measured; "raced": a full one its race stopped early
FIRST_MICRO_STEPS = 2  # a probe's first step: the first micro-step allocates, the second accumulates
MAX_FIRST_STEPS = 12  # ...repeated while the fp16 scaler skips it: 2**12 below its initial 65536 scale
PROBE_STEPS = 3  # timed steps of a probe: a median of three resists one outlier
PROBE_ENOUGH_S = 1.0  # ...or fewer, where fewer take this long (slow steps: fp32, many micro-steps, offload)
# One timed step shows no spread. Probes of two or three steps spread up to 27 % on an H100
# (BERT-large, 16-bit at micro-batch 4 under checkpointing, commit c000c25) and 18 % (Llama,
# benchmarks/fidelity-h100-2026-12-07/machine-a); one-step probes (fp32, steps over a
# second) read within 1.1 % of the grid's full figures there but one (-11 %, whose own
# spread in the grid was 24 %).
ONE_STEP_SPREAD = 0.25
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


def race_verdict(step_times: Sequence[float], global_batch: int, undecided: list[float] | None,
                 min_steps: int) -> str | None:
    """``below`` or ``above`` the open range, or ``tied`` inside it, once the timed steps so far
    settle the question, else None (go on). ``undecided``: [low, high] samples/s where the verdict is still open."""
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


def probe_done(step_times: Sequence[float]) -> bool:
    """Has a probe timed enough steps (``run.py`` stops as this says)?"""
    return len(step_times) >= PROBE_STEPS or sum(step_times) >= PROBE_ENOUGH_S


def probe_steps(step_s: float) -> int:
    """Timed steps a probe takes at ``step_s`` seconds a step (as ``probe_done`` decides)."""
    steps: list[float] = []
    while not probe_done(steps):
        steps.append(step_s)
    return len(steps)
