"""``profile=true``: the best configuration once more under torch.profiler.

A run of its own, in a fresh process like any trial, so the profiler's overhead never
touches a measured figure: its trace (``profile/trace.json``: open it in chrome://tracing
or https://ui.perfetto.dev) and the operators that took the most time
(``profile/top_ops.txt``) are written next to the report.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from autotune.study.plan import Plan
from autotune.train.strategy import Strategy, allocator_env
from autotune.trial.runner import run_trial

log = logging.getLogger("autotune")


def profile_best(plan: Plan, best: pd.Series, run_dir: Path) -> Path | None:
    """Trace ``best``'s measured steps; returns the trace's path, or None if the run failed."""
    strategy = Strategy.of(best, plan.global_batch)
    out = run_dir / "profile"
    spec = dict(plan.trial_spec(strategy), profile_dir=str(out.resolve()))
    log.info(f"profiling the best configuration ({strategy.label().strip()}) under torch.profiler")
    result = run_trial(spec, out / "trial", plan.timeout_s, env=allocator_env(strategy.allocator, strategy.offload))
    trace = out / "trace.json"
    if result["status"] != "ok" or not trace.is_file():
        log.warning(f"the profile run ended {result['status']}: {result.get('cause') or 'no trace written'} "
                    f"(log: {out / 'trial' / 'log.txt'})")
        return None
    log.info(f"profile: {trace} (chrome://tracing or ui.perfetto.dev), top operators in {out / 'top_ops.txt'}")
    return trace
