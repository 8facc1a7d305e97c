"""Peak memory as a line in micro-batch, one line per strategy family.

A family is every dimension but the micro-batch (checkpointing, precision, offload,
allocator). Within a family, peak memory is a fixed part (weights, gradients, optimizer
state: nothing that depends on the batch) plus activations that grow with the micro-batch:

    peak(m) = intercept + slope * m

Measured on an H200 (BERT-large, bf16), the three micro-batches of each family lay on a
line within 3 %, and the six families' intercepts within 0.5 GiB (6.5-7.0 GiB). The fixed
part does not depend on what is saved for backward, so families that differ only in
checkpointing or offload share it: one measured point of a family and its group's fitted
intercept give its slope. A fit is ``certain`` when measured points determine it (two or
more of its own, or one and a fitted shared intercept); only a certain fit may rule a
micro-batch out. Otherwise the intercept is the static memory the trial counted
(parameters, gradients, optimizer state, CUDA context): a lower bound (on the H200 it was
1-1.5 GiB below the fitted intercepts), so that line only orders what to measure next.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Line:
    intercept: float
    slope: float
    certain: bool  # determined by the family's own points (and a shared intercept)

    def peak(self, micro_batch: float) -> float:
        return self.intercept + self.slope * micro_batch

    def largest_fitting(self, micro_batches: Iterable[int], budget_gib: float) -> int | None:
        fitting = [m for m in micro_batches if self.peak(m) <= budget_gib]
        return max(fitting) if fitting else None


def fit_line(points: list[tuple[float, float]]) -> Line | None:
    """Least-squares line through (micro_batch, peak) points with two or more micro-batches."""
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return Line(my - slope * mx, max(slope, 0.0), True)


def fit_families(
    points: dict[Any, list[tuple[float, float]]], group_of: Callable[[Any], Hashable], static_gib: float | None
) -> dict[Any, Line]:
    """A line for every family with at least one measured point.

    ``group_of(family)`` names the families that share a fixed part (same precision and
    allocator). A family with one point takes its group's intercept: the median of the
    group's two-point fits (certain), else the measured static memory (``static_gib``), else
    any family's fitted intercept, else zero (uncertain, each overstating the slope).
    """
    lines = {f: line for f, pts in points.items() if (line := fit_line(pts)) is not None}
    by_group: dict[Hashable, list[float]] = {}
    for f, line in lines.items():
        by_group.setdefault(group_of(f), []).append(line.intercept)
    anywhere = [i for group in by_group.values() for i in group]
    for f, pts in points.items():
        if f in lines or not pts:
            continue
        group = by_group.get(group_of(f))
        intercept, certain = ((statistics.median(group), True) if group
                              else (static_gib, False) if static_gib is not None
                              else (statistics.median(anywhere), False) if anywhere
                              else (0.0, False))
        m, peak = max(pts)
        slope = max(peak - intercept, 0.0) / m
        lines[f] = Line(intercept, slope, certain)
    return lines
