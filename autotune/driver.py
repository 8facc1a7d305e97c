"""The study loop: Optuna picks each configuration, a trial process measures it.

The driver owns the study; each trial runs in a process of its own (``runner.run_trial``),
so a trial that dies, hangs or runs out of memory cannot take the driver with it. Every
trial ends in one recorded status, stored as the Optuna trial's user attribute ``status``
(with ``cause``): ok -> COMPLETE (value = samples/s), skipped -> PRUNED, every failure -> FAIL.
"""
from __future__ import annotations

import itertools
import json
import logging
import math
from pathlib import Path
from typing import Callable

import optuna
import pandas as pd

from autotune.plan import Plan
from autotune.runner import run_trial
from autotune.space import skip_reason
from autotune.storage import open_study, recover
from autotune.strategy import Strategy

log = logging.getLogger("autotune")

# Columns every trials table starts with; the rest follow in the order first seen.
LEAD_COLUMNS = ["number", "status", "checkpointing", "precision", "micro_batch", "accumulation",
                "peak_memory_gib", "samples_per_s", "time_spread", "cause"]
# Result fields too bulky or nested for a column; kept in trials/NNN/result.json.
_NOT_COLUMNS = {"step_times_s", "timings"}


class TrialFailed(Exception):
    """Raised inside the objective so Optuna records the trial as FAIL; caught by optimize."""


def trial_spec(plan: Plan, strategy: Strategy) -> dict:
    return {
        "model": {"name": plan.model_name, "target": plan.model_target, "config": plan.model_config},
        "seq_len": plan.seq_len,
        "device": plan.device.torch_device,
        "strategy": strategy.as_dict(),
        "warmup_steps": plan.warmup_steps,
        "measure_steps": plan.measure_steps,
        "lr": plan.lr,
        "seed": plan.seed,
    }


def _fmt(v, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) and math.isfinite(v) else "-"


def progress_line(i: int, n: int, strategy: Strategy, result: dict) -> str:
    status = result["status"]
    line = f"[{i:>3}/{n}] {strategy.label():<40} {status:<8}"
    if status == "ok":
        line += (f" peak {_fmt(result.get('peak_memory_gib'), '.3f')} GiB  "
                 f"{_fmt(result.get('samples_per_s'), '.1f')} samples/s  "
                 f"(spread {_fmt(100 * result.get('time_spread', float('nan')), '.0f')}%, "
                 f"{_fmt(result.get('wall_s'), '.1f')} s)")
    elif result.get("cause"):
        line += f" {result['cause'][:160]}"
    return line


def _flat_attrs(result: dict) -> dict:
    attrs = {}
    for k, v in result.items():
        if k == "timings":
            attrs.update({f"{tk}": tv for tk, tv in v.items()})
        elif k == "losses":
            attrs["losses"] = json.dumps([round(x, 5) if isinstance(x, float) else x for x in v])
        elif k not in _NOT_COLUMNS:
            attrs[k] = v
    return attrs


def run_study(plan: Plan, run_dir: Path, storage: str, on_trial: Callable[[str], None] = log.info) -> optuna.Study:
    """Run every configuration of the grid that the study has not finished yet.

    Resuming: trials a dead driver left running are marked failed and retried once; the
    configurations already finished are not run again.
    """
    grid = plan.space.grid(plan.global_batch)
    grid["micro_batch"] = plan.micro_batches
    n_total = math.prod(len(v) for v in grid.values())
    study = open_study(plan.study_name, storage, optuna.samplers.GridSampler(grid, seed=plan.seed))
    for retry in recover(study):
        study.enqueue_trial(retry["params"], user_attrs={"retry_of": retry["retry_of"]})
    finished = {tuple(sorted(t.params.items())) for t in study.get_trials(deepcopy=False) if t.state.is_finished()}
    waiting = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))
    points = {tuple(sorted(zip(grid, values))) for values in itertools.product(*grid.values())}
    to_run = len(points - finished) + waiting
    if finished:
        on_trial(f"resuming study '{plan.study_name}': {len(finished & points)} of {n_total} configurations "
                 f"finished, {to_run} to run ({waiting} retried)")
    counter = {"i": len(finished & points)}

    def objective(trial: optuna.Trial) -> float:
        mb = trial.suggest_categorical("micro_batch", grid["micro_batch"])
        strategy = Strategy(checkpointing=trial.suggest_categorical("checkpointing", grid["checkpointing"]),
                            precision=trial.suggest_categorical("precision", grid["precision"]),
                            micro_batch=mb, accumulation=plan.global_batch // mb)
        trial.set_user_attr("accumulation", strategy.accumulation)
        counter["i"] += "retry_of" not in trial.user_attrs
        reason = skip_reason(strategy, plan.device.precisions, plan.device.unsupported)
        if reason:
            result = {"status": "skipped", "cause": reason}
        else:
            trial_dir = run_dir / "trials" / f"{trial.number:03d}"
            try:
                result = run_trial(trial_spec(plan, strategy), trial_dir, plan.timeout_s)
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the trial was killed; retried on resume
                trial.set_user_attr("status", "interrupted")
                trial.set_user_attr("cause", "the driver was interrupted while this trial ran")
                raise
        trial.set_user_attr("status", result["status"])
        for k, v in _flat_attrs(result).items():
            if k != "status":
                trial.set_user_attr(k, v)
        on_trial(progress_line(counter["i"], n_total, strategy, result))
        if result["status"] == "skipped":
            raise optuna.TrialPruned(reason)
        if result["status"] != "ok":
            raise TrialFailed(result["status"])
        return float(result["samples_per_s"])

    if to_run > 0:
        study.optimize(objective, n_trials=to_run, catch=(TrialFailed,))
    return study


def trials_table(study: optuna.Study) -> pd.DataFrame:
    """One row per finished trial: its configuration, status, cause and every measurement."""
    rows = []
    for t in study.trials:
        if not t.state.is_finished():
            continue
        row = {"number": t.number, **t.params, **t.user_attrs}
        row.setdefault("status", "crash" if t.state == optuna.trial.TrialState.FAIL else "unknown")
        row["retry_of"] = t.user_attrs.get("retry_of")
        rows.append(row)
    df = pd.DataFrame(rows)
    for col in LEAD_COLUMNS:
        if col not in df.columns:
            df[col] = float("nan") if col not in ("status", "cause", "checkpointing", "precision") else None
    for col in ("peak_memory_gib", "samples_per_s", "time_spread"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    rest = [c for c in df.columns if c not in LEAD_COLUMNS]
    return df[LEAD_COLUMNS + rest].sort_values("number").reset_index(drop=True)
