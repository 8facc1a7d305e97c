"""What changed since a study's last run: a rerun that picks another best says so, and why.

Each run of ``python -m autotune`` keeps, in the study, what it picked (the trial, its
figure, how many processes measured it, the last trial number, the budget and objective).
The next run compares its own pick with that record; the usual causes of a change are new
trials, a re-measurement that moved a figure, or other settings."""
from __future__ import annotations

import time

import numpy as np
import optuna
import pandas as pd

from autotune.scoring.score import objective_column
from autotune.scoring.settings import Scoring

LAST_BEST_ATTR = "last_best"
MOVED = 0.005  # a figure that moved by less than this is the same figure


def _runs(row) -> int:
    runs = row.get("samples_per_s_runs")
    return len(str(runs).split(";")) if isinstance(runs, str) and runs else 1


def _label(row) -> str:
    return f"{row['checkpointing']}/{row['precision']}/mb{int(row['micro_batch'])}x{int(row['accumulation'])}"


def pick_record(scored: pd.DataFrame, best: int, scoring: Scoring) -> dict:
    b, key = scored.loc[best], objective_column(scoring.objective)
    return {"number": int(b["number"]), "label": _label(b), "figure": float(b[key]), "runs": _runs(b),
            "last_trial": int(scored["number"].max()), "budget_gib": float(scoring.primary_budget),
            "objective": scoring.objective, "when": time.strftime("%Y-%m-%d %H:%M", time.localtime())}


def remember_best(study: optuna.Study, scored: pd.DataFrame, best: int | None, scoring: Scoring) -> None:
    if best is not None:
        study.set_user_attr(LAST_BEST_ATTR, pick_record(scored, best, scoring))


def last_best(study: optuna.Study) -> dict | None:
    return study.user_attrs.get(LAST_BEST_ATTR)


def best_change(previous: dict | None, scored: pd.DataFrame, best: int | None, scoring: Scoring) -> str | None:
    """A sentence when this run's best differs from the previous run's, else None."""
    if not previous or best is None or int(scored.loc[best, "number"]) == previous["number"]:
        return None
    now, key = pick_record(scored, best, scoring), objective_column(scoring.objective)
    text = (f"the last run of this study ({previous['when']}) picked trial {previous['number']} ({previous['label']}, "
            f"{_fmt(previous['figure'], key)}); this one picks trial {now['number']} ({now['label']}, "
            f"{_fmt(now['figure'], key)}). ")
    if (previous["budget_gib"], previous["objective"]) != (now["budget_gib"], now["objective"]):
        return text + (f"The settings differ: then {previous['budget_gib']:g} GiB by {previous['objective']}, now "
                       f"{now['budget_gib']:g} GiB by {now['objective']}.")
    reasons = []
    if now["number"] > previous["last_trial"]:
        reasons.append(f"trial {now['number']} was measured after the last run")
    old = scored[scored["number"] == previous["number"]]
    if len(old):
        o = old.iloc[0]
        if not bool(o.get("fits_budget", True)):
            reasons.append(f"trial {previous['number']} no longer fits the budget")
        elif np.isfinite(o[key]) and abs(o[key] - previous["figure"]) > MOVED * abs(previous["figure"]):
            more = _runs(o) - previous["runs"]
            reasons.append(f"trial {previous['number']}'s {key} moved from {_fmt(previous['figure'], key)} to "
                           f"{_fmt(o[key], key)}" + (f" after {more} more measurement(s)" if more > 0 else ""))
    if not reasons:
        reasons.append("the two are tied within noise, and the figures moved within their spreads; the tie rule "
                       "(stable first, then less memory) now ranks them the other way")
    return text + "Why: " + "; ".join(reasons) + "."


def _fmt(v: float, key: str) -> str:
    return f"ROI {v:.3g}" if key == "roi" else f"{v:.1f} samples/s"
