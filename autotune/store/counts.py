"""How far a study has got: its trials counted over every driver working on it.

Duplicates (a configuration another driver held first), trials cut short (retried) and
re-measurements are left out of the counts a run's progress shows (re-measurements have
lines of their own, ``confirm``).
"""
from __future__ import annotations

import optuna

from autotune.store.claims import cut_short, is_duplicate


def finished_and_planned(study: optuna.Study) -> tuple[int, int]:
    """(finished, planned) configurations of the study, over every driver working on it;
    re-measurements are counted apart (their lines say ``confirm``)."""
    live = [t for t in study.get_trials(deepcopy=False)
            if not is_duplicate(t) and not cut_short(t) and not t.user_attrs.get("repeat")]
    return sum(t.state.is_finished() for t in live), len(live)


def running(study: optuna.Study) -> int:
    """Trials RUNNING in the study, this driver's and others'."""
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)))


def trials_run(study: optuna.Study, configs: list[dict[str, object]] | None = None) -> int:
    """Trials a process ran for the search: not skipped or pruned, not duplicates, not repeats;
    only those of ``configs`` where given (a resumed escalated study holds the wider space's too)."""
    return sum(1 for t in study.get_trials(deepcopy=False)
               if t.state.is_finished() and not is_duplicate(t) and not t.user_attrs.get("repeat")
               and t.user_attrs.get("status") not in ("skipped", "pruned", "interrupted")
               and (configs is None or t.params in configs))
