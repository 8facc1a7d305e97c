"""``search=auto``: measure only what could still beat the best, using what Optuna does not know.

A family is a configuration without its micro-batch (checkpointing, precision, offload,
allocator, and the model-state dimensions: optimizer state, its place, weights, optimizer
implementation). Seven facts about training memory and speed bound what an unmeasured
configuration can do:

1. Feasibility is monotone in micro-batch: above a micro-batch that ran out of memory (or
   measured over a budget), the same family does not fit either.
2. Peak memory is a line in micro-batch (``memory_model``): measured points predict the
   largest micro-batch that fits; the prediction is then measured, not trusted.
3. Saving memory costs time: at one micro-batch, a family with less checkpointing is no
   slower, and no offload is no slower than offload. Not "more checkpointing is slower"
   across offload families: with offload on, checkpointing more blocks leaves less to copy
   and ran faster (H200, BERT-large: 40, 65 and 167 samples/s for none, 0.5 and full).
4. A larger micro-batch of one family is no slower (fewer, larger kernels, fewer
   accumulation steps): on the H200 every family's throughput rose with micro-batch.
5. Nor is it more than proportionally faster: a micro-step over more samples takes no less
   time, so samples/s at micro-batch m2 is at most (m2 / m1) times that at m1.
6. Offload copies every tensor autograd saves to the host in forward and back in backward.
   A trial without offload counts those bytes (``saved_gib`` per micro-step, and from a
   one-sample forward ``saved_per_sample_gib``: saved bytes are a line in micro-batch, the
   saved weights plus a share per sample) and measures the host link (``host_link_gib_s``,
   the fastest pinned copy). So at micro-batch m the offload twin (same checkpointing and
   precision) moves at least 2 x saved(m) per micro-step and cannot beat
   m x link / (2 x saved(m)) samples/s, however well its copies overlap. Without the
   per-sample figure (older trials), saved(m) >= saved(m1) x min(1, m / m1) still holds.
7. Memory is monotone in what a family keeps: at one micro-batch, with the same precision,
   activation offload, allocator and optimizer implementation, a family with less
   checkpointing, a wider optimizer state (default > 8bit > 4bit), fp32 rather than bf16
   weights, or its optimizer state on the device rather than the host holds no less. So
   an out-of-memory (or over-budget) trial rules out every heavier family at that micro-
   batch and above, and a measured peak is a floor for every heavier family's.

So a measured configuration bounds the throughput of every configuration of an equal or
heavier family: at a smaller-or-equal micro-batch by its own figure (3, 4), at a larger one
by its figure scaled by the ratio of micro-batches (3, 5). An unmeasured configuration is
measured only when its optimistic objective (bounded throughput, lowest plausible memory)
beats the best measured one under some budget by more than the best one's measured
spread; otherwise it is never run. When nothing is left that could, the search ends.

The front as well as the best: a configuration is also measured when its bounds say it
could add a point to the memory-throughput Pareto front at the stated resolution
(``front_resolution``, a fraction of memory): when no measured configuration within the
largest budget uses at most that much more memory than its lowest plausible peak and is as
fast as its speed bound allows (within the measured one's spread). So the report shows the
trade-off curve, and a point closer than the resolution to one already measured is not run.

Unbounded configurations are explored fastest kind first: the values of the dimensions that
have no order (precision, allocator, optimizer implementation) not yet measured, then by the
best samples/s measured with them. So once bf16 has measured faster than fp32, every bf16
family is probed before the fp32 ones, whose bounds (facts 3 and 7) the bf16 points then
mostly settle: on a 2-core CPU with native bf16 the default search probed 8 configurations
instead of 13, and the recorded fp32/bf16/fp16 table needs 1-3 fewer trials (replay). Within
a kind, the least saving family first (among offload families, the
most checkpointed first: the least to copy and pin, so the fastest of them and the cheapest
to probe; on the H200's budgets table its probes settle the front's low-memory end and none
without checkpointing needs one), at the micro-batch the memory line predicts as the largest
that fits (so that one measurement bounds the most others), and
with nothing to predict from, at the smallest micro-batch (which gives the line).
The replay benchmark (``bench/search_replay.py``) checks these facts against recorded runs.
"""
from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

from autotune.scoring.score import find_baseline, objective_value, roi_per_job_hour, score
from autotune.scoring.settings import Scoring
from autotune.search.memory_model import Line, fit_families
from autotune.train.dimensions import checkpoint_fraction, family, value_in
from autotune.trial.clean_start import trusted

# A family's values, one per family dimension (train/dimensions.py), checkpointing as its
# fraction of the blocks (ordered, and the key of fact 3's exception).
Family: Any = namedtuple("Family", [d.name for d in family()])  # type: ignore[misc]
Fam: TypeAlias = Any  # a Family: its fields, the family dimensions, are known at import only
Key: TypeAlias = tuple[Fam, int]  # (family, micro-batch)
Row: TypeAlias = dict[str, Any]  # a trials-table row
Measured: TypeAlias = dict[Key, Row]
PLAIN = Family(*(checkpoint_fraction(d.default) if d.name == "checkpointing" else d.default
                 for d in family()))  # the ROI baseline's family
MIN_NOISE = 0.02  # a difference below 2 % is never worth a trial, however steady the timing
MARGIN = 0.05  # a certain memory line may be off by this much before it rules a micro-batch out
LINK_MARGIN = 1.25  # fact 6 allows the host link this much more than its fastest measured copy
INF = math.inf


def family_of(params: Row) -> Fam:
    return Family(*(_norm(d.name, params.get(d.name)) for d in family()))


def _norm(key: str, value: Any) -> Any:
    value = value_in({key: value}, key)  # its default where a table row has none
    return checkpoint_fraction(value) if key == "checkpointing" else value


def _finite(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def group_of(fam: Fam) -> tuple[Any, ...]:
    """Families that share a fixed memory part and are ordered by fact 3: the same values of
    every dimension that changes memory not growing with the micro-batch (precision, allocator
    and the model state: optimizer state, its place, weight precision, implementation)."""
    return tuple(v for d, v in zip(family(), fam, strict=False) if d.fixed_memory)


def _ordered(a: Fam, b: Fam, rank_of: str) -> bool:
    """Is ``a`` at least ``b`` in every dimension's ``rank_of`` order (``heavier``, ``slower``:
    train/dimensions.py), and equal in those that have none?"""
    for d, x, y in zip(family(), a, b, strict=False):
        rank: Callable[[Any], float] | None = getattr(d, rank_of)
        if rank is None:
            if x != y:
                return False
        elif rank(x) < rank(y):
            return False
    return True


def no_lighter(a: Fam, b: Fam) -> bool:
    """Does family ``a`` hold at least the memory of ``b`` at every micro-batch (fact 7)?
    Equal values where a dimension has no memory order (precision, activation offload,
    allocator, optimizer implementation), and no more checkpointing, no smaller optimizer
    state, no lower-precision weights, and the state not on the host where ``b``'s is on the
    device."""
    return _ordered(a, b, "heavier")


def no_slower(a: Fam, b: Fam) -> bool:
    """Fact 3: family ``a`` is no slower than family ``b`` at the same micro-batch: less
    checkpointing, no offload where ``b`` offloads, the rest equal."""
    if a == b:
        return True
    if a.offload:  # with offload on, more checkpointing leaves less to copy: an offload family bounds only itself
        return False
    return _ordered(b, a, "slower")


STATE_ORDER = {"4bit": 0, "8bit": 1, "default": 2}


def saving_level(fam: Fam) -> tuple[Any, ...]:
    # model state first (least saving first), then offload, then the checkpointed fraction:
    # without offload the least checkpointed first (the fastest); with it the most (fact 3:
    # the least to copy, so the fastest offload family, and its first step pins the least)
    return (fam.optimizer_offload, fam.weights == "bf16", -STATE_ORDER[fam.optimizer_state], fam.offload,
            -fam.checkpointing if fam.offload else fam.checkpointing)


def kind_of(fam: Fam) -> tuple[Any, ...]:
    """A family's values of the dimensions that have no memory or speed order (precision,
    allocator, optimizer implementation): which of them is faster is for the measurements to say."""
    return tuple(v for d, v in zip(family(), fam, strict=False) if d.heavier is None and d.slower is None)


def _fastest_by_kind(measured: Measured) -> dict[tuple[Any, ...], float]:
    """The best samples/s measured for each kind (``kind_of``)."""
    out: dict[tuple[Any, ...], float] = {}
    for (fam, _), row in measured.items():
        if row["status"] == "ok" and _finite(row.get("samples_per_s")):
            out[kind_of(fam)] = max(out.get(kind_of(fam), -INF), float(row["samples_per_s"]))
    return out


class AutoSearch:
    """Proposes one configuration at a time from the trials table, or None when done."""

    name = "auto"

    def __init__(self, configs: list[Row], scoring: Scoring, memory_cap_gib: float | None = None,
                 front_resolution: float = 0.0):
        self.configs = configs
        self.front_resolution = front_resolution
        self.budgets = list(scoring.budgets)
        self.objective = scoring.objective
        self.roi = scoring.roi
        self.global_batch = scoring.global_batch
        self.cap = memory_cap_gib
        self.micro_batches = sorted({c["micro_batch"] for c in configs})
        order: dict[Fam, int] = {}
        for c in configs:  # the space file's order breaks ties between equally light families
            order.setdefault(family_of(c), len(order))
        self.family_order = order

    # -- what the measurements say -------------------------------------------------------
    def _measured(self, table: pd.DataFrame) -> Measured:
        out: Measured = {}
        for row in table.to_dict("records"):
            out[(family_of(row), int(row["micro_batch"]))] = row
        return out

    @staticmethod
    def _fit_peak(row: Row) -> float:
        v = row.get("device_peak_gib")
        return float(v) if v is not None and np.isfinite(v) else float(row["peak_memory_gib"])

    def _lines(self, measured: Measured) -> dict[Fam, Line]:
        points: dict[Fam, list[tuple[float, float]]] = {}
        statics = []
        for (fam, m), row in measured.items():
            if row["status"] == "ok" and np.isfinite(self._fit_peak(row)):
                points.setdefault(fam, []).append((m, self._fit_peak(row)))
            if row.get("static_gib") is not None and np.isfinite(row.get("static_gib", np.nan)):
                statics.append(float(row["static_gib"]) + float(row.get("cuda_context_gib") or 0.0))
        return fit_families(points, group_of, float(np.median(statics)) if statics else None)

    def _speed_bound(self, fam: Fam, m: int, measured: Measured) -> float:
        """The lowest upper bound on (fam, m)'s samples/s that the measurements give."""
        bound = INF
        for (f, mm), row in measured.items():
            if row["status"] != "ok" or not no_slower(f, fam) or not np.isfinite(row["samples_per_s"]):
                continue
            sps = float(row["samples_per_s"])
            bound = min(bound, sps if mm >= m else sps * m / mm)  # facts 3 and 4, or 3 and 5
        if fam.offload:
            bound = min(bound, self._transfer_bound(fam, m, measured))
        return bound

    @staticmethod
    def _transfer_bound(fam: Fam, m: int, measured: Measured) -> float:
        """Fact 6: the samples/s an offload family's copies allow at micro-batch ``m``."""
        links = [float(r["host_link_gib_s"]) for r in measured.values() if _finite(r.get("host_link_gib_s"))]
        saved = 0.0  # a lower bound on the bytes saved per micro-step at m, from the twin without offload
        for (f, mm), row in measured.items():
            if (f == fam._replace(offload=False) and row["status"] == "ok"
                    and _finite(row.get("saved_gib"))):
                at_mm = float(row["saved_gib"])
                if _finite(row.get("saved_per_sample_gib")):
                    per_sample = max(0.0, float(row["saved_per_sample_gib"]))
                    saved = max(saved, max(0.0, at_mm - per_sample * mm) + per_sample * m)
                else:
                    saved = max(saved, at_mm * min(1.0, m / mm))
        if not links or saved <= 0:
            return INF
        return m * max(links) * LINK_MARGIN / (2 * saved)

    def _infeasible(self, fam: Fam, m: int, budget: float, measured: Measured, line: Line | None) -> bool:
        for (f, mm), row in measured.items():
            if mm > m or not trusted(row) or not no_lighter(fam, f):
                continue  # only a clean process's measurement rules others out
            if row["status"] == "oom" or (row["status"] == "pruned" and row.get("pruned_by") is not None):
                return True  # fact 1: over the cap, so over every budget
            if row["status"] == "ok" and self._fit_peak(row) > budget:
                return True
        return line is not None and line.certain and line.peak(m) * (1 - MARGIN) > budget

    def _lowest_peak(self, fam: Fam, m: int, measured: Measured, line: Line | None, lines: dict[Fam, Line]) -> float:
        low = 0.0
        for (f, mm), row in measured.items():
            if mm <= m and row["status"] == "ok" and no_lighter(fam, f):  # facts 1 and 7
                low = max(low, self._fit_peak(row))
        if line is not None and line.certain:
            low = max(low, line.peak(m) * (1 - MARGIN))
        else:
            shared = [ln.intercept for f, ln in lines.items() if group_of(f) == group_of(fam) and ln.certain]
            if shared:
                low = max(low, min(shared))
        return low

    def _predicted_largest(self, fam: Fam, budget: float, lines: dict[Fam, Line]) -> int | None:
        """The largest micro-batch predicted to fit: from the family's own line, else from the
        nearest measured family that is no lighter (its slope is at least as steep, so the
        prediction errs small), else None (nothing known)."""
        line = lines.get(fam)
        if line is None:
            donors = [f for f in lines if no_slower(f, fam)]
            if not donors:
                return None
            line = lines[max(donors, key=lambda f: f.checkpointing)]
        return line.largest_fitting(self.micro_batches, budget) or 0

    # -- the proposal ---------------------------------------------------------------------
    def propose(self, table: pd.DataFrame, pending: set[Key]) -> Row | None:
        """The next configuration to measure, or None when nothing left could win.

        ``pending``: configuration keys (family, micro_batch) queued or running elsewhere.
        """
        base, worth, lines, measured = self._worth(table, pending)
        if base is not None:  # ROI is relative to the baseline: measure it first
            return base
        if not worth:
            return None
        return self._config(self._pick(worth, lines, measured))

    def left(self, table: pd.DataFrame, pending: set[Key]) -> int:
        """How many configurations could still be worth measuring: the search's bound on
        what is left (each measurement can only rule more out)."""
        base, worth, _, _ = self._worth(table, pending)
        return len(worth) + (base is not None and (family_of(base), base["micro_batch"]) not in worth)

    def _worth(self, table: pd.DataFrame,
               pending: set[Key]) -> tuple[Row | None, dict[Key, float], dict[Fam, Line], Measured]:
        """(the baseline config if it must run first, {key: gain} of the configurations that
        could beat the best measured one, the memory lines, the measurements they rest on)."""
        measured = self._measured(table) if not table.empty else {}
        lines = self._lines(measured)
        base = self._baseline_config() if self.objective == "roi" else None
        if base is not None and {(family_of(base), base["micro_batch"])} & (set(measured) | pending):
            base = None
        baselines = {b: find_baseline(table, self.global_batch, b) if not table.empty else None for b in self.budgets}
        thresholds = {b: self._threshold(table, b) for b in self.budgets}
        worth: dict[Key, float] = {}
        for c in self.configs:
            key = (family_of(c), c["micro_batch"])
            if key in measured or key in pending:
                continue
            fam, m = key
            ub = self._speed_bound(fam, m, measured)
            for b in self.budgets:
                if self._infeasible(fam, m, b, measured, lines.get(fam)):
                    continue
                value = self._optimistic(self._lowest_peak(fam, m, measured, lines.get(fam), lines), ub, baselines[b])
                gain = value - thresholds[b]
                if gain > 0:
                    worth[key] = max(worth.get(key, -INF), gain)
            if key not in worth and self._could_join_front(key, ub, measured, lines):
                worth[key] = 0.0
        return base, worth, lines, measured

    def _could_join_front(self, key: Key, speed_ub: float, measured: Measured, lines: dict[Fam, Line]) -> bool:
        """Could ``key`` add a Pareto-front point at ``front_resolution``? Not when a measured
        configuration within the largest budget uses at most (1 + resolution) x its lowest
        plausible peak and is at least as fast as its speed bound (within its own spread)."""
        if self.front_resolution <= 0:
            return False
        fam, m = key
        top = max(self.budgets)
        if self._infeasible(fam, m, top, measured, lines.get(fam)):
            return False
        low = self._lowest_peak(fam, m, measured, lines.get(fam), lines) * (1 + self.front_resolution)
        for row in measured.values():
            if row["status"] != "ok" or not np.isfinite(row["samples_per_s"]):
                continue
            peak = self._fit_peak(row)
            noise = max(MIN_NOISE, float(row.get("time_spread") or 0.0))
            if peak <= min(low, top) and float(row["samples_per_s"]) * (1 + noise) >= speed_ub:
                return False
        return True

    def _pick(self, worth: dict[Key, float], lines: dict[Fam, Line], measured: Measured) -> Key:
        fastest = _fastest_by_kind(measured)
        families = sorted({f for f, _ in worth}, key=lambda f: (-fastest.get(kind_of(f), INF), saving_level(f),
                                                                 self.family_order.get(f, 0)))
        for fam in families:  # lightest family with something worth measuring
            ms = sorted(m for f, m in worth if f == fam)
            predicted = [self._predicted_largest(fam, b, lines) for b in self.budgets]
            targets = [t for t in predicted if t is not None]
            if len(targets) < len(predicted):  # nothing known: the smallest gives a line to predict from
                return fam, ms[0]
            for t in sorted(targets):  # the prediction for the smallest budget first
                below = [m for m in ms if m <= t]
                if below:
                    return fam, below[-1]
            return fam, ms[0]  # predicted not to fit but not ruled out: the smallest left verifies it
        raise AssertionError("worth is not empty")

    def _config(self, key: Key) -> Row:
        for c in self.configs:
            if (family_of(c), c["micro_batch"]) == key:
                return c
        raise KeyError(key)

    def _baseline_config(self) -> Row | None:
        for c in self.configs:
            if family_of(c) == PLAIN and c["micro_batch"] == self.global_batch:
                return c
        return None

    # -- objective ------------------------------------------------------------------------
    def _threshold(self, table: pd.DataFrame, budget: float) -> float:
        """The best measured objective under ``budget``, raised by its measured spread."""
        if table.empty:
            return -INF
        scored, baseline = score(table, self.global_batch, budget, self.roi)
        key = "roi" if self.objective == "roi" else "samples_per_s"
        ok = scored[scored["fits_budget"] & np.isfinite(scored[key])]
        if ok.empty:
            return -INF
        best = ok.loc[ok[key].idxmax()]
        noise = max(MIN_NOISE, float(best.get("time_spread") or 0.0))
        return objective_value(self.objective, float(best["peak_memory_gib"]),
                               float(best["samples_per_s"]) * (1 + noise), baseline, self.roi)

    def _optimistic(self, peak_lo: float, speed_ub: float, baseline: Any) -> float:
        """The highest objective a config with peak >= peak_lo and speed <= speed_ub could reach."""
        if self.objective != "roi":
            return speed_ub
        if baseline is None:
            return INF
        if baseline.samples_per_s is None or roi_per_job_hour(baseline.peak_memory_gib - peak_lo, self.roi) >= 0:
            return INF  # ROI would grow as the config slows down: no bound from speed
        return objective_value("roi", peak_lo, speed_ub, baseline, self.roi)
