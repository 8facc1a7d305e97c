"""Who runs which configuration: a queue of configurations in the study storage itself.

Several drivers may work on one study (a second terminal, another machine, the workers of
one driver). The storage is the only thing they share, so it coordinates them:

* ``enqueue_missing`` puts every configuration that the study has never seen into the study
  as a WAITING trial;
* ``claim`` takes one WAITING trial by moving it to RUNNING, which the storage does
  atomically (Optuna's own ask() relies on the same step), so no two drivers get the same
  trial;
* two drivers that enqueue at the same moment can still enqueue one configuration twice, so
  after claiming, ``duplicate_of`` tells whether an earlier trial already holds the same
  configuration. The earliest live trial of a configuration wins; a later one is closed as
  a duplicate without running and left out of every table.

Each claimed trial records its owner (host, pid and that process's start time) and a
heartbeat. ``recover`` closes trials whose owner is gone: on this host, by checking the
process; on another host, by a heartbeat older than ``STALE_S``.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterable

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.store.optuna_access import fixed_params, storage_of, study_id, trial_handle, trial_id
from autotune.system.linux import process_start

ORPHANED = "the driver stopped while this trial ran"
MAX_CUTS = 3  # a configuration whose driver died under it this often is given up (given_up)
HEARTBEAT_S = 20.0
STALE_S = 6 * HEARTBEAT_S  # another host's trial counts as orphaned after this much silence


def params_of(t: FrozenTrial) -> dict:
    """A trial's configuration: its parameters, or for a queued trial the ones it will take."""
    return t.params or fixed_params(t)


def config_key(t: FrozenTrial) -> tuple:
    """What makes two trials the same measurement: the configuration and the repeat index."""
    return tuple(sorted(params_of(t).items())) + (("repeat", t.user_attrs.get("repeat", 0)),)


def is_duplicate(t: FrozenTrial) -> bool:
    return "duplicate_of" in t.user_attrs


def cut_short(t: FrozenTrial) -> bool:
    """A trial that ended for a reason outside its configuration: its driver stopped, or the
    model could not be built (which stops the study until the model is fixed)."""
    return t.state == TrialState.FAIL and (t.user_attrs.get("status") == "interrupted"
                                           or t.user_attrs.get("cause") == ORPHANED
                                           or t.user_attrs.get("phase") == "build")


def enqueue_missing(study: optuna.Study, configs: Iterable[dict], user_attrs: dict | None = None) -> int:
    """Enqueue the configurations no trial of the study holds yet; return how many."""
    seen = {config_key(t) for t in study.get_trials(deepcopy=False) if not is_duplicate(t)}
    added = 0
    for params in configs:
        attrs = dict(user_attrs or {})
        key = tuple(sorted(params.items())) + (("repeat", attrs.get("repeat", 0)),)
        if key not in seen:
            study.enqueue_trial(params, user_attrs=attrs or None, skip_if_exists=False)
            seen.add(key)
            added += 1
    return added


def owner() -> dict:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": process_start(pid)}


def owner_alive(t: FrozenTrial, now: float | None = None) -> bool:
    now = now or time.time()
    o = t.user_attrs.get("owner")
    if not o:
        # claim() moves a trial to RUNNING and only then records its owner: in between,
        # another driver must not take it for orphaned (on a loaded machine that moment
        # lasts long enough to matter). One that stays ownerless for STALE_S is orphaned.
        start = t.datetime_start  # naive local time, set by the storage on RUNNING
        return start is not None and now - start.timestamp() < STALE_S
    if o.get("host") == socket.gethostname():
        return o.get("start") is not None and process_start(int(o["pid"])) == o["start"]
    beat = t.user_attrs.get("heartbeat", 0.0)
    return now - beat < STALE_S


def claim(study: optuna.Study, only: Callable[[FrozenTrial], bool] | None = None) -> optuna.Trial | None:
    """Take one WAITING trial for this process (one that ``only`` accepts), or None when none is left."""
    storage = storage_of(study)
    for t in waiting(study, only):
        try:
            if not storage.set_trial_state_values(trial_id(t), state=TrialState.RUNNING):
                continue  # another driver took it first
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        own(study, trial_id(t))
        return trial_handle(study, trial_id(t))
    return None


def waiting(study: optuna.Study, only: Callable[[FrozenTrial], bool] | None = None) -> list:
    """The study's WAITING trials, oldest first (those ``only`` accepts)."""
    queued = storage_of(study).get_all_trials(study_id(study), deepcopy=False, states=(TrialState.WAITING,))
    return [t for t in queued if only is None or only(t)]


def is_repeat(t: FrozenTrial) -> bool:
    return bool(t.user_attrs.get("repeat"))


def own(study: optuna.Study, trial_id: int) -> None:
    """Record this process as the owner of a RUNNING trial (claimed, or made by ask())."""
    storage_of(study).set_trial_user_attr(trial_id, "owner", owner())
    storage_of(study).set_trial_user_attr(trial_id, "heartbeat", time.time())


def duplicate_of(study: optuna.Study, trial: optuna.Trial) -> int | None:
    """The number of an earlier live trial holding the same configuration, if any."""
    trials = study.get_trials(deepcopy=False)
    me = next(t for t in trials if trial_id(t) == trial_id(trial))
    key = config_key(me)
    for t in trials:
        if t.number < me.number and config_key(t) == key and not is_duplicate(t) and not cut_short(t):
            return t.number
    return None


class Heartbeat:
    """Refresh a trial's heartbeat in a background thread while it runs."""

    def __init__(self, study: optuna.Study, trial_id: int):
        self._storage, self._trial_id = storage_of(study), trial_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._storage.set_trial_user_attr(self._trial_id, "heartbeat", time.time())
            except Exception:  # a finished trial or a storage hiccup: the next beat or recover() decides
                pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _driver_cut(t: FrozenTrial) -> bool:
    """Cut short by its driver dying without a word (killed, the host's OOM killer): the one cut
    a configuration may cause. A stop the driver recorded (Ctrl-C, SIGTERM) is the user's, never
    the configuration's, and is retried however often it happens."""
    return cut_short(t) and t.user_attrs.get("cause") == ORPHANED


def _attempts(study: optuna.Study) -> tuple:
    """(configurations waiting or running, finished attempts per configuration)."""
    trials = [t for t in study.get_trials(deepcopy=False) if not is_duplicate(t)]
    pending = {config_key(t) for t in trials if t.state in (TrialState.WAITING, TrialState.RUNNING)}
    attempts: dict = {}
    for t in trials:
        if t.state.is_finished():
            attempts.setdefault(config_key(t), []).append(t)
    return pending, attempts


def given_up(study: optuna.Study) -> list[FrozenTrial]:
    """The last attempt of each configuration whose driver died under it MAX_CUTS times and that
    was never measured: it is not retried again, and the run says so."""
    pending, attempts = _attempts(study)
    return [max(tried, key=lambda t: t.number) for key, tried in attempts.items()
            if key not in pending and all(cut_short(t) for t in tried)
            and sum(_driver_cut(t) for t in tried) >= MAX_CUTS]


def recover(study: optuna.Study) -> list[dict]:
    """Close trials whose owner is gone; enqueue each such configuration again.

    A configuration is retried when every attempt at it was cut short (left running by a
    dead driver, interrupted, or stopped because the model could not be built), until its
    driver has died under it MAX_CUTS times (``given_up``).
    """
    storage = storage_of(study)
    now = time.time()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not owner_alive(t, now):
            try:
                storage.set_trial_user_attr(trial_id(t), "status", "crash")
                storage.set_trial_user_attr(trial_id(t), "cause", ORPHANED)
                storage.set_trial_state_values(trial_id(t), TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # its owner finished it after all
    pending, attempts = _attempts(study)
    retry = []
    for key, tried in attempts.items():
        if key not in pending and all(cut_short(t) for t in tried) and sum(map(_driver_cut, tried)) < MAX_CUTS:
            last = max(tried, key=lambda t: t.number)
            params = {k: v for k, v in key if k != "repeat"}
            if not params:  # cut before a sampler chose its configuration: nothing to retry, it samples again
                continue
            attrs = {"retry_of": last.number}
            if last.user_attrs.get("repeat"):
                attrs.update(repeat=last.user_attrs["repeat"], repeat_of=last.user_attrs.get("repeat_of"))
            retry.append({"params": params, "user_attrs": attrs})
    for r in retry:
        study.enqueue_trial(r["params"], user_attrs=r["user_attrs"], skip_if_exists=False)
    return retry
