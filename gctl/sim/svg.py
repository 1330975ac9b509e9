"""Small self-contained SVG line charts: stacked panels of labelled series, no dependencies.

A chart is a column of :class:`Panel` s, each a title, a legend, axes with
ticks and labels, and one ``<polyline>`` per :class:`Series` (with the
series' label as its ``<title>``, so a viewer shows it on hover and a test
can find it); nothing else in the picture is a polyline. The x axis may be
logarithmic. A series drawn as steps holds each value until the next point,
as a CDF or a queue length does.

The output is deterministic (same input, same bytes): coordinates are
rounded to a tenth of a pixel, and points falling in the same pixel column
are thinned to the first, lowest, highest and last of them, which draws the
same picture as all of them. Text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["COLOURS", "Panel", "Series", "chart", "log_ticks", "nice_ticks", "tick_label"]

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
"""Series colours, in order, repeated when a panel has more series."""

WIDTH = 720
LEFT, RIGHT = 64, 24
"""Space left of the plot area (tick labels, y label) and right of it."""
HEAD = 40
"""Space above a plot area: the panel's title and its legend."""
FOOT = 44
"""Space below a plot area: tick labels and the x label."""
CHAR = 7.0
"""Estimated width of a character at the chart's font size, for laying out the legend."""


@dataclass(frozen=True, slots=True)
class Series:
    """One line of a panel: data points in x order and the label its legend shows."""

    label: str
    points: Sequence[tuple[float, float]]
    step: bool = False
    """Draw as steps: each y holds until the next point's x."""


@dataclass(frozen=True, slots=True)
class Panel:
    """One plot of a chart: its series on shared axes."""

    title: str
    x_label: str
    y_label: str
    series: Sequence[Series]
    log_x: bool = False
    """Logarithmic x axis (decade ticks); x values at or below zero sit at its left end."""
    y_from_zero: bool = True
    """Start the y axis at zero, not at the smallest y."""
    ident: str = ""
    """The ``id`` of the panel's ``<g>`` element (none when empty)."""


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values (1, 2 or 5 times a power of ten apart) within [lo, hi]."""
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """The powers of ten from the one at or below ``lo`` to the one at or above ``hi`` (> 0)."""
    first = math.floor(math.log10(lo) + 1e-9)
    last = max(math.ceil(math.log10(hi) - 1e-9), first + 1)
    return [10.0**k for k in range(first, last + 1)]


def tick_label(value: float) -> str:
    """A short label for a tick value: ``0.5``, ``20``, ``1.5k``, ``10M``."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{round(value / scale, 6):g}{suffix}"
    return f"{round(value, 6):g}"


@dataclass(frozen=True, slots=True)
class _Axes:
    """Where a panel's data land: the plot area in pixels and the data ranges it shows."""

    left: float
    top: float
    width: float
    height: float
    x_ticks: list[float]
    y_ticks: list[float]
    log_x: bool

    def x(self, value: float) -> float:
        """The pixel column of data ``value``."""
        lo, hi = self.x_ticks[0], self.x_ticks[-1]
        if self.log_x:
            value, lo, hi = math.log10(max(value, lo)), math.log10(lo), math.log10(hi)
        return self.left + (value - lo) / ((hi - lo) or 1.0) * self.width

    def y(self, value: float) -> float:
        """The pixel row of data ``value``."""
        lo, hi = self.y_ticks[0], self.y_ticks[-1]
        return self.top + self.height - (value - lo) / ((hi - lo) or 1.0) * self.height


def _axes(panel: Panel, top: float, height: float) -> _Axes:
    """The axes of ``panel``: ranges covering all its points, widened to round ticks."""
    xs = [x for s in panel.series for x, _ in s.points]
    ys = [y for s in panel.series for _, y in s.points]
    if panel.log_x:
        positive = [x for x in xs if x > 0]
        x_ticks = log_ticks(min(positive, default=1.0), max(positive, default=10.0))
    else:
        x_ticks = _covering(min(xs, default=0.0), max(xs, default=1.0))
    y_lo = min(ys, default=0.0)
    y_ticks = _covering(min(y_lo, 0.0) if panel.y_from_zero else y_lo, max(ys, default=1.0))
    return _Axes(LEFT, top, WIDTH - LEFT - RIGHT, height, x_ticks, y_ticks, panel.log_x)


def _covering(lo: float, hi: float) -> list[float]:
    """Round ticks whose first is at or below ``lo`` and whose last is at or above ``hi``."""
    if hi <= lo:
        hi = lo + 1.0
    ticks = nice_ticks(lo, hi)
    step = ticks[1] - ticks[0]
    if ticks[0] > lo:
        ticks.insert(0, round(ticks[0] - step, 12))
    if ticks[-1] < hi:
        ticks.append(round(ticks[-1] + step, 12))
    return ticks


def _stepped(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The corners of a step line through ``points``: each y holds until the next x."""
    out: list[tuple[float, float]] = []
    for i, (x, y) in enumerate(points):
        if i:
            out.append((x, points[i - 1][1]))
        out.append((x, y))
    return out


def _thin(pixels: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Keep, of each run of points in one pixel column, the first, lowest, highest and last."""
    out: list[tuple[float, float]] = []
    start = 0
    while start < len(pixels):
        column = round(pixels[start][0])
        end = start
        while end < len(pixels) and round(pixels[end][0]) == column:
            end += 1
        run = pixels[start:end]
        ys = [y for _, y in run]
        keep = sorted({0, ys.index(min(ys)), ys.index(max(ys)), len(run) - 1})
        out.extend(run[k] for k in keep)
        start = end
    return out


def _text(x: float, y: float, text: str, extra: str = "") -> str:
    """An SVG text element at ``(x, y)`` with escaped ``text``."""
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{escape(text)}</text>'


def _grid(x1: float, y1: float, x2: float, y2: float) -> str:
    """A light grid line from ``(x1, y1)`` to ``(x2, y2)``."""
    return (
        f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"'
        ' stroke="#dddddd" stroke-width="1"/>'
    )


def _panel(panel: Panel, top: float, height: float) -> list[str]:
    """The SVG elements of one panel whose header starts at pixel row ``top``."""
    ax = _axes(panel, top + HEAD, height)
    ident = f' id="{escape(panel.ident)}"' if panel.ident else ""
    parts = [f"<g{ident}>", _text(ax.left, top + 14, panel.title, ' font-weight="bold"')]
    x = ax.left
    for i, s in enumerate(panel.series):
        colour = COLOURS[i % len(COLOURS)]
        parts.append(
            f'<line x1="{x:.1f}" y1="{top + 26:.1f}" x2="{x + 16:.1f}" y2="{top + 26:.1f}"'
            f' stroke="{colour}" stroke-width="2"/>'
        )
        parts.append(_text(x + 20, top + 30, s.label))
        x += 32 + CHAR * len(s.label)
    bottom, right = ax.top + ax.height, ax.left + ax.width
    for t in ax.x_ticks:
        px = ax.x(t)
        parts.append(_grid(px, ax.top, px, bottom))
        parts.append(_text(px, bottom + 14, tick_label(t), ' text-anchor="middle"'))
    for t in ax.y_ticks:
        py = ax.y(t)
        parts.append(_grid(ax.left, py, right, py))
        parts.append(_text(ax.left - 4, py + 4, tick_label(t), ' text-anchor="end"'))
    parts.append(
        f'<rect x="{ax.left:.1f}" y="{ax.top:.1f}" width="{ax.width:.1f}" height="{ax.height:.1f}"'
        ' fill="none" stroke="black" stroke-width="1"/>'
    )
    parts.append(_text(ax.left + ax.width / 2, bottom + 32, panel.x_label, ' text-anchor="middle"'))
    mid = ax.top + ax.height / 2
    parts.append(
        _text(16, mid, panel.y_label, f' text-anchor="middle" transform="rotate(-90 16 {mid:.1f})"')
    )
    for i, s in enumerate(panel.series):
        points = _stepped(s.points) if s.step else list(s.points)
        pixels = _thin([(round(ax.x(x), 1), round(ax.y(y), 1)) for x, y in points])
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in pixels)
        parts.append(
            f'<polyline fill="none" stroke="{COLOURS[i % len(COLOURS)]}" stroke-width="1.5"'
            f' points="{coords}"><title>{escape(s.label)}</title></polyline>'
        )
    parts.append("</g>")
    return parts


def chart(panels: Sequence[Panel], panel_height: int = 220) -> str:
    """The SVG document of ``panels`` stacked top to bottom, each plot ``panel_height`` px high."""
    block = HEAD + panel_height + FOOT
    height = block * len(panels) + 8
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}"'
        f' viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for i, panel in enumerate(panels):
        parts.extend(_panel(panel, 8 + i * block, panel_height))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
