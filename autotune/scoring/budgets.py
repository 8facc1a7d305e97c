"""The best configuration for each memory budget, from one set of measured trials.

Trials run capped to the largest budget (``Plan.memory_cap_gib``). A trial fits a budget
when its device-level peak (reserved memory plus the CUDA context) is within it, so the
same trials answer every smaller budget. What this misses: a configuration that overflows
a smaller budget only through the allocator's cache could still fit a card of that size
(the allocator frees its cache and retries before it fails); here it counts as not
fitting, so the answer errs on the safe side.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from autotune.scoring.score import Baseline, choose_best, contenders, objective_column, score, within_noise
from autotune.scoring.settings import Scoring
from autotune.train.dimensions import DIMENSIONS, short_label
from autotune.train.strategy import Strategy


@dataclass
class BudgetResult:
    budget_gib: float
    scored: pd.DataFrame
    baseline: Baseline
    best: int | None  # index into scored
    why: str


def budget_label(budget_gib: float) -> str:
    return f"{budget_gib:g}GiB"


def why_best(scored: pd.DataFrame, best: int | None, objective: str, budget_gib: float) -> str:
    """Why the winner won, in one sentence: which rule decided (a lead larger than both
    spreads, or a tie within noise broken by stability, then memory, among the tied whose
    figure reaches the best lower bound), which rivals it beat
    or tied, and what would have beaten it without the budget."""
    if best is None:
        return f"nothing that ran ok fits {budget_gib:g} GiB"
    key = objective_column(objective)
    fitting = int(scored["fits_budget"].sum())
    eligible = contenders(scored, objective)
    rivals = scored[eligible].drop(index=best)
    aside = scored[within_noise(scored, objective) & ~eligible]
    if len(rivals) or len(aside):
        b = scored.loc[best]
        noisy = rivals["noisy"].fillna(False).astype(bool)
        alike = rivals[noisy == bool(b.get("noisy", False))]  # choose_best: stable first, then memory
        rule = ("the only one whose figure reaches the best lower bound among them" if rivals.empty
                else "the only stable one (the others are noisy or contended)" if alike.empty
                else "the one using least memory" + (" of the stable ones" if len(alike) < len(rivals) else "")
                if (alike["peak_memory_gib"] > b["peak_memory_gib"]).all()
                else f"the highest {objective} of those as stable and as small")
        text = (f"tied within noise on {objective} with {len(rivals) + len(aside)} other(s) of the {fitting} "
                f"that fit" + (f" ({_named(rivals, key)})" if len(rivals) else "") + f"; chosen as {rule}")
        if len(aside):
            text += (f"; {len(aside)} of them set aside, tied only through a wide interval: their figure is "
                     f"below the best lower bound among the tied ({_named(aside, key)})")
    else:
        others = scored[scored["fits_budget"] & np.isfinite(scored[key])].drop(index=best)
        text = f"the best {objective} of the {fitting} configuration(s) that fit"
        if len(others):
            text += f", ahead of the runner-up by more than both spreads ({_named(others.nlargest(1, key), key)})"
    text += _load_note(scored, best, rivals if len(rivals) or len(aside) else None)
    ok = scored[(scored["status"] == "ok") & np.isfinite(scored["samples_per_s"])]
    b = scored.loc[best]
    faster = ok[(ok["samples_per_s"] > b["samples_per_s"]) & ~ok["fits_budget"]]
    if len(faster):
        f = faster.sort_values("samples_per_s").iloc[-1]
        text += (f"; faster without the budget: checkpointing={f['checkpointing']} precision={f['precision']} "
                 f"micro_batch={int(f['micro_batch'])} ({f['samples_per_s']:.1f} samples/s) needs "
                 f"{f.get('device_peak_gib', f['peak_memory_gib']):.2f} GiB")
    return text


def _load_note(scored: pd.DataFrame, best: Any, rivals: pd.DataFrame | None) -> str:
    """Plain words where the verdict rests on figures measured while other processes competed
    for the device: then absolute speeds are the load's, and only a tie is claimed."""
    busy = scored.get("contended", pd.Series(False, index=scored.index)).fillna(False).astype(bool)
    involved = [best] + ([] if rivals is None else list(rivals.index))
    if not busy[involved].any():
        return ""
    if rivals is not None:
        return ("; tied under load: the top configurations were measured while other processes competed for the "
                "device, so their order is not certain and the absolute speeds reflect the load")
    return "; measured under load: the absolute speeds reflect the load, not this configuration alone"


def _named(rows: pd.DataFrame, key: str, most: int = 3) -> str:
    """'trial 4: 52.1 [48.0, 56.2]; ...' for the first ``most`` rows by ``key``, then a count."""
    rows = rows.sort_values(key, ascending=False)
    parts = [f"trial {int(r['number'])}: {interval(r, key)}" for _, r in rows.head(most).iterrows()]
    return "; ".join(parts) + (f"; {len(rows) - most} more" if len(rows) > most else "")


def interval(row: Any, key: str) -> str:
    """A figure with the range its measured spread allows: '52.1 [48.0, 56.2]' (no range
    where the spread bounds nothing)."""
    v, lo, hi = row.get(key), row.get(f"{key}_lo"), row.get(f"{key}_hi")
    digits = ".3g" if key == "roi" else ".1f"

    def fmt(x: float) -> str:
        return format(x, digits)

    if v is None or not np.isfinite(v):
        return "n/a"
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return fmt(v)
    return f"{fmt(v)} [{fmt(lo)}, {fmt(hi)}]"


def per_budget(table: pd.DataFrame, scoring: Scoring) -> list[BudgetResult]:
    """The trials scored under each of the settings' budgets, primary first."""
    results = []
    for budget in scoring.budgets:
        scored, baseline = score(table, scoring.global_batch, budget, scoring.roi)
        best = choose_best(scored, scoring.objective)
        results.append(BudgetResult(budget, scored, baseline, best, why_best(scored, best, scoring.objective, budget)))
    return results


def budgets_table(results: list[BudgetResult]) -> pd.DataFrame:
    """One row per budget: the winner, its figures, and why it won."""
    rows = []
    for r in results:
        row: dict[str, Any] = {"budget_gib": r.budget_gib}
        if r.best is not None:
            b = r.scored.loc[r.best]
            row.update({k: b.get(k) for k in ("number", *DIMENSIONS, "peak_memory_gib", "device_peak_gib",
                                              "samples_per_s", "roi")})
        row["why"] = r.why
        rows.append(row)
    return pd.DataFrame(rows)


def budgets_summary(results: list[BudgetResult]) -> str:
    """The terminal's lines: each budget's winner in one line."""
    lines = ["best per budget:"]
    for r in results:
        if r.best is None:
            lines.append(f"  {r.budget_gib:g} GiB: none fits")
            continue
        b = r.scored.loc[r.best]
        lines.append(f"  {r.budget_gib:g} GiB: {short_label(Strategy.of(b).as_dict())} "
                     f"{b['samples_per_s']:.1f} samples/s in {b['peak_memory_gib']:.2f} GiB")
    return "\n".join(lines)
