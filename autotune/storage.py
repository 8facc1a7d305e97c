"""Where the study lives: open it safely, recover it after a driver died, snapshot it.

The study persists outside the per-run directory (default: ``outputs/autotune.db``, one
SQLite file for every study, each under its own name), so rerunning the same command
resumes it. Each run directory gets a snapshot (``study.db``) of the study as it ended.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import List, Optional

import optuna
from optuna.trial import TrialState

ORPHANED = "the driver stopped while this trial ran"


class StorageError(RuntimeError):
    """The study storage cannot be used; the message names it and what to do."""


def default_storage(cwd: Path) -> str:
    return f"sqlite:///{(cwd / 'outputs' / 'autotune.db').resolve()}"


def sqlite_path(url: str) -> Optional[Path]:
    return Path(url[len("sqlite:///"):]) if url.startswith("sqlite:///") else None


def check_sqlite(path: Path) -> None:
    """Refuse a file that exists but is not a sound SQLite database, before anything writes."""
    if not path.exists():
        return
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
    except sqlite3.DatabaseError as e:
        raise StorageError(f"storage file {path} is unreadable ({e}); it was left untouched: move it aside, "
                           "or pass storage=sqlite:///OTHER.db to use another file") from None
    if verdict != "ok":
        raise StorageError(f"storage file {path} is corrupt (integrity check: {verdict}); it was left untouched: "
                           "move it aside, or pass storage=sqlite:///OTHER.db")


def open_study(name: str, url: str, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    path = sqlite_path(url)
    if path is not None:
        check_sqlite(path)
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return optuna.create_study(study_name=name, storage=url, sampler=sampler, direction="maximize",
                                   load_if_exists=True)
    except Exception as e:  # SQLAlchemy / Optuna errors from a storage we could not use
        raise StorageError(f"storage {url}: cannot open study '{name}' ({type(e).__name__}: {e})") from None


def recover(study: optuna.Study) -> List[dict]:
    """Mark trials a dead driver left RUNNING as failed; return the configurations to retry.

    A configuration is retried once: when its only finished attempts were cut short (left
    running, or interrupted), and it has not been retried before.
    """
    storage = study._storage
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        storage.set_trial_user_attr(t._trial_id, "status", "crash")
        storage.set_trial_user_attr(t._trial_id, "cause", ORPHANED)
        storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
    waiting = {_key(t.system_attrs.get("fixed_params", {})) for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))}
    attempts: dict = {}
    for t in study.get_trials(deepcopy=False):
        if t.state.is_finished():
            attempts.setdefault(_key(t.params), []).append(t)
    retry = []
    for key, trials in attempts.items():
        cut_short = [t.user_attrs.get("status") == "interrupted" or t.user_attrs.get("cause") == ORPHANED
                     for t in trials]
        if key and key not in waiting and len(trials) == 1 and all(cut_short):
            retry.append({"params": dict(key), "retry_of": trials[0].number})
    return retry


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


def snapshot(study: optuna.Study, path: Path) -> None:
    """Copy the study into its own SQLite file (the run directory's record of it)."""
    path.unlink(missing_ok=True)
    optuna.copy_study(from_study_name=study.study_name, from_storage=study._storage,
                      to_storage=f"sqlite:///{path.resolve()}")
