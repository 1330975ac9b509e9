"""Parsing of CLI values shared by commands: durations, windows, KEY=VALUE options."""

from __future__ import annotations

import re
from typing import Any

from gctl.cli.errors import UsageError

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``7d`` as seconds."""
    m = _DURATION.match(text)
    if not m:
        raise UsageError(f"bad duration {text!r}: use a number with an optional s/m/h/d unit")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_window(text: str) -> tuple[float, float]:
    """``START:END`` durations from the trace's first submission."""
    start, sep, end = text.partition(":")
    if not sep:
        raise UsageError(f"bad window {text!r}: use START:END, e.g. 0:7d")
    lo, hi = parse_duration(start), parse_duration(end)
    if hi <= lo:
        raise UsageError(f"bad window {text!r}: END must be after START")
    return lo, hi


def _value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_options(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as a dict, values typed as bool, int, float or string."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"bad option {item!r}: use KEY=VALUE")
        out[key.strip().replace("-", "_")] = _value(value.strip())
    return out
