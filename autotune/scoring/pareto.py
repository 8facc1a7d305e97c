"""Pareto front of peak memory (lower is better) against throughput (higher is better)."""
from __future__ import annotations

from typing import Any

import numpy as np


def pareto_mask(memory: Any, throughput: Any) -> np.ndarray:
    """True for each point no other point dominates.

    A point dominates another when it uses no more memory and is no slower, and is strictly
    better in one of the two. Exact ties dominate neither, so both stay on the front.
    Points with a non-finite value (NaN, inf) are never on the front.
    """
    mem = np.asarray(memory, dtype=float)
    thr = np.asarray(throughput, dtype=float)
    valid = np.isfinite(mem) & np.isfinite(thr)
    mask = valid.copy()
    for i in np.flatnonzero(valid):
        others = valid.copy()
        others[i] = False
        no_worse = (mem <= mem[i]) & (thr >= thr[i])
        better = (mem < mem[i]) | (thr > thr[i])
        if np.any(others & no_worse & better):
            mask[i] = False
    return np.asarray(mask, dtype=bool)
