"""How the study picks what to measure next: ``search=grid|random|tpe|nsga2|auto``.

Every strategy hands the driver one trial at a time (``next_trial``), already claimed for
this driver, or None when it has nothing to run now. The driver then waits for trials that
other drivers still run (their results may give the strategy more to do) and stops when
none is left. Queued trials (retries, re-measurements, another driver's proposals) are
always run first, whatever the strategy.

* ``grid``: every configuration, queued at the start (``queue``).
* ``random``, ``tpe``, ``nsga2``: Optuna's samplers over the same space (``sampled``); they
  need ``search.n_trials`` or ``search.timeout`` to stop before the space is exhausted.
* ``auto`` (default): the project's own, which uses the structure of memory and speed
  (``auto``) and ends by itself.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import optuna
from optuna.trial import FrozenTrial

from autotune.search.auto import AutoSearch, family_of
from autotune.store.claims import claim, enqueue_missing, params_of, waiting
from autotune.store.table import trials_table

STRATEGIES = ("auto", "grid", "random", "tpe", "nsga2")


@runtime_checkable
class Search(Protocol):
    """The seam where the next configuration is chosen. ``start`` prepares the study and
    returns how many configurations it queued; ``next_trial`` returns one trial already
    claimed for this driver, or None when there is nothing to run now. Implemented by
    ``QueueSearch`` (grid, and auto through ``AutoSearch``) and ``sampled.SampledSearch``."""

    def start(self, study: optuna.Study) -> int: ...

    def next_trial(self, study: optuna.Study) -> optuna.Trial | None: ...


class QueueSearch:
    """Grid and auto: configurations go into the study's queue, then are claimed from it.
    With no configurations and no auto, it only runs what is queued (re-measurements)."""

    def __init__(self, name: str, configs: list[dict[str, Any]], auto: AutoSearch | None = None,
                 only: Callable[[FrozenTrial], bool] | None = None):
        # only: which queued trials this search runs (re-measurement runs its repeats, not
        # configurations a stopped grid left in the queue)
        self.name, self.configs, self.auto, self.only = name, configs, auto, only

    def start(self, study: optuna.Study) -> int:
        """Queue what the strategy knows at the start (auto: the configurations the device
        cannot run, so they are recorded skipped with the reason); returns how many were added."""
        return enqueue_missing(study, self.configs)

    def next_trial(self, study: optuna.Study) -> optuna.Trial | None:
        trial = claim(study, self.only)
        if trial is not None or self.auto is None:
            return trial
        proposal = self.auto.propose(trials_table(study), _pending(study))
        if proposal is None:
            return None
        enqueue_missing(study, [proposal])
        return claim(study)


    def left(self, study: optuna.Study) -> int | None:
        """Configurations still to run: those queued and, for auto, those its bounds have not
        ruled out yet (an upper bound)."""
        return len(waiting(study, self.only)) + (
            self.auto.left(trials_table(study), _pending(study)) if self.auto is not None else 0
        )


def _pending(study: optuna.Study) -> set[Any]:
    """(family, micro_batch) of the configurations queued or running."""
    live = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING, optuna.trial.TrialState.RUNNING))
    return {(family_of(p), int(p["micro_batch"])) for t in live if (p := params_of(t))}


def make_search(name: str, configs: list[dict[str, Any]], runnable: list[dict[str, Any]], choices: dict[str, Any],
                plan: Any) -> Any:
    """The strategy ``name`` over the space's ``configs``; ``runnable``: those the device can
    run (the others are recorded skipped, never run)."""
    if name == "grid":
        return QueueSearch("grid", configs)
    if name == "auto":
        unrunnable = [c for c in configs if c not in runnable]
        return QueueSearch("auto", unrunnable, AutoSearch(runnable, plan.scoring, plan.memory_cap_gib,
                                                                     plan.front_resolution))
    if name in ("random", "tpe", "nsga2"):
        from autotune.search.sampled import SampledSearch

        return SampledSearch(name, choices, configs, plan.seed)
    raise ValueError(f"search={name}: unknown strategy; use one of {', '.join(STRATEGIES)}")
