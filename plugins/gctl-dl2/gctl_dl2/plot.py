"""The learning curve of a dl2 training run as a small self-contained SVG file."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

WIDTH, HEIGHT, PAD = 640, 320, 48


def _polyline(points: Sequence[tuple[float, float]], colour: str) -> str:
    """An SVG polyline through ``points`` (already in pixels)."""
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}"/>'


def _label(x: float, y: float, text: str) -> str:
    """An SVG text element."""
    return f'<text x="{x:g}" y="{y:g}">{escape(text)}</text>'


def _scaled(
    values: Sequence[tuple[float, float]], top: float, height: float
) -> list[tuple[float, float]]:
    """Data points scaled into a panel whose top edge is at ``top``."""
    if not values:
        return []
    xs = [x for x, _ in values]
    ys = [y for _, y in values]
    x0, x1 = min(xs), max(xs) or 1.0
    y0, y1 = min(ys), max(ys)
    span_x = (x1 - x0) or 1.0
    span_y = (y1 - y0) or 1.0
    return [
        (PAD + (x - x0) / span_x * (WIDTH - 2 * PAD), top + height - (y - y0) / span_y * height)
        for x, y in values
    ]


def write_svg(path: Path, log: Sequence[dict[str, Any]]) -> None:
    """Plot the running reward and the check episodes' average JCT against the episode."""
    reward = [
        (float(e["episode"]), float(e["running_reward"])) for e in log if "running_reward" in e
    ]
    checks = [
        (float(e["episode"]), float(e["check_jct"] if "check_jct" in e else e["avg_jct"]))
        for e in log
        if e["phase"] == "check" or "check_jct" in e
    ]
    panel = (HEIGHT - 3 * PAD / 2) / 2
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}"'
        f' viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        _label(PAD, PAD / 2, "running reward (job fractions, discounted)"),
        _polyline(_scaled(reward, PAD / 2 + 8, panel - 8), "#1f77b4"),
        _label(PAD, PAD + panel, "check episodes: avg JCT (s), greedy"),
        _polyline(_scaled(checks, PAD + panel + 8, panel - 8), "#d62728"),
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - 8}" text-anchor="end">episode</text>',
        "</svg>",
    ]
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
