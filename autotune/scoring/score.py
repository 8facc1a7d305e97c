"""Score a trials table: which trials fit the budget, their ROI, and the best one.

Pure functions of a pandas table (one row per trial), so they are tested on hand-made
tables without a GPU. The ROI formula:

    ROI = memory_saved_gib * memory_price_per_gib_hour * job_hours
          - (job_hours - baseline_job_hours) * compute_price_per_hour

job_hours = workload_samples / samples_per_s / 3600, memory_saved_gib = baseline peak -
trial peak (reserved memory on CUDA), baseline = no checkpointing, fp32, micro_batch =
global_batch: what a user runs before tuning.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from autotune.scoring.pareto import pareto_mask
from autotune.scoring.parity import loss_parity
from autotune.train.dimensions import family, value_in
from autotune.train.optimizer import MODEL_STATE_DEFAULTS, state_value

OBJECTIVES = ("roi", "throughput")
NOISY_SPREAD = 0.10  # IQR/median above this flags a timing as noisy (torch.utils.benchmark's warning level)


@dataclass(frozen=True)
class Baseline:
    peak_memory_gib: float
    samples_per_s: float | None
    measured: bool  # True: the baseline configuration itself ran ok
    note: str  # how the figures were obtained, for the report

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit_mask(trials: pd.DataFrame, budget_gib: float) -> pd.Series:
    """Trials that ran ok, measured finite figures, and fit the budget at device level."""
    peak = trials.get("device_peak_gib", trials["peak_memory_gib"]).fillna(trials["peak_memory_gib"])
    return ((trials["status"] == "ok") & np.isfinite(trials["peak_memory_gib"])
            & np.isfinite(trials["samples_per_s"]) & (peak <= budget_gib))


def is_baseline_strategy(trials: pd.DataFrame) -> pd.Series:
    """The plain strategy: every family dimension at its default (train/dimensions.py)."""
    return plain_with(trials, {})


def plain_with(trials: pd.DataFrame, changes: dict[str, Any]) -> pd.Series:
    """The trials of the plain strategy with ``changes``: every family dimension at its default
    but those, a value a trial does not record counting as its default."""
    out = pd.Series(True, index=trials.index)
    for d in family():
        want = d.check(changes.get(d.name, d.default))
        if d.name in trials:
            out &= trials[d.name].map(lambda v, name=d.name: _value(name, v)) == want
        elif want != d.default:
            return pd.Series(False, index=trials.index)
    return out


def _value(name: str, value: Any) -> Any:
    try:
        return value_in({name: value}, name)
    except (TypeError, ValueError):
        return None  # not a value of the dimension: not the default either


def baseline_number(trials: pd.DataFrame, global_batch: int) -> int | None:
    """The trial number of the baseline configuration, when it ran ok."""
    row = trials[is_baseline_strategy(trials) & (trials["micro_batch"] == global_batch) & (trials["status"] == "ok")]
    return int(row.iloc[0]["number"]) if len(row) else None


def find_baseline(trials: pd.DataFrame, global_batch: int, budget_gib: float) -> Baseline:
    plain = trials[is_baseline_strategy(trials)]
    row = plain[plain["micro_batch"] == global_batch]
    if len(row) and row.iloc[0]["status"] == "ok":
        r = row.iloc[0]
        fits = r.get("device_peak_gib", r["peak_memory_gib"]) <= budget_gib
        note = "measured" + ("" if fits else f"; it does not fit the {budget_gib:g} GiB budget")
        return Baseline(float(r["peak_memory_gib"]), float(r["samples_per_s"]), True, note)
    why = f"the baseline (none, fp32, micro_batch={global_batch}) " + (
        f"ended '{row.iloc[0]['status']}'" if len(row) else "was not run")
    ok = plain[plain["status"] == "ok"]
    if len(ok):
        nearest = ok.sort_values("micro_batch").iloc[-1]
        return Baseline(budget_gib, float(nearest["samples_per_s"]), False,
                        f"{why}: its peak is taken as at least the budget ({budget_gib:g} GiB, a lower bound), "
                        f"its speed as that of none/fp32 at micro_batch={int(nearest['micro_batch'])}")
    return Baseline(budget_gib, None, False,
                    f"{why} and no none/fp32 trial ran: its peak is taken as at least the budget "
                    f"({budget_gib:g} GiB, a lower bound) and the time term of ROI is left out")


def with_model_state(trials: pd.DataFrame) -> pd.DataFrame:
    """A copy with the model-state columns filled in with their defaults where a trial (of an
    activation-only space, or before escalation) has none."""
    df = trials.copy()
    for col, _default in MODEL_STATE_DEFAULTS.items():
        if col in df.columns:
            df[col] = [state_value(col, v) for v in df[col]]
    return df


def score(trials: pd.DataFrame, global_batch: int, budget_gib: float,
          roi: dict[str, Any]) -> tuple[pd.DataFrame, Baseline]:
    """Add fits_budget, job_hours, memory_saved_gib, roi and on_pareto columns."""
    df = with_model_state(trials)
    baseline = find_baseline(df, global_batch, budget_gib)
    df["fits_budget"] = fit_mask(df, budget_gib)
    sps = df["samples_per_s"].where(df["samples_per_s"] > 0)
    df["job_hours"] = job_hours(sps, roi)
    df["memory_saved_gib"] = baseline.peak_memory_gib - df["peak_memory_gib"]
    base_hours = job_hours(baseline.samples_per_s, roi) if baseline.samples_per_s else df["job_hours"]

    def roi_at(samples_per_s: pd.Series) -> pd.Series:
        value = roi_of(df["memory_saved_gib"], job_hours(samples_per_s.where(samples_per_s > 0), roi), base_hours, roi)
        return value.where(df["fits_budget"])  # a trial that does not fit has no ROI

    df["roi"] = roi_at(sps)
    # The range each figure could take within the trial's measured timing spread.
    spread = _spread(df)
    slow, fast = speed_bounds(sps, spread)
    df["samples_per_s_lo"], df["samples_per_s_hi"] = slow, fast
    # Where the spread reaches a speed of zero, ROI has no lower end: roi_lo is left empty (NaN).
    df["roi_lo"], df["roi_hi"] = np.minimum(roi_at(slow), roi_at(fast)), np.fmax(roi_at(slow), roi_at(fast))
    df["contended"] = _contended(df)
    df["noisy"] = (spread > NOISY_SPREAD) | df["contended"]
    mem = df["peak_memory_gib"].where(df["fits_budget"])
    df["on_pareto"] = pareto_mask(mem, df["samples_per_s"].where(df["fits_budget"]))
    df["loss_parity"] = loss_parity(df)
    return df, baseline


def job_hours(samples_per_s: Any, roi: dict[str, Any]) -> Any:
    """Hours the whole job (``workload_samples``) takes at ``samples_per_s``, a figure or a column."""
    return roi["workload_samples"] / samples_per_s / 3600.0


def roi_of(memory_saved_gib: Any, hours: Any, base_hours: Any, roi: dict[str, Any]) -> Any:
    """The ROI formula (the module's docstring), the one place it is written: the memory saved,
    paid for over the job's hours, less the compute hours it adds over the baseline's. Figures
    or columns alike."""
    return (memory_saved_gib * roi["memory_price_per_gib_hour"] * hours
            - (hours - base_hours) * roi["compute_price_per_hour"])


def roi_per_job_hour(memory_saved_gib: float, roi: dict[str, Any]) -> float:
    """How ROI changes per hour the job takes at a fixed memory saving (``roi_of``'s slope in
    hours): positive where a slower configuration would score higher, so speed bounds nothing."""
    return float(memory_saved_gib * roi["memory_price_per_gib_hour"] - roi["compute_price_per_hour"])


def objective_value(objective: str, peak_memory_gib: float, samples_per_s: float, baseline: Baseline,
                    roi: dict[str, Any]) -> float:
    """One configuration's objective: samples/s, or its ROI against ``baseline`` (as ``score``)."""
    if objective != "roi":
        return samples_per_s
    if samples_per_s <= 0:
        return -math.inf
    hours = job_hours(samples_per_s, roi)
    base_hours = job_hours(baseline.samples_per_s, roi) if baseline.samples_per_s else hours
    return float(roi_of(baseline.peak_memory_gib - peak_memory_gib, hours, base_hours, roi))


def speed_at_objective(objective: str, peak_memory_gib: float, value: float, baseline: Baseline,
                       roi: dict[str, Any]) -> float | None:
    """The samples/s at which a configuration of ``peak_memory_gib`` reaches objective ``value``
    (``objective_value``'s inverse in speed; memory is fixed): inf where no finite speed
    reaches it, None where its objective does not depend on speed."""
    if objective != "roi":
        return value
    saved = baseline.peak_memory_gib - peak_memory_gib
    if baseline.samples_per_s:  # roi_of = hours x roi_per_job_hour + baseline hours x compute price
        slope = roi_per_job_hour(saved, roi)
        constant = job_hours(baseline.samples_per_s, roi) * roi["compute_price_per_hour"]
    else:  # no baseline speed (base_hours = hours): roi_of = hours x the memory saved's price
        slope, constant = saved * roi["memory_price_per_gib_hour"], 0.0
    if slope == 0:
        return None
    hours = (value - constant) / slope
    return float(roi["workload_samples"] / 3600.0 / hours) if hours > 0 else math.inf


def objective_column(objective: str) -> str:
    """The scored table's column that an objective ranks by."""
    return "roi" if objective == "roi" else "samples_per_s"


def speed_bounds(samples_per_s: Any, spread: Any) -> tuple[Any, Any]:
    """(low, high) samples/s within a measured spread, for a figure or a column. The low one
    is clamped at zero: a spread of 100 % or more bounds the speed below by nothing."""
    return np.maximum(samples_per_s * (1 - spread), 0.0), samples_per_s * (1 + spread)


def _spread(df: pd.DataFrame) -> pd.Series:
    return (
        pd.to_numeric(df.get("time_spread", pd.Series(0.0, index=df.index)), errors="coerce")
        .fillna(0.0)
        .clip(lower=0.0)
    )


def _contended(df: pd.DataFrame) -> pd.Series:
    """Rows whose speed was measured only while other processes competed for the device."""
    if "contended" not in df:
        return pd.Series(False, index=df.index)
    return df["contended"].map(lambda v: bool(v) if pd.notna(v) else False).astype(bool)


def within_noise(scored: pd.DataFrame, objective: str) -> pd.Series:
    """Fitting trials whose figure could equal the top one's within both measured spreads."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r}: use one of {', '.join(OBJECTIVES)}")
    key = objective_column(objective)
    ok = scored["fits_budget"] & np.isfinite(scored[key])
    if not ok.any():
        return ok
    top = scored.loc[ok, key].idxmax()
    # A spread of 100 % or more leaves a bound undefined (NaN): then it bounds nothing.
    hi = scored[f"{key}_hi"].astype(float).fillna(np.inf)
    top_lo = float(scored.loc[top, f"{key}_lo"])
    tied = ok & (hi >= (top_lo if np.isfinite(top_lo) else -np.inf))
    tied[top] = True
    return tied


def choose_best(scored: pd.DataFrame, objective: str) -> int | None:
    """Index of the best fitting trial, or None.

    A difference smaller than the measured spread decides nothing: among the trials tied
    with the top one within noise (``contenders``), a stable one (spread <= 10 %, measured
    on a quiet device) wins over a noisy or contended one, then the one using less memory
    (memory is measured exactly), then the higher figure.
    """
    c = scored[contenders(scored, objective)]
    if c.empty:
        return None
    key = objective_column(objective)
    order = pd.DataFrame({"noisy": (_spread(c) > NOISY_SPREAD) | _contended(c), "m": c["peak_memory_gib"], "k": -c[key],
                          "s": _spread(c)})
    best: int = order.sort_values(["noisy", "m", "k", "s"], kind="stable").index[0]
    return best


def contenders(scored: pd.DataFrame, objective: str) -> pd.Series:
    """The tied trials (``within_noise``) whose figure is at least the best lower bound among
    them: what the safest of them guarantees.

    Without this gate a wide interval ties the top with configurations far slower than any
    of its runs, and "stable first" then picks one of those (the 1.1B Llama at 16 GiB on an
    H100: a stable 21.9 samples/s chosen over a 36.4 [21.5, 51.3] and a 32.0 whose lower
    bounds both beat it). Stability still breaks ties among the figures that could be the
    fastest: a stable 100 over a noisy 105 whose interval reaches below 100.
    """
    tied = within_noise(scored, objective)
    if not tied.any():
        return tied
    key = objective_column(objective)
    lo = scored.loc[tied, f"{key}_lo"].astype(float)
    floor = lo.max() if lo.notna().any() else -np.inf  # a spread of 100 % or more bounds nothing
    return tied & (scored[key] >= floor)

