"""``search=random|tpe|nsga2``: Optuna's samplers propose, through ``study.ask()``.

The study has two objectives (samples/s up, peak memory down), so TPE runs as
multi-objective TPE and NSGA-II searches the memory/throughput front. A trial that failed
(out of memory, for example) is a failed Optuna trial, which these samplers do not learn
from. A sampler that proposes a configuration the study already holds gets that
measurement again at no cost (the trial is recorded as a duplicate, never run), so it moves
on; once every configuration is held, the search ends.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.search.space import canonical
from autotune.store.claims import claim, cut_short, is_duplicate, own, params_of
from autotune.store.optuna_access import trial_id

SAMPLERS: dict[str, Callable[[int], optuna.samplers.BaseSampler]] = {
    "random": lambda seed: optuna.samplers.RandomSampler(seed=seed),
    # Fewer random start-up trials than Optuna's 10: the spaces here have tens of points.
    "tpe": lambda seed: optuna.samplers.TPESampler(seed=seed, n_startup_trials=5, multivariate=True),
    "nsga2": lambda seed: optuna.samplers.NSGAIISampler(seed=seed, population_size=8),
}


class SampledSearch:
    def __init__(self, name: str, choices: dict[str, list[Any]], configs: list[dict[str, Any]], seed: int):
        self.name = name
        self.sampler = SAMPLERS[name](seed)
        # The same distributions the driver suggests from, so Optuna sees one space.
        self.distributions: dict[str, BaseDistribution] = {k: CategoricalDistribution(v) for k, v in choices.items()}
        self.keys = {tuple(sorted(canonical(c).items())) for c in configs}

    def start(self, study: optuna.Study) -> int:
        study.sampler = self.sampler
        return 0

    def next_trial(self, study: optuna.Study) -> optuna.Trial | None:
        queued = claim(study)  # retries and re-measurements first
        if queued is not None:
            return queued
        for _ in range(20 * len(self.keys)):
            held = {
                tuple(sorted(canonical(params_of(t)).items())): t
                for t in study.get_trials(deepcopy=False)
                if _holds_config(t)
            }
            if not self.keys - set(held):
                return None  # every configuration is measured, queued or running
            trial = study.ask(self.distributions)
            own(study, trial_id(trial))
            key = tuple(sorted(canonical(trial.params).items()))
            if key not in self.keys:  # a combination outside the grid (a micro-batch the space lacks)
                trial.set_user_attr("duplicate_of", -1)
                study.tell(trial, state=TrialState.PRUNED)
                continue
            earlier = held.get(key)
            if earlier is None:
                return trial
            trial.set_user_attr("duplicate_of", earlier.number)
            if earlier.state == TrialState.COMPLETE:
                study.tell(trial, earlier.values)
            else:
                study.tell(trial, state=TrialState.PRUNED if earlier.state != TrialState.FAIL else TrialState.FAIL)
        return None


def _holds_config(t: FrozenTrial) -> bool:
    """A trial that stands for its configuration: not a duplicate, and not one cut short (retried)."""
    return not is_duplicate(t) and not cut_short(t)
