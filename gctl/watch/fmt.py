"""Small text renderings for the widgets: height bars, sparklines, ages, state colours, user text.

Every text a user or a host gave reaches a widget as :func:`plain`: a
``Text``, which Textual never reads as markup, with control and bidi
characters escaped (:mod:`gctl.textsafe`).
"""

from __future__ import annotations

import functools

from rich.text import Text

from gctl.cli.render import fmt_duration
from gctl.textsafe import inert

BAR_CELLS_PER_UNIT = 8
"""Cells of a height bar per unit of height; the bar spans 0..2 with a mark at 1."""
_SPARKS = "▁▂▃▄▅▆▇█"
NODE_STATE_STYLE = {
    "idle": "green",
    "mix": "cyan",
    "alloc": "bold cyan",
    "drng": "yellow",
    "drain": "yellow",
    "down": "bold red",
}
JOB_STATE_STYLE = {
    "RUNNING": "green",
    "SUSPENDED": "yellow",
    "PENDING": "dim",
    "REQUEUED": "magenta",
    "REQUEUE_HOLD": "magenta",
    "COMPLETING": "cyan",
    "STOPPED": "red",
    "PREEMPTED": "red",
}
MODE_STYLE = {
    "exclusive": "green",
    "packed": "cyan",
    "time-sliced": "yellow",
    "opportunistic": "magenta",
    "tgs": "magenta",
    "idle": "dim",
}


def height_bar(height: float) -> Text:
    """Height as a bar over 0..2: the part above 1 (oversubscribed, time sliced) in red."""
    unit = BAR_CELLS_PER_UNIT
    filled = min(2 * unit, round(height * unit))
    base = min(filled, unit)
    over = filled - base
    bar = Text()
    bar.append("█" * base, style="green" if height <= 1 else "yellow")
    bar.append("·" * (unit - base), style="dim")
    bar.append("│", style="bold")
    bar.append("█" * over, style="bold red")
    bar.append("·" * (unit - over), style="dim")
    bar.append("+" if height > 2 else " ", style="bold red")
    bar.append(f"{height:4.2f}", style="bold red" if height > 1 else "")
    return bar


def sparkline(values: list[float], top: float, width: int) -> str:
    """The last ``width`` values as block characters scaled to ``top`` (blank when none)."""
    if not values or top <= 0:
        return " " * width
    tail = values[-width:]
    marks = [_SPARKS[min(len(_SPARKS) - 1, int(v / top * (len(_SPARKS) - 1) + 0.5))] for v in tail]
    return "".join(marks).rjust(width)


def age(seconds: float | None) -> str:
    """A duration for a column (``-`` when unknown, never negative)."""
    return "-" if seconds is None else fmt_duration(max(0.0, seconds))


def coarse_age(seconds: float) -> str:
    """A duration to the minute (``<1m``, ``47m``, ``3h12m``, ``2d03h``): table cells stay put."""
    minutes = max(0, int(seconds // 60))
    if minutes < 1:
        return "<1m"
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m"


def cell(text: str, style: str | None = None) -> Text:
    """User or host text for a widget: never markup, control characters escaped.

    One line: where its column is narrower, it is cut with an ellipsis.
    """
    return Text(inert(text), style=style or "", no_wrap=True, overflow="ellipsis", end="")


@functools.lru_cache(maxsize=1024)
def styled(text: str, style: str | None) -> Text:
    """:func:`cell` of ``text`` in ``style``, shared: never change what it returns."""
    return cell(text, style)


def plain(text: str) -> Text:
    """:func:`cell` of ``text`` without a style, shared: never change what it returns."""
    return styled(text, None)
