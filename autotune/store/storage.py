"""Where the study lives: open it safely (SQLite, PostgreSQL or a journal file), snapshot it.

The study persists outside the per-run directory (default: ``outputs/autotune.db``, one
SQLite file for every study, each under its own name), so rerunning the same command
resumes it. Each run directory gets a snapshot (``study.db``) of the study as it ended.

Storage URLs: any Optuna RDB URL (``sqlite:///PATH``, ``postgresql://...``) or
``journal:PATH``, an Optuna journal file: the choice for several drivers on one machine or
a shared disk, since SQLite serialises writers and can time out under contention.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import optuna
import optuna.storages.journal

from autotune.store.optuna_access import read_trials, storage_of
from autotune.store.redaction import redact, redact_files  # noqa: F401 (the storage's public names)
from autotune.system.linux import file_lock
from autotune.system.safe_write import replacing


class StorageError(RuntimeError):
    """The study storage cannot be used; the message names it and what to do."""


def default_storage(cwd: Path) -> str:
    return f"sqlite:///{(cwd / 'outputs' / 'autotune.db').resolve()}"


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///PATH`` URL, without its query (``?timeout=5``), which is not
    part of the name (a lock file named after the whole URL once carried its password)."""
    if not url.startswith("sqlite:///"):
        return None
    from sqlalchemy.engine import make_url

    try:
        database = make_url(url).database
    except Exception:
        database = None
    return Path(database) if database else Path(url[len("sqlite:///"):].split("?", 1)[0])


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


def journal_path(url: str) -> Path | None:
    return Path(url[len("journal:"):]).expanduser() if url.startswith("journal:") else None


def make_storage(url: str):
    """The Optuna storage for a URL; refuses an unusable file before anything writes to it."""
    try:
        return _make_storage(url)
    except OSError as e:  # an unwritable or impossible path, a full disk
        raise StorageError(f"storage {redact(url)}: cannot be created or opened there ({e.strerror or e}: "
                           f"{e.filename or ''}); pass storage=sqlite:///PATH or storage=journal:PATH with a "
                           "writable folder") from None


def _make_storage(url: str):
    path = sqlite_path(url)
    if path is not None:
        check_sqlite(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Two drivers opening a new file at once would both create the schema and one
        # would fail; a lock file next to it makes them take turns.
        with file_lock(path.with_name(path.name + ".lock")):
            return _rdb_storage(url)
    path = journal_path(url)
    if path is not None:
        check_journal(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    return _rdb_storage(url)


# A PostgreSQL server that accepts the connection and then never answers would hang the
# driver forever: libpq's connect timeout bounds the connection (handshake included),
# tcp_user_timeout and keepalives a connection whose server went silent later, and a
# statement timeout a statement stuck behind a lock. The environment can change both limits
# (AUTOTUNE_DB_CONNECT_TIMEOUT_S, AUTOTUNE_DB_STATEMENT_TIMEOUT_S), e.g. for a slow link.
PG_CONNECT_TIMEOUT_S = 15
PG_STATEMENT_TIMEOUT_S = 120


def pg_timeouts() -> tuple:
    """(connect, statement) seconds: the environment's values where set, else the defaults."""
    out = []
    for name, default in (("AUTOTUNE_DB_CONNECT_TIMEOUT_S", PG_CONNECT_TIMEOUT_S),
                          ("AUTOTUNE_DB_STATEMENT_TIMEOUT_S", PG_STATEMENT_TIMEOUT_S)):
        raw = os.environ.get(name)
        try:
            value = int(raw) if raw else default
        except ValueError:
            value = 0
        if value < 1:
            raise StorageError(f"{name}={raw}: must be a whole number of seconds >= 1; e.g. {name}={default}")
        out.append(value)
    return tuple(out)


def _engine_kwargs(url: str) -> dict:
    if not url.startswith(("postgresql", "postgres:")):
        return {}
    from urllib.parse import parse_qs, urlsplit

    connect, statement = pg_timeouts()
    args = {"connect_timeout": connect, "tcp_user_timeout": statement * 1000, "keepalives": 1,
            "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
            "options": f"-c statement_timeout={statement * 1000}"}
    given = parse_qs(urlsplit(url).query)  # what the URL sets itself wins
    return {"connect_args": {k: v for k, v in args.items() if k not in given}}


def storage_failure(url: str, e: Exception, what: str = "cannot be opened") -> StorageError:
    """One message for a storage that failed, naming a timeout as such."""
    cause = e.__cause__ or e  # Optuna's StorageInternalError wraps the database's own error
    text = f"{e} {cause}".lower()
    if any(w in text for w in ("timeout", "timed out", "canceling statement")):
        connect, statement = pg_timeouts()
        what = (f"no answer within {connect} s (connect) or {statement} s (statement): is the database server up, "
                "reachable at that address, and not holding the study's tables locked?")
    first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    return StorageError(f"storage {redact(url)}: {what} ({type(cause).__name__}: {redact(first, url)})")


def _rdb_storage(url: str, attempts: int = 5):
    """An RDB storage; retried when another driver was creating the same schema meanwhile."""
    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url))
        except Exception as e:  # sqlalchemy IntegrityError / OperationalError from a concurrent creator
            failure = storage_failure(url, e)
            if ("no answer" in str(failure) or attempt == attempts - 1
                    or type(e).__name__ not in ("IntegrityError", "OperationalError")):
                raise failure from None
            time.sleep(0.2 * (attempt + 1))


_OPTUNA_TABLES = {"studies", "trials", "version_info"}


def open_read_only(url: str):
    """The storage at ``url`` for reading, or StorageError: nothing is created or written,
    neither in it nor beside it (no tables, no lock file, no missing file made)."""
    path = sqlite_path(url)
    if path is not None:
        if not path.is_file():
            raise StorageError(f"{path}: no such file")
        check_sqlite(path)
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not _OPTUNA_TABLES <= tables:
            raise StorageError(f"{path}: an SQLite file that holds no study (none of autotune's tables); it was "
                               "left untouched")
        return optuna.storages.RDBStorage(f"sqlite:///file:{path}?mode=ro&uri=true", skip_table_creation=True)
    path = journal_path(url)
    if path is not None:
        if not path.is_file():
            raise StorageError(f"{path}: no such journal file")
        check_journal(path)
        # Optuna's journal reader takes a lock file beside the journal; it reads a private copy.
        import atexit
        import shutil
        import tempfile

        folder = tempfile.mkdtemp(prefix="autotune-read-")
        atexit.register(shutil.rmtree, folder, True)
        copy = Path(folder) / path.name
        shutil.copyfile(path, copy)
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(copy)))
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, **_engine_kwargs(url))
    try:
        tables = set(sqlalchemy.inspect(engine).get_table_names())
    except Exception as e:
        raise storage_failure(url, e, "cannot be read") from None
    finally:
        engine.dispose()
    if not _OPTUNA_TABLES <= tables:
        raise StorageError(f"storage {redact(url)}: holds no study (none of autotune's tables); nothing was written")
    return optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url), skip_table_creation=True)


def check_journal(path: Path) -> None:
    """Refuse a journal file with a line that is not a whole JSON record (a truncated or
    corrupt file): Optuna would append after it and then fail to read the study back."""
    if not path.exists():
        return
    try:
        with open(path, "rb") as f:
            for number, line in enumerate(f, start=1):
                if not line.endswith(b"\n"):
                    raise ValueError(f"line {number} is truncated")
                try:
                    json.loads(line)
                except json.JSONDecodeError:
                    raise ValueError(f"line {number} is not a JSON record") from None
    except (OSError, ValueError) as e:
        raise StorageError(f"journal file {path} is unreadable ({e}); it was left untouched: move it aside, "
                           "or pass storage=journal:OTHER.log") from None


# Every study has two objectives, the figures a memory strategy trades: throughput up, the
# device-level peak memory down. The best configuration under any budget by throughput (and
# by ROI, while a GiB of memory saved is worth less per hour than the compute hour) lies on
# their Pareto front, which is what NSGA-II and multi-objective TPE search for.
OBJECTIVE_NAMES = ("samples_per_s", "peak_memory_gib")
DIRECTIONS = ("maximize", "minimize")


def open_study(name: str, url: str, sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    storage = make_storage(url)
    try:
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, directions=list(DIRECTIONS),  # type: ignore[arg-type]
                                    load_if_exists=True)
    except Exception as e:  # SQLAlchemy / Optuna errors from a storage we could not use
        raise storage_failure(url, e, f"cannot open study '{name}'") from None
    if len(study.directions) != len(DIRECTIONS):
        raise StorageError(f"study '{name}' in {redact(url)} was made by an older autotune with "
                           f"{len(study.directions)} objective(s); pass study_name=NEW_NAME to start a new one")
    check_readable(study, url)
    return study


def check_readable(study: optuna.Study, url: str) -> list:
    """Read the whole study once, so that a storage changed behind Optuna's back (a trial state
    it does not know, an attribute that is not JSON) is one message now, not a traceback later;
    returns its trials (``optuna_access.read_trials``), for a reader to use."""
    try:
        study.user_attrs  # noqa: B018 (read for its errors)
        return read_trials(study)
    except Exception as e:
        raise StorageError(f"study '{study.study_name}' in {redact(url)} is corrupt ({type(e).__name__}: "
                           f"{redact(str(e).splitlines()[0], url)}); it was left as it is: pass study_name=NEW_NAME "
                           "or another storage= to measure again, or restore the study from a run's study.db "
                           "snapshot") from None


SETUP_ATTR = "autotune_setup"  # the study's record of what it measures


def check_setup(study: optuna.Study, setup: dict, url: str) -> None:
    """Record ``setup`` (everything that changes a measurement) in a new study; refuse one
    that measured another setup, whoever chose the name, naming what differs, so that no
    run reuses figures that are not its own."""
    here = json.loads(json.dumps(setup, sort_keys=True, default=str))
    there = study.user_attrs.get(SETUP_ATTR)
    if there is None:
        if any(t.state.is_finished() for t in study.get_trials(deepcopy=False)):
            raise StorageError(f"study '{study.study_name}' in {redact(url)} holds trials but no record of what "
                               "they measured (an older autotune made it); pass study_name=NEW_NAME to start a new "
                               "study")
        study.set_user_attr(SETUP_ATTR, here)
        return
    if there == here:
        return
    keys = sorted(set(here) | set(there))
    diff = "; ".join(f"{k}: {json.dumps(there.get(k))} there, {json.dumps(here.get(k))} here"
                     for k in keys if there.get(k) != here.get(k))
    raise StorageError(f"study '{study.study_name}' in {redact(url)} measured another setup ({diff}); its figures "
                       "are not this command's. Pass study_name=NEW_NAME, or leave study_name unset (the default "
                       "name is derived from the setup), or rerun the command that made it")


def _sqlite_file(study: optuna.Study) -> Path | None:
    storage = storage_of(study)
    url = getattr(getattr(storage, "_backend", storage), "url", None)  # RDBStorage, cached or not
    return sqlite_path(url) if isinstance(url, str) else None


def _holds_only(path: Path, name: str) -> bool:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return [row[0] for row in db.execute("SELECT study_name FROM studies")] == [name]


def snapshot(study: optuna.Study, path: Path) -> None:
    """Copy the study into its own SQLite file (the run directory's record of it). A SQLite
    file that holds this study alone is copied whole by SQLite's backup (milliseconds, a
    consistent copy while others write); otherwise Optuna copies the study (1.3 s for a few
    dozen trials on 2 cores, most of it making the new file's schema)."""
    try:
        with replacing(path) as tmp:
            source = _sqlite_file(study)
            if source is not None and source.is_file() and _holds_only(source, study.study_name):
                with closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as src, \
                        closing(sqlite3.connect(tmp)) as dst:
                    src.backup(dst)
            else:
                optuna.copy_study(from_study_name=study.study_name, from_storage=storage_of(study),
                                  to_storage=f"sqlite:///{tmp.resolve()}")
    except Exception as e:  # a full disk or a read-only folder (SQLAlchemy's errors or OSError)
        raise StorageError(f"cannot write the study's snapshot {path} ({type(e).__name__}: "
                           f"{str(e).splitlines()[0]}); free space or make the folder writable") from None
