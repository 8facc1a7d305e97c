"""One style for both drawings of a run: the report page's SVG plot and pareto.png.

Colour is the precision; the marker is the checkpointed fraction, by its rank among the
fractions the run measured (none a circle, full a square, the partial ones in between each
a shape of its own); a hollow marker is offload; a whisker is the range within the measured spread and a dashed
grey ring marks a noisy or contended trial; the x axis runs from 0 to past the
largest point, and a budget far right of every point is named in the legend but not drawn
(it would squash the points). ``svgplot`` and ``page.pareto_figure`` both ask this module,
so the two pictures agree.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

PRECISION_COLOURS = {"fp32": "#1f77b4", "bf16": "#2ca02c", "fp16": "#ff7f0e"}
OTHER_COLOUR = "grey"
# Partial fractions take these in order of their fraction; none and full have their own.
PARTIAL_MARKERS = ("triangle-up", "diamond", "triangle-down", "plus", "cross")
MATPLOTLIB_MARKERS = {"circle": "o", "square": "s", "triangle-up": "^", "diamond": "D", "triangle-down": "v",
                      "plus": "P", "cross": "X"}
X_MARGIN = 1.08  # the x axis ends this much past the largest point or drawn budget
BUDGET_REACH = 2.0  # a budget beyond this many times the largest point is listed, not drawn


NOISY_RING = {"edge": "#777", "dash": (2, 2)}  # a noisy or contended trial: a dashed grey ring around it


def is_noisy(row) -> bool:
    """A trial drawn as noisy: its timing spread is above the noise level, or it ran under contention."""
    return any(str(row.get(k, False)).lower() == "true" for k in ("noisy", "contended"))


def colour(precision: str) -> str:
    return PRECISION_COLOURS.get(precision, OTHER_COLOUR)


def marker(fraction: float, fractions: Iterable[float]) -> str:
    """The marker of a checkpointed ``fraction`` among all ``fractions`` of the run."""
    return Markers(fractions)(fraction)


class Markers:
    """``marker`` for many points of one run: the fractions are ranked once (ranking them
    per point was 2.2 s of a 5,000-trial report)."""

    def __init__(self, fractions: Iterable[float]):
        self.partial = sorted({f for f in fractions if 0 < f < 1})

    def __call__(self, fraction: float) -> str:
        if fraction <= 0:
            return "circle"
        if fraction >= 1:
            return "square"
        partial = self.partial if fraction in self.partial else sorted({*self.partial, fraction})
        return PARTIAL_MARKERS[min(partial.index(fraction), len(PARTIAL_MARKERS) - 1)]


# A study of many trials (resumed, judged at several budgets, shared by several drivers) is
# drawn and tabled in full detail up to this many trials; past it, the Pareto front, the
# best and the latest trials keep a mark (and a table row) each, the rest are drawn one
# shape per legend group and stay in trials.csv. One artist per trial made a 5,000-trial
# report take 321 s and 15 MB (issue 28; bench/scale.py).
DETAIL_LIMIT = 300


def detailed(points, best=None):
    """Which of ``points`` (rows of a scored table) get a mark and a row of their own: all of
    them up to DETAIL_LIMIT, else the Pareto front, the best and the latest trials."""
    import pandas as pd

    if len(points) <= DETAIL_LIMIT:
        return pd.Series(True, index=points.index)
    keep = (
        points["on_pareto"].fillna(False).astype(bool)
        if "on_pareto" in points
        else pd.Series(False, index=points.index)
    )
    if best is not None and best in points.index:
        keep.loc[best] = True
    latest = points.loc[~keep, "number"].nlargest(max(0, DETAIL_LIMIT - int(keep.sum()))).index
    keep.loc[latest] = True
    return keep


def drawn_budgets(budgets: Sequence[float], largest_point: float) -> list:
    return [b for b in budgets if b <= BUDGET_REACH * largest_point]


def x_limit(largest_point: float, budgets: Sequence[float]) -> float:
    return max([largest_point] + drawn_budgets(budgets, largest_point) + [1e-9]) * X_MARGIN


def svg_path(name: str, x: float, y: float, r: float = 5.5) -> str:
    """The SVG path of a marker centred at (x, y), to a tenth of a pixel."""
    return _SHORT_FLOAT.sub(lambda m: f"{float(m.group()):.1f}".rstrip("0").rstrip("."), _svg_path(name, x, y, r))


_SHORT_FLOAT = re.compile(r"-?\d+\.\d{2,}(?:e-?\d+)?")


def _svg_path(name: str, x: float, y: float, r: float) -> str:
    if name == "circle":
        return f"M{x - r},{y} a{r},{r} 0 1,0 {2 * r},0 a{r},{r} 0 1,0 {-2 * r},0"
    if name == "square":
        return f"M{x - r},{y - r} h{2 * r} v{2 * r} h{-2 * r} Z"
    if name == "triangle-up":
        return f"M{x},{y - r * 1.2} L{x + r * 1.1},{y + r * 0.8} L{x - r * 1.1},{y + r * 0.8} Z"
    if name == "triangle-down":
        return f"M{x},{y + r * 1.2} L{x + r * 1.1},{y - r * 0.8} L{x - r * 1.1},{y - r * 0.8} Z"
    if name == "diamond":
        return f"M{x},{y - r * 1.2} L{x + r},{y} L{x},{y + r * 1.2} L{x - r},{y} Z"
    a, b = r * 0.35, r
    if name == "plus":
        return (f"M{x - a},{y - b} h{2 * a} v{b - a} h{b - a} v{2 * a} h{a - b} v{b - a} h{-2 * a} v{a - b} "
                f"h{a - b} v{-2 * a} h{b - a} Z")
    # cross: the plus turned 45 degrees
    d = r * 0.8
    return (f"M{x - d},{y - d + a} L{x - d + a},{y - d} L{x},{y - a} L{x + d - a},{y - d} L{x + d},{y - d + a} "
            f"L{x + a},{y} L{x + d},{y + d - a} L{x + d - a},{y + d} L{x},{y + a} L{x - d + a},{y + d} "
            f"L{x - d},{y + d - a} L{x - a},{y} Z")
