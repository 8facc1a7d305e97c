"""Which configurations to measure again before naming a winner.

Timing varies between processes more than within one (on an H200, launch-bound small
micro-batches moved 22-23 % between fresh processes while their in-process spread was a
few per cent). So the top configurations by the run's objective, and any other whose
figure is within the measured spread of the top one, are measured again in fresh
processes; the trials table then ranks them by the median over every process. With
them: the baseline that ROI compares against (so both sides of the comparison see the
same conditions) and every trial that ran while other processes competed for its
device (trial/contention.py), whose figure is the machine's load more than its own.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from autotune.scoring.score import baseline_number, score, within_noise
from autotune.study.plan import Plan

MIN_CONTENDERS = 2  # the top two are always re-measured, so their order is checked
MAX_CONTENDERS = 4  # at most this many, nearest to the top first
MAX_CONTENDED = 8  # contended trials re-measured, best first: a machine busy throughout cannot be waited out


def contended(table: pd.DataFrame, plan: Plan) -> list[int]:
    """Trial numbers of ok trials measured only under contention, best figure first."""
    if table.empty or "contended" not in table:
        return []
    busy = table[(table["status"] == "ok") & (table["contended"].fillna(False).astype(bool))]
    return [int(n) for n in busy.sort_values("samples_per_s", ascending=False)["number"]][:MAX_CONTENDED]


def baseline(table: pd.DataFrame, plan: Plan) -> list[int]:
    """The ROI baseline's trial number, when the objective is ROI and the baseline ran ok."""
    number = baseline_number(table, plan.global_batch) if plan.objective == "roi" and not table.empty else None
    return [] if number is None else [number]


def contenders(table: pd.DataFrame, plan: Plan) -> list[int]:
    """Trial numbers of the configurations to re-measure: for each budget, best first."""
    picked: list[int] = []
    for budget in plan.budgets:
        picked += [n for n in _contenders(table, plan, budget) if n not in picked]
    return picked


def _contenders(table: pd.DataFrame, plan: Plan, budget_gib: float) -> list[int]:
    if table.empty:
        return []
    scored, _ = score(table, plan.global_batch, budget_gib, plan.roi)
    key = "roi" if plan.objective == "roi" else "samples_per_s"
    ok = scored[scored["fits_budget"] & np.isfinite(scored[key])].sort_values(key, ascending=False)
    if ok.empty:
        return []
    tied = within_noise(scored, plan.objective)
    picked = [i for n, i in enumerate(ok.index) if n < MIN_CONTENDERS or tied[i]][:MAX_CONTENDERS]
    return [int(scored.loc[i, "number"]) for i in picked]
