"""Which precision each measurement of a study gets (``trial.fidelity``; trial/fidelity.py).

With ``trial.fidelity=auto`` (the default) the search measures each configuration it picks
with a probe: its peak exactly, its speed from a few steps. That answers what most of them
are measured for: whether they fit, and where they sit on the front, far from the best.
Then the contenders by the probes' figures are measured in full, each in a fresh process:
the top one over the whole window, the others raced against the best full figure (each
stops as soon as its interval is below, above or inside the range where its verdict is
open). Whatever is then named best for a budget, and has no run of the whole window, gets
one, until the best of every budget has. The configurations still tied with the best then
get one more interleaved round where the ranking rests on contended figures or
``trial.repeats`` asks for more than one. ``trial.fidelity=full`` measures every trial over
the whole window, as before.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from autotune.scoring.score import choose_best, objective_column, score, speed_at_objective
from autotune.scoring.score import contenders as tied_contenders
from autotune.study.confirm import MAX_CONTENDERS, contenders
from autotune.study.plan import Plan

MAX_FINAL_ROUNDS = 4  # interleaved rounds of the configurations tied at the top (trial.repeats - 1, capped)
MAX_BEST_ROUNDS = 6  # rounds of "measure the best in full" before the verdict is given as it stands
FULL_ROUND = 3  # contenders by the probes measured in full at once (a best outside them gets its own round)


def search_fidelity(plan: Plan) -> str:
    """The fidelity of a trial the search picks."""
    return "probe" if plan.fidelity == "auto" else "full"


def _by_number(table: pd.DataFrame, number: int):
    rows = table[table["number"] == number]
    return None if rows.empty else rows.iloc[0]


def race_range(table: pd.DataFrame, plan: Plan, number: int) -> list[float] | None:
    """The samples/s range in which the verdict on trial ``number``'s configuration against the best fully measured
    configuration of the primary budget is still open, or None (nothing to race against)."""
    if table.empty:
        return None
    scored, baseline = score(table, plan.global_batch, plan.budgets[0], plan.roi)
    key = objective_column(plan.objective)
    full = scored[scored["fits_budget"] & (scored["fidelity"] != "probe") & np.isfinite(scored[key])]
    mine = scored[scored["number"] == number]
    if full.empty or mine.empty:
        return None
    best = full.loc[full[key].idxmax()]
    if int(best["number"]) == int(mine.iloc[0]["number"]):
        return None
    lo, hi = best.get(f"{key}_lo"), best.get(f"{key}_hi")
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    peak = float(mine.iloc[0]["peak_memory_gib"])
    speeds = [speed_at_objective(plan.objective, peak, float(v), baseline, plan.roi) for v in (lo, hi)]
    known = [float(s) for s in speeds if s is not None]
    if len(known) < len(speeds):
        return None
    return sorted(known)


def full_round(table: pd.DataFrame, plan: Plan) -> list[tuple]:
    """(trial number, race?) of the contenders to measure in full after the search: by the
    probes' figures, best first; the first runs the whole window, the others race."""
    numbers = [n for n in contenders(table, plan) if (row := _by_number(table, n)) is not None
               and row.get("fidelity") == "probe"][:FULL_ROUND]
    return [(n, k > 0) for k, n in enumerate(numbers)]


def best_without_window(table: pd.DataFrame, plan: Plan) -> list[int]:
    """Trial numbers of the configurations named best (any budget) whose row has no run of
    the whole window: each gets one before the verdict."""
    out = []
    for budget in plan.budgets:
        scored, _ = score(table, plan.global_batch, budget, plan.roi)
        best = choose_best(scored, plan.objective)
        if best is not None and scored.loc[best, "fidelity"] != "full":
            n = int(scored.loc[best, "number"])
            if n not in out:
                out.append(n)
    return out


def final_rounds(table: pd.DataFrame, plan: Plan) -> int:
    """How many interleaved rounds the configurations still tied with the best get
    (``final_round``): ``trial.repeats`` counts the full measurements of a close contender
    (the first is its full round), and a tie that rests on a contended figure gets one at least."""
    tied = final_round(table, plan)
    if not tied:
        return 0
    busy = table[table["number"].isin(tied)].get("contended", pd.Series(dtype=bool)).fillna(False).astype(bool).any()
    return min(max(plan.repeats - 1, 1 if busy else 0), MAX_FINAL_ROUNDS)


def final_round(table: pd.DataFrame, plan: Plan) -> list[int]:
    """Trial numbers of the configurations still tied with the best of some budget, to be
    measured once more in fresh processes, interleaved: where the tie rests on a contended
    figure (a steady load then weighs on both sides alike), or ``trial.repeats`` asks for
    more than the one full measurement."""
    out: list[int] = []
    for budget in plan.budgets:
        scored, _ = score(table, plan.global_batch, budget, plan.roi)
        tied = scored[tied_contenders(scored, plan.objective)]
        if len(tied) < 2:
            continue
        busy = tied.get("contended", pd.Series(False, index=tied.index)).fillna(False).astype(bool).any()
        if busy or plan.repeats > 1:
            out += [int(n) for n in tied["number"] if int(n) not in out]
    return out[:MAX_CONTENDERS]


def effort_line(trials: list) -> str:
    """The run's last word on its cost: how many probes, full and raced measurements and
    repeats ran, and the trial processes' total wall time (``trials``: the study's)."""
    counts = {"probe": 0, "raced": 0, "full": 0}
    repeats, wall = 0, 0.0
    for t in trials:
        a = t.user_attrs
        if not t.state.is_finished() or a.get("status") in (None, "skipped", "pruned", "interrupted"):
            continue
        if isinstance(a.get("wall_s"), (int, float)):
            wall += float(a["wall_s"])
        if a.get("status") == "ok":
            counts[a.get("fidelity") if a.get("fidelity") in counts else "full"] += 1
        repeats += bool(a.get("repeat"))
    parts = [f"{n} {name}" for name, n in (("probe(s)", counts["probe"]), ("full measurement(s)", counts["full"]),
                                           ("raced", counts["raced"])) if n]
    return (f"measured: {', '.join(parts) or 'nothing'}" + (f" ({repeats} of them re-measurements)" if repeats else "")
            + f"; trial processes ran {wall:.0f} s in all")
