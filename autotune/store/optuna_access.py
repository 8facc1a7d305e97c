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

from typing import Any

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


def read_trials(study: optuna.Study) -> list:
    """Every trial of ``study`` as ``FrozenTrial``s, oldest first, not copied.

    For a database storage this reads Optuna's tables with five plain queries instead of
    the ORM: on a study of 5,000 trials of ~50 attributes each the ORM builds ~270,000
    objects (6.5 s on 2 cores, twice per reader); the rows alone take a fraction of a
    second (bench/scale.py). The trials are the ones ``get_trials`` returns
    (tests/store/test_claims.py compares the two); journal and in-memory storages use it.
    """

    from optuna.storages import RDBStorage

    storage = storage_of(study)
    backend = getattr(storage, "_backend", storage)  # _CachedStorage wraps the RDBStorage
    if not isinstance(backend, RDBStorage):
        return study.get_trials(deepcopy=False)
    where = f" WHERE t.study_id = {int(study_id(study))}"  # an int: no quoting, one text for every driver
    queries = {
        "params": "SELECT p.trial_id, p.param_name, p.param_value, p.distribution_json FROM trial_params p "
                  "JOIN trials t ON t.trial_id = p.trial_id" + where + " ORDER BY p.param_id",
        "values": "SELECT v.trial_id, v.objective, v.value, v.value_type FROM trial_values v "
                  "JOIN trials t ON t.trial_id = v.trial_id" + where,
        "user": "SELECT a.trial_id, a.key, a.value_json FROM trial_user_attributes a "
                "JOIN trials t ON t.trial_id = a.trial_id" + where,
        "system": "SELECT a.trial_id, a.key, a.value_json FROM trial_system_attributes a "
                  "JOIN trials t ON t.trial_id = a.trial_id" + where,
        "intermediate": "SELECT i.trial_id, i.step, i.intermediate_value, i.intermediate_value_type "
                        "FROM trial_intermediate_values i JOIN trials t ON t.trial_id = i.trial_id" + where,
    }
    with backend.engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None  # an open connection has its driver's
        cursor = dbapi.cursor()  # the driver's own rows: SQLAlchemy's cost 0.5 s

        def rows_of(query: str) -> list[Any]:
            cursor.execute(query)
            return list(cursor.fetchall())

        trials = rows_of("SELECT trial_id, number, state, datetime_start, datetime_complete FROM trials t" + where
                         + " ORDER BY trial_id")
        rows = {k: rows_of(q) for k, q in queries.items()}
    return _frozen_trials(trials, rows)


def _frozen_trials(trials: list, rows: dict) -> list:
    """FrozenTrials from the rows of the trials table and of each attribute table."""
    import json

    from optuna.distributions import json_to_distribution
    from optuna.storages._rdb.models import TrialIntermediateValueModel, TrialValueModel
    from optuna.trial import FrozenTrial, TrialState

    dists: dict = {}
    params: dict = {t[0]: ({}, {}) for t in trials}
    for tid, name, value, dist_json in rows["params"]:
        dist = dists.get(dist_json) or dists.setdefault(dist_json, json_to_distribution(dist_json))
        params[tid][0][name] = dist.to_external_repr(value)
        params[tid][1][name] = dist
    values: dict = {}
    for tid, objective, value, kind in rows["values"]:
        values.setdefault(tid, {})[objective] = TrialValueModel.stored_repr_to_value(
            value, TrialValueModel.TrialValueType[kind] if isinstance(kind, str) else kind)
    attrs: dict = {"user": {}, "system": {}}
    for kind in attrs:
        # one JSON document of every value: a quarter of a million json.loads calls cost 1.2 s
        decoded = json.loads("[" + ",".join(r[2] for r in rows[kind]) + "]")
        for (tid, key, _), value in zip(rows[kind], decoded, strict=False):
            attrs[kind].setdefault(tid, {})[key] = value
    steps: dict = {}
    for tid, step, value, kind in rows["intermediate"]:
        steps.setdefault(tid, {})[step] = TrialIntermediateValueModel.stored_repr_to_intermediate_value(
            value, TrialIntermediateValueModel.TrialIntermediateValueType[kind] if isinstance(kind, str) else kind)
    out = []
    for tid, number, state, start, complete in trials:
        v = values.get(tid)
        out.append(FrozenTrial(number=number, state=TrialState[state] if isinstance(state, str) else state,
                               value=None, values=[v[i] for i in sorted(v)] if v else None,
                               datetime_start=_when(start), datetime_complete=_when(complete),
                               params=params[tid][0], distributions=params[tid][1],
                               user_attrs=attrs["user"].get(tid, {}), system_attrs=attrs["system"].get(tid, {}),
                               intermediate_values=steps.get(tid, {}), trial_id=tid))
    return out


def _when(value):
    """A DATETIME column as the ORM gives it (SQLite's driver returns text)."""
    if value is None or not isinstance(value, str):
        return value
    from datetime import datetime

    return datetime.fromisoformat(value)
