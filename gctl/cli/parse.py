"""Parsing of CLI values shared by commands: durations, windows, signals, KEY=VALUE options.

Every value is held to :mod:`gctl.limits`: a duration is finite and at
most a century, a number in an option is finite, a signal is one a Linux
process can be sent.
"""

from __future__ import annotations

import math
import re
from typing import Any

from gctl.cli.errors import UsageError
from gctl.limits import INT_MAX, SECONDS_MAX, shown

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*([0-9]{1,20}(?:\.[0-9]{1,20})?)\s*([smhd]?)\s*")
SIGNALS = frozenset(
    {
        *("HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "IOT", "BUS", "FPE", "KILL", "USR1"),
        *("SEGV", "USR2", "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CLD", "CONT", "STOP"),
        *("TSTP", "TTIN", "TTOU", "URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO"),
        *("POLL", "PWR", "SYS"),
    }
)
"""Linux's signal names, without ``SIG``: what a job's container can be sent by name."""
SIGNAL_NUMBERS = range(1, 65)
"""Linux's signal numbers, real-time ones included (SIGRTMAX is 64)."""


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``7d`` as seconds (at most a century)."""
    m = _DURATION.fullmatch(text)
    if not m:
        raise UsageError(f"bad duration {shown(text)}: use a number with an optional s/m/h/d unit")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds > SECONDS_MAX:
        raise UsageError(f"bad duration {shown(text)}: more than {SECONDS_MAX / 86400:.0f} days")
    return seconds


def parse_window(text: str) -> tuple[float, float]:
    """``START:END`` durations from the trace's first submission."""
    start, sep, end = text.partition(":")
    if not sep:
        raise UsageError(f"bad window {shown(text)}: use START:END, e.g. 0:7d")
    lo, hi = parse_duration(start), parse_duration(end)
    if hi <= lo:
        raise UsageError(f"bad window {shown(text)}: END must be after START")
    return lo, hi


def parse_signal(text: str) -> str:
    """A signal, as scancel takes it: a name (``TERM``, ``SIGTERM``, any case) or number.

    Returned as ``docker kill`` takes it: the name without ``SIG`` in upper
    case, or the number.
    """
    word = text.upper().removeprefix("SIG")
    if word in SIGNALS:
        return word
    if re.fullmatch(r"[0-9]{1,2}", text) and int(text) in SIGNAL_NUMBERS:
        return str(int(text))
    raise UsageError(
        f"--signal {shown(text)}: not a signal; give a name such as TERM, USR1 or KILL,"
        f" or a number from 1 to {SIGNAL_NUMBERS[-1]}"
    )


def _value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for conv in (int, float):
        try:
            number = conv(text)
        except ValueError:  # also an integer of more than 4,300 digits
            continue
        if not math.isfinite(number) or abs(number) > INT_MAX:
            raise UsageError(f"bad option value {shown(text)}: numbers go up to {INT_MAX:,}")
        return number
    return text


def parse_options(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as a dict, values typed as bool, int, float or string."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"bad option {shown(item)}: use KEY=VALUE")
        out[key.strip().replace("-", "_")] = _value(value.strip())
    return out
