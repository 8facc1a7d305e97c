"""Each strategy's measured effect against plain fp32 without checkpointing.

Pairs are compared at one reference micro-batch, so only the strategy differs: the
baseline's (micro_batch = global_batch) when it ran, else the largest micro-batch at
which none/fp32 ran. Commonly quoted rules of thumb for each technique stand beside the
measured effect (they are not measurements; the point is to see where this model differs).

The time effect carries the interval that both trials' measured spreads allow; it is stated
as a change only when that interval excludes no change, and otherwise as within noise.
Memory is measured to the byte, but runs of one configuration may differ by up to
MEMORY_NOISE (the repeat check's threshold), so a smaller memory change is within noise too.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from autotune.scoring.score import plain_with, speed_bounds
from autotune.train.values import is_true

MEMORY_NOISE = 0.02  # runs of one configuration whose peaks differ by more are flagged (repeats)

# (label, what differs from the plain strategy, the commonly quoted rule of thumb)
EFFECTS: list[tuple[str, dict[str, Any], str]] = [
    ("activation checkpointing (full)", {"checkpointing": "full"}, "-60 to -70 % memory, +20 to +30 % time"),
    ("selective checkpointing (half the blocks)", {"checkpointing": "0.5"}, "between none and full"),
    ("AMP bf16", {"precision": "bf16"}, "-40 % memory, 3x speed (-67 % time)"),
    ("AMP fp16", {"precision": "fp16"}, "-40 % memory, 3x speed (-67 % time)"),
    ("checkpointing + bf16", {"checkpointing": "full", "precision": "bf16"}, "-50 to -80 % memory"),
    ("checkpointing + fp16", {"checkpointing": "full", "precision": "fp16"}, "-50 to -80 % memory"),
    ("activation offload", {"offload": True}, "less device memory, much slower (PCIe-bound)"),
    ("expandable segments", {"allocator": "expandable"}, "less fragmentation (reserved - allocated)"),
]


def reference_micro_batch(trials: pd.DataFrame, global_batch: int) -> int | None:
    plain = trials[plain_with(trials, {}) & (trials["status"] == "ok")]
    if (plain["micro_batch"] == global_batch).any():
        return global_batch
    return int(plain["micro_batch"].max()) if len(plain) else None


def _row(trials: pd.DataFrame, changes: dict[str, Any], mb: int) -> pd.Series | None:
    m = trials[plain_with(trials, changes) & (trials["micro_batch"] == mb)]
    return m.iloc[0] if len(m) else None


def _speed_range(row: pd.Series) -> tuple[float, float]:
    """(low, high) samples/s within the trial's measured spread; low clamped at zero."""
    spread = row.get("time_spread")
    spread = 0.0 if spread is None or not np.isfinite(spread) else max(float(spread), 0.0)
    return speed_bounds(float(row["samples_per_s"]), spread)


def _pct(v: float) -> str:
    return "unbounded" if not np.isfinite(v) else f"{100 * v:+.0f} %"


NOISE = "not separable from noise here"


def _rests_on(ref: pd.Series, other: pd.Series) -> str:
    """The measurements an effect rests on: the two trials and how each was measured."""
    def how(row: pd.Series) -> str:
        if row.get("fidelity") == "probe":
            return "probe, one timed step" if is_true(row.get("spread_assumed")) else "probe"
        if is_true(row.get("contended")):
            return "under load"
        return "full measurement" if row.get("fidelity") in ("full", "raced") else "measured"
    return f"trial {int(other['number'])} ({how(other)}) against trial {int(ref['number'])} ({how(ref)})"


def strategy_effects(trials: pd.DataFrame, global_batch: int) -> pd.DataFrame:
    """Each strategy's effect against none/fp32 at one micro-batch.

    Columns: ``memory`` and ``time`` (a finding, or ``NOISE``), ``memory_finding`` and
    ``time_finding`` (whether each is one), the figures behind them (``memory_change``,
    ``time_change`` and its interval ``time_change_lo``/``_hi``, per sample), ``rests_on``
    (the two trials and how each was measured) and ``measured`` (one sentence of both, or
    why there is nothing to compare). A time change is a finding only when its interval
    excludes no change; a memory change only when larger than runs of one configuration
    differ by (``MEMORY_NOISE``)."""
    mb = reference_micro_batch(trials, global_batch)
    rows = []
    ref = _row(trials, {}, mb) if mb is not None else None
    for label, changes, claim in EFFECTS:
        row: dict[str, Any] = {"strategy": label, "micro_batch": mb, "memory": "", "time": "", "rests_on": "",
               "rule_of_thumb": claim, "memory_change": None, "time_change": None, "time_change_lo": None,
               "time_change_hi": None, "memory_finding": False, "time_finding": False, "measured": ""}
        other = _row(trials, changes, mb) if mb is not None else None
        if ref is None:
            row["measured"] = "no none/fp32 trial ran ok: nothing to compare against"
        elif other is None:
            row["measured"] = f"not measured at micro_batch {mb} (outside the space, or ruled out by search=auto)"
        elif other["status"] != "ok":
            row["measured"] = f"trial ended '{other['status']}'" + (
                f": {other['cause']}" if other["status"] == "skipped" and isinstance(other.get("cause"), str) else "")
        else:
            mem = other["peak_memory_gib"] / ref["peak_memory_gib"] - 1
            (ref_lo, ref_hi), (oth_lo, oth_hi) = _speed_range(ref), _speed_range(other)
            time = ref["samples_per_s"] / other["samples_per_s"] - 1
            lo = ref_lo / oth_hi - 1
            hi = ref_hi / oth_lo - 1 if oth_lo > 0 else float("inf")
            mem_found, time_found = abs(mem) > MEMORY_NOISE, lo > 0 or hi < 0
            row.update(memory_change=mem, time_change=time, time_change_lo=lo, time_change_hi=hi,
                       memory_finding=mem_found, time_finding=time_found, rests_on=_rests_on(ref, other),
                       memory=f"{100 * mem:+.0f} %" if mem_found else NOISE,
                       time=f"{100 * time:+.0f} % ({_pct(lo)} to {_pct(hi)})" if time_found else NOISE)
            memory = (f"memory {100 * mem:+.0f} %" if mem_found
                      else f"memory within noise ({100 * mem:+.1f} %, runs differ by up to {100 * MEMORY_NOISE:.0f} %)")
            timing = (f"time {row['time']}" if time_found
                      else f"time within noise ({_pct(lo)} to {_pct(hi)}: no change is inside the spreads)")
            row["measured"] = f"{memory}, {timing}"
        if not row["memory"]:
            row["memory"] = row["time"] = row["measured"]
        rows.append(row)
    return pd.DataFrame(rows)
