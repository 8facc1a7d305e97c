"""The trials table: one row per finished measurement of a study, repeats folded in.

Every output (trials.csv, the scores, the report) and the ``auto`` search read the study
through this table, so they all see the same figures.
"""
from __future__ import annotations

import json
import statistics
from typing import Any

import optuna
import pandas as pd

from autotune.store.claims import cut_short, is_duplicate, params_of
from autotune.store.optuna_access import read_trials
from autotune.train.dimensions import ALWAYS_KEYED, BATCH, DIMENSIONS

REFERENCE_ATTR = "reference_losses"  # study attribute: {trial number: the plain optimizer's losses}
MEMORY_AGREEMENT = 0.02  # runs of one configuration whose peaks differ by more are flagged

CONFIGURATION_KEYS = tuple(d.name for d in DIMENSIONS.values() if d.required)  # a row without these cannot be read
# Columns every trials table starts with; the rest follow in the order first seen.
# The dimensions always keyed (train/dimensions.py); a trial recorded before one existed ran its default.
KEYED = [d for d in DIMENSIONS.values() if d.group in ALWAYS_KEYED]
LEAD_COLUMNS = [
    "number",
    "status",
    *(d.name for d in KEYED),
    "peak_memory_gib",
    "samples_per_s",
    "time_spread",
    "cause",
]


def fill_defaults(df: pd.DataFrame) -> None:
    """In place: every dimension's default where a trial has no value for it (a group not
    always keyed that it left at its defaults, or recorded before the dimension existed);
    a column for each dimension every configuration carries."""
    for d in DIMENSIONS.values():
        if d.group == BATCH or d.name in CONFIGURATION_KEYS:
            continue
        if d.name in df:
            df[d.name] = df[d.name].astype(object).where(df[d.name].notna(), d.default)
        elif d in KEYED:
            df[d.name] = d.default


def trials_table(study: optuna.Study, trials: list | None = None) -> pd.DataFrame:
    """One row per finished trial: its configuration, status, cause and every measurement.

    Duplicates (never run) are left out. Repeats of a configuration are folded into its
    row: samples/s becomes the median over every process that measured it, the peak the
    largest (every run's is kept in ``peak_memory_gib_runs``, and ``memory_disagrees``
    flags runs more than 2 % apart), ``time_spread`` the larger of the within-process and
    between-process spreads, and a repeat that failed turns the row into that failure.
    Runs measured while other processes competed for the device (``contended``) count for
    speed only when no quiet run exists; the row is ``contended`` only then, and the spread
    covers every run, so a figure from one quiet moment never stands with a narrow interval
    against its own repeats. A probe (``fidelity``, trial/fidelity.py) counts for speed only
    when no full measurement exists; the row's ``fidelity`` is ``full`` once one does.
    ``trials``: the study's trials where the caller has read them already.
    """
    rows: list[dict[str, Any]] = []
    repeats: dict[Any, list[Any]] = {}
    left_out: list[Any] = []
    for t in (read_trials(study) if trials is None else trials):
        if not t.state.is_finished() or is_duplicate(t):
            continue
        params = params_of(t)  # a trial cut short before its parameters were set still has its queued ones
        if not all(k in params for k in CONFIGURATION_KEYS):
            left_out.append(f"trial {t.number} ({t.user_attrs.get('status') or t.state.name.lower()}: "
                            f"{t.user_attrs.get('cause') or 'no cause recorded'}) holds no configuration")
            continue
        row = {"number": t.number, **params, **t.user_attrs}
        row.setdefault("status", "crash" if t.state == optuna.trial.TrialState.FAIL else "unknown")
        row["retry_of"] = t.user_attrs.get("retry_of")
        if t.user_attrs.get("repeat"):
            if not cut_short(t):
                repeats.setdefault(t.user_attrs.get("repeat_of"), []).append(row)
        else:
            rows.append(row)
    by_number = {r["number"]: r for r in rows}
    for number, extra in repeats.items():
        if number in by_number:
            _fold_repeats(by_number[number], extra)
    # Losses of the plain-optimizer runs made for parity (study/parity.py), by trial number.
    for number, losses in study.user_attrs.get(REFERENCE_ATTR, {}).items():
        if int(number) in by_number:
            by_number[int(number)]["reference_losses"] = losses
    df = pd.DataFrame(rows)
    for col in LEAD_COLUMNS:
        if col not in df.columns:
            df[col] = None if col in ("status", "cause", *CONFIGURATION_KEYS) else float("nan")
    fill_defaults(df)
    for col in ("peak_memory_gib", "samples_per_s", "time_spread"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    if not df.empty:  # studies recorded before probes existed measured every trial in full
        df["fidelity"] = [None if r.get("status") in NOT_RUN else fidelity_of(r) for r in df.to_dict("records")]
    df = df.drop(columns=[c for c in ("owner", "heartbeat", "repeat", "repeat_of") if c in df.columns])
    rest = [c for c in df.columns if c not in LEAD_COLUMNS]
    df = df[LEAD_COLUMNS + rest].sort_values("number").reset_index(drop=True)
    df.attrs["left_out"] = left_out
    return df


def left_out_note(table: pd.DataFrame) -> str:
    """A line naming the finished trials ``trials_table`` left out (cut short before they had a
    configuration), or ""."""
    left = table.attrs.get("left_out") or []
    if not left:
        return ""
    return (f"{len(left)} trial(s) left out, cut short before their configuration was recorded (nothing was "
            f"measured; the configuration is measured again): " + "; ".join(left[:10])
            + (f"; and {len(left) - 10} more" if len(left) > 10 else ""))


FIDELITY_RANK = {"probe": 0, "raced": 1, "full": 2}


NOT_RUN = ("skipped", "pruned")  # recorded configurations no trial process measured: no fidelity


def fidelity_of(row: dict) -> str:
    """A run's fidelity (trial/fidelity.py); runs recorded before probes existed were full."""
    value = row.get("fidelity")
    return value if value in ("probe", "raced", "full") else "full"


def _fold_repeats(row: dict, extra: list) -> None:
    failed = [r for r in extra if r["status"] != "ok"]
    if failed and row["status"] == "ok":
        f = failed[0]
        row["status"] = f["status"]
        row["cause"] = (
            f"ok in trial {row['number']}, {f['status']} when repeated in trial {f['number']}: {f.get('cause')}"
        )
        return
    runs = [row] + [r for r in extra if r["status"] == "ok"]
    if row["status"] != "ok" or len(runs) < 2:
        return
    probed = fidelity_of(row) == "probe"
    full = [r for r in runs if fidelity_of(r) != "probe"]
    precise = full or runs  # a probe's speed counts only where no full or raced measurement exists
    quiet = [r for r in precise if not r.get("contended")]
    timed = quiet or precise
    busy = [r for r in runs if r.get("contended")]  # a contended probe too: the record says so
    if busy:
        row.update(contended_runs=len(busy), contended=not quiet,
                   contended_samples_per_s=statistics.median(float(r["samples_per_s"]) for r in busy))
        if quiet:
            covered = any(r.get("contended") for r in precise)
            row["contention"] = (f"contended in trial(s) {', '.join(str(r['number']) for r in busy)} "
                                 f"({busy[0].get('contention')}); speed from the quiet run(s) only"
                                 + (", its interval covering the contended ones" if covered else ""))
    sps = [float(r["samples_per_s"]) for r in timed]
    median = statistics.median(sps)
    every_precise = [float(r["samples_per_s"]) for r in precise]
    between = (max(every_precise) - min(every_precise)) / median if median > 0 else float("nan")
    within = max(float(r.get("time_spread") or 0.0) for r in timed)
    every = [float(r["samples_per_s"]) for r in runs]  # the contended ones and probes too: the record keeps them
    row.update(samples_per_s=median, samples_per_s_runs=";".join(f"{v:.6g}" for v in every),
               process_spread=between if len(precise) > 1 else float("nan"),
               time_spread=max(within, between) if len(precise) > 1 else within,
               repeat_trials=";".join(str(r["number"]) for r in runs[1:]),
               fidelity=max((fidelity_of(r) for r in runs), key=lambda f: FIDELITY_RANK.get(f, -1)),
               full_runs=sum(fidelity_of(r) == "full" for r in runs),
               spread_assumed=any(r.get("spread_assumed") is True for r in timed))  # a one-step probe's
    if full and probed:  # the probe's speed is replaced: its figures stay in the record
        for key in ("step_time_s", "race", "flops_per_sample", "flops_error"):
            vals = [r.get(key) for r in full if r.get(key) is not None]
            if vals:
                row[key] = vals[-1]
    peaks = [float(r["peak_memory_gib"]) for r in runs if r.get("peak_memory_gib") is not None]
    if peaks:
        apart = (max(peaks) - min(peaks)) / min(peaks) if min(peaks) > 0 else 0.0
        row.update(peak_memory_gib_runs=";".join(f"{v:.6g}" for v in peaks), memory_runs_apart=apart,
                   memory_disagrees=apart > MEMORY_AGREEMENT)
    for col in ("peak_memory_gib", "device_peak_gib", "peak_allocated_gib", "peak_reserved_gib"):
        vals = [float(r[col]) for r in runs if r.get(col) is not None]
        if vals:
            row[col] = max(vals)


# Result fields too bulky or nested for a column; kept in trials/NNN/result.json.
NOT_COLUMNS = {"step_times_s", "timings"}


def result_attrs(result: dict[str, Any]) -> dict[str, Any]:
    """A trial result as the study stores it, one user attribute per field (``trials_table`` reads
    them back as columns): timings flattened, losses as JSON, the step times left to result.json."""
    attrs: dict[str, Any] = {}
    for k, v in result.items():
        if k == "timings":
            attrs.update({f"{tk}": tv for tk, tv in v.items()})
        elif k == "losses":
            attrs["losses"] = json.dumps([round(x, 5) if isinstance(x, float) else x for x in v])
        elif k not in NOT_COLUMNS:
            attrs[k] = v
    return attrs
