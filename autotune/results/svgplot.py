"""Interactive scatter plots as inline SVG: no library, no network, any browser.

Each trial is one ``<path class="trial-point">`` whose ``<title>`` (shown on hover) is its
full configuration and figures; ``data-*`` attributes carry the same for scripts and tests.
Colour is the precision, the shape the checkpointed fraction, a hollow mark offload; the
Pareto front is a line, the best a red ring, the baseline a black diamond, each budget a
dashed vertical line; a whisker is the range the trial's measured spread allows, and a
dashed grey ring marks a noisy or contended trial.
"""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from autotune.results import labels, plot_style
from autotune.train.dimensions import checkpoint_fraction, checkpoint_label

W, H = 860, 500
LEFT, RIGHT, TOP, BOTTOM = 70, 250, 30, 50  # margins; the legend sits in the right one


LEGEND_CHARS = 32  # what fits the legend's margin at 11 px; longer entries wrap


def _wrap(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + [line] if line else lines or [""]


@dataclass
class Mark:
    x: float
    y: float
    label: str  # hover text


def _ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * step:
            step *= m
            break
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step + 1e-9) + 1)]


def trial_hover(row: pd.Series) -> str:
    def num(key, fmt):
        v = row.get(key)
        return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    parts = [f"trial {int(row['number'])}: checkpointing {checkpoint_label(row['checkpointing'])}, "
             f"{row['precision']}, micro_batch {int(row['micro_batch'])} x accumulation {int(row['accumulation'])}",
             f"offload {str(row.get('offload', False)).lower()}, allocator {row.get('allocator', 'default')}",
             f"peak {num('peak_memory_gib', '.2f')} GiB (device {num('device_peak_gib', '.2f')} GiB)",
             f"{num('samples_per_s', '.1f')} samples/s (spread {num('time_spread', '.1%')})"]
    if row.get("roi") is not None and not (isinstance(row.get("roi"), float) and math.isnan(row["roi"])):
        parts.append(f"ROI {row['roi']:.2f}, memory saved {num('memory_saved_gib', '.2f')} GiB")
    return "\n".join(parts)


@dataclass(frozen=True)
class _Axes:
    """The plotting frame: data ranges and the pixel mapping."""

    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float

    def px(self, v: float) -> float:
        return LEFT + (v - self.x_lo) / (self.x_hi - self.x_lo) * (W - LEFT - RIGHT)

    def py(self, v: float) -> float:
        return H - BOTTOM - (v - self.y_lo) / (self.y_hi - self.y_lo) * (H - TOP - BOTTOM)


def scatter(points: pd.DataFrame, x: str, y: str, x_label: str, y_label: str, plot_id: str,
            front: pd.DataFrame | None = None, best: Mark | None = None, baseline: Mark | None = None,
            vlines: Sequence[tuple] = (), x_from_zero: bool = True, fractions: Sequence[float] = (),
            detail: pd.Series | None = None, labelled: Sequence = (), label_of=None) -> str:
    """The SVG of ``points`` (rows of the scored trials table) at columns ``x``, ``y``.

    ``fractions``: the checkpointed fractions of the whole run, which rank the markers (so
    every plot of a run gives a fraction the same marker); by default those of ``points``.
    ``detail``: which points get a mark of their own, with hover text and whisker
    (``plot_style.detailed``; default all); the others are drawn as one shape per legend group.
    ``labelled``: index labels of ``points`` to write ``label_of(row)`` beside, in priority
    order; ``labels.place`` keeps them from overlapping each other or any point.
    """
    bounds = (f"{y}_lo", f"{y}_hi")
    has_interval = all(c in points.columns for c in bounds)
    axes, shown_lines = _axes(points, x, y, best, baseline, vlines, x_from_zero, bounds if has_interval else None)
    out = _frame(axes, x_label, y_label, plot_id)
    legend: list = []
    out += _budget_lines(vlines, shown_lines, axes, legend)
    if front is not None and len(front) > 1:
        pts = " ".join(f"{axes.px(a):.1f},{axes.py(b):.1f}" for a, b in zip(front[x], front[y], strict=False))
        out.append(f'<polyline class="pareto-front" points="{pts}" fill="none" stroke="black" stroke-opacity="0.6"/>')
        legend.append(('<line x1="0" x2="18" y1="0" y2="0" stroke="black"/>', "Pareto front"))
    shape_of = plot_style.Markers(list(fractions) or [checkpoint_fraction(c) for c in points["checkpointing"]])
    drawn, seen, crowd, any_noisy = _points(points, x, y, axes, shape_of, detail, bounds if has_interval else None)
    out += drawn
    out += _point_labels(points, x, y, axes.px, axes.py, labelled, label_of)
    out += _crowds(crowd, seen)
    out += _marks(best, baseline, axes, legend)
    out += _legend(legend, seen, has_interval, any_noisy)
    out.append("</svg>")
    return "\n".join(out)


def _axes(points, x, y, best, baseline, vlines, x_from_zero: bool, bounds) -> tuple:
    """(the frame, the budget lines inside it): every point, whisker and mark within it."""
    xs = [float(v) for v in points[x]] + [m.x for m in (best, baseline) if m is not None]
    ys = [float(v) for v in points[y]] + [m.y for m in (best, baseline) if m is not None]
    if bounds is not None:  # the whiskers stay inside the frame
        ys += [float(v) for c in bounds for v in points[c] if pd.notna(v) and math.isfinite(float(v))]
    top = max(xs) if xs else 1.0
    drawn = plot_style.drawn_budgets([v for v, _ in vlines], top)
    shown_lines = [(v, lab) for v, lab in vlines if v in drawn]  # a budget far right would squash the points
    x_lo = 0.0 if x_from_zero else min(xs + [0.0])
    x_hi = (plot_style.x_limit(top, [v for v, _ in vlines]) if x_from_zero
            else max(xs + [x_lo + 1e-9]) * plot_style.X_MARGIN)
    y_lo, y_hi = min(ys + [0.0]), max(ys + [1e-9]) * 1.1
    if y_lo < 0:
        y_lo *= 1.1
    return _Axes(x_lo, x_hi, y_lo, y_hi), shown_lines


def _frame(axes: _Axes, x_label: str, y_label: str, plot_id: str) -> list[str]:
    """The svg element, the frame, the grid with its ticks and the axis labels."""
    esc, px, py = html.escape, axes.px, axes.py
    out = [f'<svg id="{plot_id}" class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" '
           f'width="{W}" height="{H}" role="img" font-family="sans-serif" font-size="11">',
           f'<rect x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{H - TOP - BOTTOM}" fill="white" '
           'stroke="#999"/>']
    for t in _ticks(axes.x_lo, axes.x_hi):
        out.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{TOP}" y2="{H - BOTTOM}" stroke="#eee"/>'
                   f'<text x="{px(t):.1f}" y="{H - BOTTOM + 15}" text-anchor="middle">{t:g}</text>')
    for t in _ticks(axes.y_lo, axes.y_hi):
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="#eee"/>'
                   f'<text x="{LEFT - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 12}" text-anchor="middle">{esc(x_label)}</text>'
               f'<text transform="translate(16,{(TOP + H - BOTTOM) / 2}) rotate(-90)" text-anchor="middle">'
               f'{esc(y_label)}</text>')
    if axes.y_lo < 0:
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{py(0):.1f}" y2="{py(0):.1f}" stroke="#666"/>')
    return out


def _budget_lines(vlines, shown_lines, axes: _Axes, legend: list) -> list[str]:
    out = []
    for i, (v, lab) in enumerate(sorted(vlines)):
        dash = ["6,4", "2,3", "8,3,2,3"][i % 3]
        if (v, lab) in shown_lines:
            out.append(f'<line class="budget-line" x1="{axes.px(v):.1f}" x2="{axes.px(v):.1f}" y1="{TOP}" '
                       f'y2="{H - BOTTOM}" stroke="red" stroke-dasharray="{dash}"><title>{html.escape(lab)}</title>'
                       '</line>')
        legend.append((f'<line x1="0" x2="18" y1="0" y2="0" stroke="red" stroke-dasharray="{dash}"/>',
                       lab + ("" if (v, lab) in shown_lines else " (beyond the right edge)")))
    return out


def _points(points, x, y, axes: _Axes, shape_of, detail, bounds) -> tuple:
    """(the points' marks with their whiskers and noise rings, the legend groups seen, the
    points drawn together per group, whether any is noisy)."""
    esc = html.escape
    out: list[str] = []
    seen: dict[Any, Any] = {}
    crowd: dict[Any, Any] = {}  # legend group -> (path data, count)
    any_noisy = False
    cols = list(points.columns)
    for i, row in zip(points.index, points.itertuples(index=False, name=None), strict=False):
        r = dict(zip(cols, row, strict=False))
        colour = plot_style.colour(r["precision"])
        offload = str(r.get("offload", False)).lower() == "true"
        fits = str(r.get("fits_budget", True)).lower() == "true"
        frac = checkpoint_fraction(r["checkpointing"])
        shape = shape_of(frac)
        fill = "white" if offload else colour
        key = (checkpoint_label(r["checkpointing"]), r["precision"], offload)
        seen.setdefault(key, (frac, colour, fill, shape))
        cx, cy = round(axes.px(float(r[x])), 1), round(axes.py(float(r[y])), 1)
        if detail is not None and not detail.get(i, True):
            d, n = crowd.get((key, fits), ("", 0))
            crowd[(key, fits)] = (d + plot_style.svg_path(shape, cx, cy), n + 1)
            continue
        if bounds is not None and all(pd.notna(r[c]) and math.isfinite(float(r[c])) for c in bounds):
            out.append(f'<line class="interval" x1="{cx:.1f}" x2="{cx:.1f}" y1="{axes.py(float(r[bounds[0]])):.1f}" '
                       f'y2="{axes.py(float(r[bounds[1]])):.1f}" stroke="{colour}" '
                       f'stroke-opacity="0.6" data-number="{int(r["number"])}"/>')
        if plot_style.is_noisy(r):
            any_noisy = True
            out.append(f'<circle class="noisy-mark" cx="{cx:.1f}" cy="{cy:.1f}" r="9" '
                       f'fill="none" stroke="#777" stroke-dasharray="2,2" data-number="{int(r["number"])}"/>')
        hover = trial_hover(r)
        out.append(f'<path class="trial-point" d="{plot_style.svg_path(shape, cx, cy)}" fill="{fill}" '
                   f'stroke="{colour}" stroke-width="1.6" data-marker="{shape}" '
                   f'opacity="{1 if fits else 0.35}" data-number="{int(r["number"])}" '
                   f'data-config="{esc(hover.splitlines()[0])}"><title>{esc(hover)}</title></path>')
    return out, seen, crowd, any_noisy


def _crowds(crowd: dict, seen: dict) -> list[str]:
    esc = html.escape
    out = []
    for ((ckpt, prec, offload), fits), (d, n) in crowd.items():
        _, colour, fill, shape = seen[(ckpt, prec, offload)]
        out.append(f'<path class="trial-crowd" d="{d}" fill="{fill}" stroke="{colour}" stroke-width="1.6" '
                   f'data-marker="{shape}" data-count="{n}" opacity="{0.6 if fits else 0.25}"><title>'
                   f'{n} more trial(s) of ckpt {esc(ckpt)} / {esc(prec)}{" / offload" if offload else ""}: drawn '
                   f'together, without their details (trials.csv has every one)</title></path>')
    return out


def _marks(best, baseline, axes: _Axes, legend: list) -> list[str]:
    """The best's circle and the baseline's diamond, with their legend entries."""
    out = []
    for m, style, cls in ((best, 'fill="none" stroke="red" stroke-width="2"', "best-mark"),
                          (baseline, 'fill="none" stroke="black" stroke-width="1.5"', "baseline-mark")):
        if m is None:
            continue
        cx, cy = axes.px(m.x), axes.py(m.y)
        shape = (f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="11" {style}' if cls == "best-mark" else
                 f'<path d="M{cx},{cy - 10} L{cx + 10},{cy} L{cx},{cy + 10} L{cx - 10},{cy} Z" {style}')
        out.append(f'{shape} class="{cls}"><title>{html.escape(m.label)}</title>'
                   f'</{"circle" if cls == "best-mark" else "path"}>')
        legend.append((f'<circle cx="9" cy="0" r="6" {style}/>' if cls == "best-mark" else
                       f'<path d="M9,-6 L15,0 L9,6 L3,0 Z" {style}/>', "best" if cls == "best-mark" else "baseline"))
    return out


def _legend(legend: list, seen: dict, has_interval: bool, any_noisy: bool) -> list[str]:
    """The legend beside the frame: the lines and marks, then one entry per group of points."""
    if has_interval:
        legend.append(('<line x1="9" x2="9" y1="-7" y2="7" stroke="#555"/>', "range within the measured spread"))
    if any_noisy:
        legend.append(('<circle cx="9" cy="0" r="6" fill="none" stroke="#777" stroke-dasharray="2,2"/>',
                       "noisy or contended"))
    for (ckpt, prec, offload), (_frac, colour, fill, shape) in sorted(seen.items(),
                                                                       key=lambda kv: (kv[1][0], kv[0][1:])):
        legend.append((f'<path d="{plot_style.svg_path(shape, 9, 0, 5)}" fill="{fill}" stroke="{colour}" '
                       'stroke-width="1.6"/>',
                       f"ckpt {ckpt} / {prec}" + (" / offload" if offload else "")))
    out = []
    lx, y0 = W - RIGHT + 14, TOP + 8
    for sym, text in legend:
        lines = _wrap(text, LEGEND_CHARS)  # the legend stays inside the frame
        spans = "".join(f'<tspan x="24" dy="{0 if i == 0 else 13}">{html.escape(line)}</tspan>'
                        for i, line in enumerate(lines))
        out.append(f'<g transform="translate({lx},{y0})">{sym}<text x="24" y="4">{spans}</text></g>')
        y0 += 16 + 13 * (len(lines) - 1)
    return out


LABEL_PX = 10  # font size of a point's label


def _point_labels(points: pd.DataFrame, x: str, y: str, px, py, labelled: Sequence, label_of) -> list[str]:
    if not len(labelled) or label_of is None:
        return []
    where = {i: (px(float(points.at[i, x])), py(float(points.at[i, y]))) for i in points.index}
    order = [i for i in labelled if i in where]
    spots = labels.place([where[i] for i in order], [label_of(points.loc[i]) for i in order],
                         labels.Box(LEFT, TOP, W - RIGHT, H - BOTTOM),
                         obstacles=[p for i, p in where.items() if i not in order],
                         char_px=0.62 * LABEL_PX, height_px=1.25 * LABEL_PX, marker_px=6.0)
    return [f'<text class="point-label" x="{spot.x:.1f}" y="{spot.y:.1f}" text-anchor="{spot.anchor}" '
            f'font-size="{LABEL_PX}" fill="#444" data-number="{int(points.at[i, "number"])}">'
            f'{html.escape(label_of(points.loc[i]))}</text>'
            for i, spot in zip(order, spots, strict=False) if spot is not None]
