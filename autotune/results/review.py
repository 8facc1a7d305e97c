"""Look at a study again without running anything: what ``python -m autotune.report`` and
``python -m autotune.show`` read.

A PATH is a run directory (its ``study.db`` snapshot, or its ``trials.csv`` when it has no
snapshot), a study storage (an SQLite ``.db`` file, a journal ``.log`` file, or a storage
URL), with ``--study NAME`` when the storage holds several studies. The settings that
scoring needs (global batch, budgets, objective, ROI prices) and the report's metadata are
stored in the study by the run (``record_settings``); for a run directory made before that,
they are read back from its ``best.yaml`` and ``.hydra/config.yaml``.
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import yaml

from autotune.results.record import RunRecord
from autotune.scoring.budgets import BudgetResult, budget_label, per_budget
from autotune.scoring.settings import Scoring, ScoringError
from autotune.store.storage import StorageError, check_readable, open_read_only, redact, storage_failure
from autotune.store.table import fill_defaults, left_out_note, trials_table
from autotune.train.dimensions import BATCH, DIMENSIONS

SETTINGS_ATTR = "autotune"


class ReviewError(ValueError):
    """The PATH cannot be reviewed; the message names it and what to pass instead."""


def record_settings(study: optuna.Study, scoring: Scoring, record: RunRecord) -> None:
    study.set_user_attr(SETTINGS_ATTR, {**scoring.to_dict(), "meta": record.to_dict()})


@dataclass
class Reviewed:
    source: str  # what was read, for messages
    study_name: str | None
    table: pd.DataFrame
    scoring: Scoring  # as the run scored it
    record: RunRecord = field(default_factory=RunRecord)  # as the run recorded it, read back tolerantly
    run_dir: Path | None = None
    left_out: str = ""  # the trials the table left out, named (store/table.py)

    def results(self, objective: str | None = None, budgets: list[float] | None = None) -> list[BudgetResult]:
        return per_budget(self.table, self.scoring.but(budgets=budgets, objective=objective))


def _storage_url(path: str) -> str:
    if "://" in path or path.startswith("journal:"):
        return path
    p = Path(path)
    if not p.exists():
        raise ReviewError(f"{path}: no such file or directory; pass a run directory (outputs/...), a study "
                          "storage (.db, journal .log) or a storage URL")
    if p.suffix == ".log" or p.suffix == ".journal":
        return f"journal:{p.resolve()}"
    return f"sqlite:///{p.resolve()}"


def _load_study(url: str, study_name: str | None) -> tuple:
    """(the study, its trials), read once."""
    try:
        storage = open_read_only(url)  # a reader never writes, neither into the storage nor beside it
        names = optuna.get_all_study_names(storage)
    except StorageError:
        raise
    except Exception as e:
        raise ReviewError(str(storage_failure(url, e, "not a study storage"))) from None
    if not names:
        raise ReviewError(f"{redact(url)}: holds no study")
    if study_name is None:
        if len(names) > 1:
            raise ReviewError(f"{redact(url)} holds {len(names)} studies; pick one with --study NAME:\n"
                              + study_listing(storage, names))
        study_name = names[0]
    elif study_name not in names:
        raise ReviewError(f"--study {study_name}: not in {redact(url)}; it holds: {', '.join(sorted(names))}")
    study = optuna.load_study(study_name=study_name, storage=storage)
    return study, check_readable(study, url)


def study_listing(storage, names: list[str]) -> str:
    """One line per study, oldest first: name, model, search space, budgets, when its first
    trial started and how many trials it holds, so that studies whose names are digests
    can be told apart."""
    from autotune.store.storage import SETUP_ATTR

    rows = []
    for name in names:
        study = optuna.load_study(study_name=name, storage=storage)
        trials = study.get_trials(deepcopy=False)
        starts = [t.datetime_start for t in trials if t.datetime_start is not None]
        settings, setup = study.user_attrs.get(SETTINGS_ATTR) or {}, study.user_attrs.get(SETUP_ATTR) or {}
        meta = settings.get("meta") or {}
        model = meta.get("model") or str(setup.get("target", "?")).rsplit(".", 1)[-1]
        budgets = settings.get("budgets") or ([setup["memory_cap_gib"]] if setup.get("memory_cap_gib") else [])
        space = setup.get("space") or {}
        dims = ", ".join(f"{k} {len(v)}" for k, v in space.items() if isinstance(v, list) and len(v) > 1)
        rows.append((min(starts).strftime("%Y-%m-%d %H:%M") if starts else "no trial yet", name, model,
                     "/".join(f"{float(b):g}" for b in budgets) + " GiB" if budgets else "budget ?", dims or "?",
                     len(trials)))
    rows.sort(key=lambda r: r[0])
    return "\n".join(f"  {name}: model {model}, budget {budget}, space ({dims}), started {start}, {n} trials"
                     for start, name, model, budget, dims, n in rows)


def _default_roi() -> dict:
    """The schema's default prices, for a run that recorded none."""
    import dataclasses

    from autotune.study.config import RoiConfig

    return dataclasses.asdict(RoiConfig())


TRIALS_COLUMNS = ("number", "status", *(d.name for d in DIMENSIONS.values() if d.required or d.group == BATCH),
                  "peak_memory_gib", "samples_per_s")
# Columns the run writes as numbers (pandas' to_csv: every digit of the float, or empty).
NUMBER_COLUMNS = ("number", "micro_batch", "accumulation", "peak_memory_gib", "samples_per_s", "time_spread",
                  "device_peak_gib", "peak_allocated_gib", "peak_reserved_gib", "cuda_context_gib", "roi",
                  "memory_saved_gib", "job_hours", "samples_per_s_lo", "samples_per_s_hi", "loss_parity", "wall_s")


def _read_trials_csv(path: Path) -> pd.DataFrame:
    """A run's trials.csv, refused naming the line, the column and the fix when it is not the
    whole file the run wrote: empty or header only, not text, cut short (the writer ends every
    row with a newline, so a last line without one was cut, wherever inside it), a row with
    fewer or more fields than the header, or a number column holding what is not a number."""
    import csv
    import io

    fix = "; rebuild it from the run's study (python -m autotune.report RUN_DIR/study.db) or rerun the command"
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ReviewError(f"{path}: not a trials table (not UTF-8 text: {e}){fix}") from None
    if not text.strip():
        raise ReviewError(f"{path}: empty, not a trials table{fix}")
    if "\x00" in text:
        raise ReviewError(f"{path}: not a trials table (it holds NUL bytes){fix}")
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
        rows = [(reader.line_num, row) for row in reader]
    except csv.Error as e:
        raise ReviewError(f"{path}: not a trials table (line {reader.line_num}: {e}){fix}") from None
    missing = [c for c in TRIALS_COLUMNS if c not in header]
    if missing:
        raise ReviewError(f"{path}: not an autotune trials table (no {', '.join(missing)} column){fix}")
    if not rows:
        raise ReviewError(f"{path}: the header and no trial: not what a run writes (every run that finishes a "
                          f"trial writes its row){fix}")
    if not text.endswith("\n"):
        line, row = rows[-1]
        raise ReviewError(f"{path}: line {line} is cut short inside column {header[min(len(row), len(header)) - 1]} "
                          f"(the file ends without the newline the run writes after every row){fix}")
    for line, row in rows:
        if len(row) != len(header):
            where = (f"column {header[len(row)]} and after are missing" if len(row) < len(header)
                     else f"{len(row) - len(header)} field(s) more than the header")
            raise ReviewError(f"{path}: line {line} has {len(row)} fields, the header {len(header)}: {where}{fix}")
        for col in NUMBER_COLUMNS:
            if col in header:
                cell = row[header.index(col)]
                if cell.strip() and not _is_number(cell):
                    raise ReviewError(f"{path}: line {line}, column {col}: {cell[:40]!r} is not a number{fix}")
    table = pd.read_csv(io.StringIO(text))
    ok = table["status"] == "ok"
    figures = table[["micro_batch", "accumulation", "peak_memory_gib", "samples_per_s"]].apply(pd.to_numeric,
                                                                                            errors="coerce")
    broken = table[ok & ~(np.isfinite(figures.astype(float)).all(axis=1) & (figures > 0).all(axis=1))]
    if len(broken):
        rows_at = ", ".join(str(rows[i][0]) for i in broken.index[:5])
        raise ReviewError(f"{path}: line(s) {rows_at}: an ok trial without a positive micro_batch, accumulation, "
                          f"peak_memory_gib or samples_per_s{fix}")
    return table


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _settings_from_run_dir(run_dir: Path) -> dict:
    """Settings of a run directory made before the run stored them in its study."""
    best = run_dir / "best.yaml"
    if not best.is_file():
        raise ReviewError(f"{run_dir}: its study has no autotune settings and there is no best.yaml to read them "
                          "from; rerun the tuning command (it resumes the study and stores them)")
    try:
        tuned = yaml.safe_load(best.read_bytes().decode())
        int(tuned["global_batch"]), float(tuned["budget_gib"]), tuned["objective"]  # noqa: B018 (checked here)
    except (yaml.YAMLError, UnicodeDecodeError, KeyError, TypeError, ValueError) as e:
        raise ReviewError(f"{best}: not an autotune best.yaml ({type(e).__name__}: {e}); use the best.yaml the run "
                          "wrote, or review its study.db") from None
    budgets = sorted(float(m.group(1)) for p in run_dir.glob("best-*GiB.yaml")
                     if (m := re.fullmatch(r"best-([\d.]+)GiB\.yaml", p.name)))
    if budgets and float(tuned["budget_gib"]) in budgets:  # the primary budget first, as the run had it
        budgets.remove(float(tuned["budget_gib"]))
    roi = _default_roi()
    hydra_cfg = run_dir / ".hydra" / "config.yaml"
    if hydra_cfg.is_file():
        roi.update(yaml.safe_load(hydra_cfg.read_text()).get("roi") or {})
    model = tuned.get("model", {})
    meta = {"model": model.get("name", "?"), "device_name": tuned.get("device", {}).get("name", "?"),
            "global_batch": int(tuned["global_batch"]), "seq_len": model.get("seq_len"),
            "budget_gib": float(tuned["budget_gib"]), "memory_cap_gib": tuned.get("memory_cap_gib"),
            "objective": tuned["objective"], "command": tuned.get("command", "")}
    return {"global_batch": int(tuned["global_batch"]), "budgets": [float(tuned["budget_gib"]), *budgets],
            "roi": roi, "objective": tuned["objective"], "meta": meta}


def open_reviewed(path: str, study_name: str | None = None) -> Reviewed:
    p = Path(path)
    run_dir = p if p.is_dir() else None
    if run_dir is not None and (run_dir / "study.db").is_file():
        study, trials = _load_study(_storage_url(str(run_dir / "study.db")), study_name)
        table, name, source = trials_table(study, trials), study.study_name, str(run_dir / "study.db")
        settings = study.user_attrs.get(SETTINGS_ATTR) or _settings_from_run_dir(run_dir)
    elif run_dir is not None and (run_dir / "trials.csv").is_file():
        table, name, source = _read_trials_csv(run_dir / "trials.csv"), None, str(run_dir / "trials.csv")
        table = table.drop(columns=[c for c in table.columns if c.startswith("fits_")], errors="ignore")
        fill_defaults(table)  # runs before a dimension existed ran its default
        settings = _settings_from_run_dir(run_dir)
    elif run_dir is not None:
        raise ReviewError(f"{path}: a directory with neither study.db nor trials.csv; pass a run directory "
                          "(outputs/<date>/<time>) or a study storage")
    else:
        study, trials = _load_study(_storage_url(path), study_name)
        table, name, source = trials_table(study, trials), study.study_name, redact(path)
        settings = study.user_attrs.get(SETTINGS_ATTR)
        if settings is None:
            raise ReviewError(f"study '{study.study_name}' in {redact(path)} was made before autotune stored its "
                              "settings in the study; pass its run directory instead, or rerun the tuning command "
                              "(it resumes the study and stores them)")
    if table.empty:
        raise ReviewError(f"{source}: no trial has finished yet")
    try:
        scoring = Scoring.from_dict(settings)
    except ScoringError as e:
        raise ReviewError(f"{source}: {e}; it is not what a run writes: rerun the tuning command (it resumes the "
                          "study and stores them again)") from None
    return Reviewed(source=source, study_name=name, table=table, scoring=scoring,
                    record=RunRecord.from_dict(settings.get("meta")), run_dir=run_dir, left_out=left_out_note(table))


def scored_for_report(results: list[BudgetResult]) -> pd.DataFrame:
    """The primary budget's scored table, with a fits_<budget> column per budget when there are several."""
    scored = results[0].scored
    if len(results) > 1:
        for r in results:
            scored[f"fits_{budget_label(r.budget_gib)}"] = r.scored["fits_budget"]
    return scored


def path_arguments(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("path", help="a run directory, a study storage (.db, journal .log) or a storage URL")
    ap.add_argument("--study", help="the study's name, when the storage holds several")
    return ap
