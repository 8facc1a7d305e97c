"""What a run says about its trials as it goes: each trial's line, and the time left.

``progress_line`` is the terminal's line per trial (``[  7/27] ckpt=none ... ok  peak ...``);
``time_left`` the estimate after it, from the search's bound on what is left and the median
wall time of the trials of the same fidelity.
"""
from __future__ import annotations

import math
import statistics
from typing import Any

import optuna

from autotune.search import QueueSearch
from autotune.store.claims import is_repeat
from autotune.store.counts import trials_run
from autotune.study.plan import Plan
from autotune.train.strategy import Strategy
from autotune.trial.fidelity import probe_steps


def _fmt(v: Any, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) and math.isfinite(v) else "-"


def progress_line(i: int, n: int, strategy: Strategy, result: dict[str, Any], counter: str | None = None) -> str:
    """One trial's line: ``[  i/n]`` (``counter`` instead where given), the configuration, its
    status and figures, and the fidelity of a measurement that was not a full one."""
    status = result["status"]
    line = f"[{counter or f'{i:>3}/{n}'}] {strategy.label():<40} {status:<8}"
    if status == "ok":
        fidelity = result.get("fidelity")
        precision = {"probe": ", probe", "raced": f", raced: {result.get('race')}"}.get(
            str(fidelity), ", tied with the best" if result.get("race") == "tied" else "")
        line += (f" peak {_fmt(result.get('peak_memory_gib'), '.3f')} GiB  "
                 f"{_fmt(result.get('samples_per_s'), '.1f')} samples/s  "
                 f"(spread {_fmt(100 * result.get('time_spread', float('nan')), '.0f')}%"
                 f"{' assumed: one timed step' if result.get('spread_assumed') else ''}{precision}, "
                 f"{_fmt(result.get('wall_s'), '.1f')} s)")
    elif result.get("cause"):
        line += f" {result['cause'][:160]}"
    if result.get("contended"):
        line += f"  CONTENDED: {result.get('contention')}"
    return line


def time_left(study: optuna.Study, search: Any, stopping: Any, plan: Plan | None = None) -> str:
    """``  | about 2.5 min left (at most 6 more probes at 3 s each, then about 2 full measurements
    at 9 s)``: the search's bound on what is left (``search.left``; the trial limit caps it)
    times the median wall time of its trials' fidelity, plus, while the search runs with
    probes, the full measurements of the contenders that follow it (at least two)."""
    left = search.left(study) if hasattr(search, "left") else None
    bound = isinstance(search, QueueSearch) and search.auto is not None
    if stopping is not None and stopping.n_trials is not None:
        cap = max(0, stopping.n_trials - trials_run(study))
        left = cap if left is None else min(left, cap)
    finished = [t for t in study.get_trials(deepcopy=False)
                if t.state.is_finished() and isinstance(t.user_attrs.get("wall_s"), (int, float))]
    confirming = search is not None and getattr(search, "only", None) is is_repeat
    probing = plan is not None and plan.fidelity == "auto" and not confirming
    mine = "full" if not probing else "probe"
    walls = [float(t.user_attrs["wall_s"]) for t in finished if t.user_attrs.get("fidelity", "full") == mine] or [
        float(t.user_attrs["wall_s"]) for t in finished]
    if not left or not walls:
        return ""
    each = statistics.median(walls)
    total = left * each
    kind = "probe(s)" if probing else "measurement(s)" if confirming else "trial(s)"
    then = ""
    if probing and plan is not None:
        full = _full_wall(finished, plan)
        if full is not None:
            total += 2 * full
            then = f", then about 2 full measurements at {full:.0f} s"
    when = f"{total / 60:.1f} min" if total >= 90 else f"{total:.0f} s"
    return f"  | about {when} left ({'at most ' if bound else ''}{left} more {kind} at {each:.0f} s each{then})"


def _full_wall(finished: list[Any], plan: Plan) -> float | None:
    """A full measurement's wall time: the median of those run, else a probe's plus the
    window's extra steps (at the probe's step time) and its minimum seconds."""
    full = [float(t.user_attrs["wall_s"]) for t in finished if t.user_attrs.get("fidelity") in ("full", "raced")]
    if full:
        return statistics.median(full)
    probes = [t.user_attrs for t in finished if t.user_attrs.get("fidelity") == "probe"
              and isinstance(t.user_attrs.get("step_time_s"), (int, float))]
    if not probes:
        return None
    wall = statistics.median(float(a["wall_s"]) for a in probes)
    step = statistics.median(float(a["step_time_s"]) for a in probes)
    timed = probe_steps(step)
    extra = max(0, plan.warmup_steps + plan.measure_steps - timed) * step
    return wall + max(extra, plan.min_measure_s - timed * step)
