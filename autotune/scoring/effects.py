"""Each strategy's measured effect against plain fp32 without checkpointing.

Pairs are compared at one reference micro-batch, so only the strategy differs: the
baseline's (micro_batch = global_batch) when it ran, else the largest micro-batch at
which none/fp32 ran. The article's claims are quoted beside each effect.
"""
from __future__ import annotations

from typing import Optional

import pandas as pd

from autotune.train.strategy import checkpoint_label

# (label, checkpointing, precision, offload, allocator, the article's claim)
EFFECTS = [
    ("activation checkpointing (full)", "full", "fp32", False, "default", "-60 to -70 % memory, +20 to +30 % time"),
    ("selective checkpointing (half the blocks)", "0.5", "fp32", False, "default", "between none and full"),
    ("AMP bf16", "none", "bf16", False, "default", "-40 % memory, 3x speed (-67 % time)"),
    ("AMP fp16", "none", "fp16", False, "default", "-40 % memory, 3x speed (-67 % time)"),
    ("checkpointing + bf16", "full", "bf16", False, "default", "-50 to -80 % memory"),
    ("checkpointing + fp16", "full", "fp16", False, "default", "-50 to -80 % memory"),
    ("activation offload", "none", "fp32", True, "default", "less device memory, much slower (PCIe-bound)"),
    ("expandable segments", "none", "fp32", False, "expandable", "less fragmentation (reserved - allocated)"),
]


def _match(trials: pd.DataFrame, ckpt: str, prec: str, offload: bool = False, allocator: str = "default") -> pd.Series:
    labels = trials["checkpointing"].map(checkpoint_label)
    off = trials["offload"].fillna(False).astype(bool) if "offload" in trials else pd.Series(False, index=trials.index)
    alloc = trials["allocator"].fillna("default") if "allocator" in trials else pd.Series("default", index=trials.index)
    return (labels == ckpt) & (trials["precision"] == prec) & (off == offload) & (alloc == allocator)


def reference_micro_batch(trials: pd.DataFrame, global_batch: int) -> Optional[int]:
    plain = trials[_match(trials, "none", "fp32") & (trials["status"] == "ok")]
    if (plain["micro_batch"] == global_batch).any():
        return global_batch
    return int(plain["micro_batch"].max()) if len(plain) else None


def _row(trials: pd.DataFrame, ckpt: str, prec: str, mb: int, offload: bool = False, allocator: str = "default"):
    m = trials[_match(trials, ckpt, prec, offload, allocator) & (trials["micro_batch"] == mb)]
    return m.iloc[0] if len(m) else None


def strategy_effects(trials: pd.DataFrame, global_batch: int) -> pd.DataFrame:
    """memory_change and time_change (per sample) of each strategy against none/fp32."""
    mb = reference_micro_batch(trials, global_batch)
    rows = []
    ref = _row(trials, "none", "fp32", mb) if mb is not None else None
    for label, ckpt, prec, offload, allocator, claim in EFFECTS:
        row = {"strategy": label, "micro_batch": mb, "memory_change": None, "time_change": None,
               "measured": "", "article_claim": claim}
        other = _row(trials, ckpt, prec, mb, offload, allocator) if mb is not None else None
        if ref is None:
            row["measured"] = "no none/fp32 trial ran ok: nothing to compare against"
        elif other is None:
            row["measured"] = "not in the search space"
        elif other["status"] != "ok":
            row["measured"] = f"trial ended '{other['status']}'"
        else:
            row["memory_change"] = other["peak_memory_gib"] / ref["peak_memory_gib"] - 1
            row["time_change"] = ref["samples_per_s"] / other["samples_per_s"] - 1
            row["measured"] = f"memory {100 * row['memory_change']:+.0f} %, time {100 * row['time_change']:+.0f} %"
        rows.append(row)
    return pd.DataFrame(rows)
