"""Reference runs for loss parity (``scoring/parity.py``): for each configuration on a
budget's Pareto front that changes the optimizer's numbers and has no measured plain-optimizer
twin (it did not fit), one run of the same configuration with the plain optimizer and fp32
weights, without the memory cap (a simulated budget is smaller than the card; on a card that
cannot hold it either, the reference ends out of memory and the parity stays unknown).
Its losses, not its memory or speed, are kept: as the study attribute ``reference_losses``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna

from autotune.scoring.parity import changes_optimizer_numbers, losses_of
from autotune.scoring.score import score
from autotune.store.table import REFERENCE_ATTR, trials_table
from autotune.study.plan import Plan
from autotune.train.dimensions import MODEL_STATE, defaults
from autotune.train.strategy import Strategy


def run_references(study: optuna.Study, plan: Plan, run_dir: Path, runner: Any,
                   on_trial: Callable[[str], None]) -> int:
    """Run what parity still lacks; returns how many reference runs were made."""
    table = trials_table(study)
    if table.empty or "losses" not in table:
        return 0
    wanted: dict[Any, Any] = {}
    for budget in plan.budgets:
        scored, _ = score(table, plan.global_batch, budget, plan.roi)
        for _, row in scored[scored["on_pareto"] & scored["loss_parity"].isna()].iterrows():
            if changes_optimizer_numbers(row) and not losses_of(row.get("reference_losses")):
                wanted.setdefault((row["precision"], int(row["micro_batch"])), []).append(row)
    if not wanted:
        return 0
    refs = dict(study.user_attrs.get(REFERENCE_ATTR, {}))
    uncapped = replace(plan, memory_cap_gib=None)
    on_trial(f"loss parity: {len(wanted)} reference run(s) of the plain optimizer (fp32 weights, no memory cap) "
             "for the front's configurations that change the optimizer's numbers")
    for k, ((_precision, _micro_batch), rows) in enumerate(sorted(wanted.items()), start=1):
        strategy = Strategy.of(rows[0], plan.global_batch).replace(**defaults(MODEL_STATE))
        result = runner(uncapped.trial_spec(strategy), run_dir / "parity" / f"{k:03d}", plan.timeout_s, env={})
        losses = losses_of(result.get("losses"))
        on_trial(f"  reference {strategy.label()}: {result.get('status')}"
                 + (f", {len(losses)} losses" if losses else f" ({result.get('cause')})"))
        if losses:
            refs.update({str(int(r["number"])): losses for r in rows})
    study.set_user_attr(REFERENCE_ATTR, refs)
    return len(wanted)
