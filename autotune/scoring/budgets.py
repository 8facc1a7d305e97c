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
from typing import List, Optional

import numpy as np
import pandas as pd

from autotune.scoring.score import Baseline, choose_best, score
from autotune.scoring.settings import Scoring


@dataclass
class BudgetResult:
    budget_gib: float
    scored: pd.DataFrame
    baseline: Baseline
    best: Optional[int]  # index into scored
    why: str


def budget_label(budget_gib: float) -> str:
    return f"{budget_gib:g}GiB"


def why_best(scored: pd.DataFrame, best: Optional[int], objective: str, budget_gib: float) -> str:
    """One sentence: what the winner beat, and what would have beaten it without the budget."""
    if best is None:
        return f"nothing that ran ok fits {budget_gib:g} GiB"
    b = scored.loc[best]
    fitting = int(scored["fits_budget"].sum())
    text = f"the best {objective} of the {fitting} configuration(s) that fit"
    ok = scored[(scored["status"] == "ok") & np.isfinite(scored["samples_per_s"])]
    faster = ok[(ok["samples_per_s"] > b["samples_per_s"]) & ~ok["fits_budget"]]
    if len(faster):
        f = faster.sort_values("samples_per_s").iloc[-1]
        text += (f"; faster without the budget: checkpointing={f['checkpointing']} precision={f['precision']} "
                 f"micro_batch={int(f['micro_batch'])} ({f['samples_per_s']:.1f} samples/s) needs "
                 f"{f.get('device_peak_gib', f['peak_memory_gib']):.2f} GiB")
    return text


def per_budget(table: pd.DataFrame, scoring: Scoring) -> List[BudgetResult]:
    """The trials scored under each of the settings' budgets, primary first."""
    results = []
    for budget in scoring.budgets:
        scored, baseline = score(table, scoring.global_batch, budget, scoring.roi)
        best = choose_best(scored, scoring.objective)
        results.append(BudgetResult(budget, scored, baseline, best, why_best(scored, best, scoring.objective, budget)))
    return results


def budgets_table(results: List[BudgetResult]) -> pd.DataFrame:
    """One row per budget: the winner, its figures, and why it won."""
    rows = []
    for r in results:
        row = {"budget_gib": r.budget_gib}
        if r.best is not None:
            b = r.scored.loc[r.best]
            row.update({k: b.get(k) for k in ("number", "checkpointing", "precision", "micro_batch", "accumulation",
                                              "offload", "allocator", "peak_memory_gib", "device_peak_gib",
                                              "samples_per_s", "roi")})
        row["why"] = r.why
        rows.append(row)
    return pd.DataFrame(rows)


def budgets_summary(results: List[BudgetResult]) -> str:
    """The terminal's lines: each budget's winner in one line."""
    lines = ["best per budget:"]
    for r in results:
        if r.best is None:
            lines.append(f"  {r.budget_gib:g} GiB: none fits")
            continue
        b = r.scored.loc[r.best]
        offload = " offload" if b.get("offload") is True else ""
        lines.append(f"  {r.budget_gib:g} GiB: {b['checkpointing']}/{b['precision']}/mb{int(b['micro_batch'])}{offload} "
                     f"{b['samples_per_s']:.1f} samples/s in {b['peak_memory_gib']:.2f} GiB")
    return "\n".join(lines)
