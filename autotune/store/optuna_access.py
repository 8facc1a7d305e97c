"""The one module that touches Optuna's private attributes.

Claiming a queued trial atomically, heartbeats on a running one and closing an orphan need
the storage behind a study and the ids Optuna keeps private (``Study._storage``,
``Study._study_id``, ``Trial._trial_id``, the ``fixed_params`` system attribute that
``enqueue_trial`` writes); the public API has no atomic WAITING -> RUNNING step of its own
(``study.ask()`` uses the same storage call). Keeping them here, with
``tests/store/test_claims.py::test_the_optuna_internals_autotune_relies_on_are_there``, means an
Optuna release that changes them fails one test loudly instead of the queue silently. The
Optuna major version is pinned in pyproject.toml for the same reason.
"""
from __future__ import annotations

import optuna
from optuna.storages import BaseStorage


def storage_of(study: optuna.Study) -> BaseStorage:
    return study._storage


def study_id(study: optuna.Study) -> int:
    return study._study_id


def trial_id(trial) -> int:
    """The storage's id of an ``optuna.Trial`` or a ``FrozenTrial`` (not its ``number``)."""
    return trial._trial_id


def fixed_params(frozen: optuna.trial.FrozenTrial) -> dict:
    """The parameters ``enqueue_trial`` gave a trial that has not started yet."""
    return frozen.system_attrs.get("fixed_params", {})


def trial_handle(study: optuna.Study, frozen_trial_id: int) -> optuna.Trial:
    """A live ``optuna.Trial`` for a trial this driver has claimed."""
    return optuna.Trial(study, frozen_trial_id)
