"""Loss parity: how far a strategy that changes the optimizer's numbers (low-bit state, bf16
weights) trains from the plain optimizer, over the same steps, seed and batch.

Every trial trains the same seeded model on the same synthetic batch for its micro-batch,
so two trials of one precision and micro-batch that differ only in model state start from
the same weights and see the same data: their losses step by step differ by what the
optimizer did. The reference is a measured trial of the plain optimizer with fp32 weights
at that precision and micro-batch (checkpointing, offload and the allocator do not change
the numbers), or, where none ran (it did not fit the cap), the losses of a reference run
the driver made without the cap (``reference_losses``, ``study/parity.py``).
"""
from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from autotune.train.dimensions import MODEL_STATE, in_group
from autotune.train.optimizer import MODEL_STATE_DEFAULTS, state_value


def losses_of(value: Any) -> list[float]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return [float(x) for x in value] if isinstance(value, (list, tuple)) else []


def relative_gap(losses: list[float], reference: list[float]) -> float | None:
    """The largest |loss - reference| over the steps both measured, as a fraction of the
    reference's first loss. Not of each step's own reference loss: a trial trains on one
    batch, so the losses fall towards zero, and a gap relative to a vanishing loss measures
    nothing (4-bit AdamW on a 1.1B Llama, H100: 0.041 against 0.022 at step 10, "87 %", on
    curves that were 0.7 % apart of the start at any step)."""
    pairs = [(a, b) for a, b in zip(losses, reference, strict=False) if math.isfinite(a) and math.isfinite(b)]
    if not pairs or not reference or not math.isfinite(reference[0]) or reference[0] == 0:
        return None
    return max(abs(a - b) for a, b in pairs) / abs(reference[0])


def changes_optimizer_numbers(row: Any) -> bool:
    """Does a model-state value of ``row`` change training's numbers (train/dimensions.py)?"""
    return any(state_value(d.name, row.get(d.name)) in d.numerics for d in in_group(MODEL_STATE))


def is_plain(row: Any) -> bool:
    return all(state_value(k, row.get(k)) == v for k, v in MODEL_STATE_DEFAULTS.items())


def loss_parity(df: pd.DataFrame) -> pd.Series:
    """Per trial: the loss gap to its plain-optimizer reference (``relative_gap``; NaN where the trial
    does not change the optimizer's numbers, or no reference was measured)."""
    out = pd.Series(float("nan"), index=df.index)
    if "losses" not in df:
        return out
    # Only the columns read here: a whole row of a large study's table is ~70 cells
    # (to_dict over them was 0.4 s a call on 5,000 trials).
    cols = [c for c in ("status", "precision", "micro_batch", "losses", "reference_losses", *MODEL_STATE_DEFAULTS)
            if c in df]
    rows = df[cols].to_dict("index")
    if not any(r.get("status") == "ok" and changes_optimizer_numbers(r) for r in rows.values()):
        return out
    plain: dict[tuple[str, int], list[float]] = {}
    for r in rows.values():
        if r.get("status") == "ok" and is_plain(r) and losses_of(r.get("losses")):
            plain.setdefault((r["precision"], int(r["micro_batch"])), losses_of(r["losses"]))
    for i, r in rows.items():
        if r.get("status") != "ok" or not changes_optimizer_numbers(r):
            continue
        reference = plain.get((r["precision"], int(r["micro_batch"]))) or losses_of(r.get("reference_losses"))
        gap = relative_gap(losses_of(r.get("losses")), reference) if reference else None
        if gap is not None:
            out[i] = gap
    return out
