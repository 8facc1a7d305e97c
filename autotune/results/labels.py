"""Where a plot's point labels go, so that no two overlap and none covers a point.

Greedy placement in the plot's own pixel space, shared by the PNG (matplotlib) and the
report's SVG: the labels are placed in priority order (the caller's: the best, then the
Pareto front), each at the first of a few spots around its point whose box stays inside
the frame and clears every label placed so far and every point's marker. A label with no
free spot is left out (the point keeps its hover text; trials.csv has every figure), which
is what a crowded cluster needs: a legible few over an illegible many.

matplotlib has no label placement of its own (adjustText is a separate package, and
iterative); the few dozen labels of a front need only this.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Offsets of the label's anchor corner from its point, in units of (gap): right-above first.
_SPOTS = ((1, -1, "start", "bottom"), (1, 1, "start", "top"), (-1, -1, "end", "bottom"), (-1, 1, "end", "top"),
          (0, -1.6, "middle", "bottom"), (0, 1.6, "middle", "top"))


@dataclass(frozen=True)
class Box:
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box) -> bool:
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1

    def inside(self, frame: Box) -> bool:
        return self.x0 >= frame.x0 and self.x1 <= frame.x1 and self.y0 >= frame.y0 and self.y1 <= frame.y1


@dataclass(frozen=True)
class Placed:
    x: float  # the text's anchor point, pixels (y grows downwards)
    y: float  # the text's baseline
    anchor: str  # "start", "middle" or "end" (SVG's text-anchor; matplotlib's ha left/center/right)
    box: Box


def place(points: Sequence[tuple[float, float]], texts: Sequence[str | None], frame: Box,
          obstacles: Sequence[tuple[float, float]] = (), char_px: float = 6.2, height_px: float = 11.0,
          marker_px: float = 5.0, gap_px: float = 4.0) -> list[Placed | None]:
    """A spot for each ``texts[i]`` beside ``points[i]`` (pixels, y downwards), in the
    order given (the first are placed first); None for a text that is None or finds no free
    spot. ``obstacles``: other points (unlabelled ones too) that no label may cover."""
    taken: list[Box] = [Box(x - marker_px, y - marker_px, x + marker_px, y + marker_px)
                        for x, y in [*points, *obstacles]]
    out: list[Placed | None] = []
    for (px, py), text in zip(points, texts, strict=False):
        spot = None
        if text:
            width = len(text) * char_px
            for dx, dy, anchor, vertical in _SPOTS:
                ax, ay = px + dx * (marker_px + gap_px), py + dy * (marker_px + gap_px) * (0.6 if dx else 1)
                x0 = ax if anchor == "start" else ax - width if anchor == "end" else ax - width / 2
                y0 = ay - height_px if vertical == "bottom" else ay
                box = Box(x0, y0, x0 + width, y0 + height_px)
                if box.inside(frame) and not any(box.overlaps(t) for t in taken):
                    spot = Placed(ax, y0 + height_px * 0.8, anchor, box)  # baseline: 80 % down the box
                    taken.append(box)
                    break
        out.append(spot)
    return out
