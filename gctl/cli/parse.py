"""Parsing of CLI values shared by commands: durations, times, windows, signals, KEY=VALUE options.

Every value is held to :mod:`gctl.limits`: a duration is finite and at
most a century, a number in an option is finite, a signal is one a Linux
process can be sent.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

from gctl.cli.errors import UsageError
from gctl.limits import (
    INT_MAX,
    NAME_MAX,
    SECONDS_MAX,
    SPEC_ITEMS_MAX,
    check_int,
    check_text,
    shown,
)
from gctl.slurmtime import TimeFormatError, parse_time_limit

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"([0-9]{1,20})([smhd])")
_COMPOUND = re.compile(r"(?:[0-9]{1,20}[smhd]){2,4}")
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
    """A duration as seconds (at most a century).

    ``90``, ``90s``, ``15m``, ``2h``, ``7d``; units together, ``1h30m``;
    or Slurm's ``[D-]HH:MM:SS`` forms, ``1-00:00:00``, ``90:00``.
    """
    m = _DURATION.fullmatch(text)
    if m:
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    elif _COMPOUND.fullmatch(text.strip()) and len(text) <= 64:
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
    elif (":" in text or "-" in text) and len(text) <= 64:
        try:
            seconds = parse_time_limit(text) or 0.0
        except TimeFormatError:
            seconds = -1.0
        if seconds <= 0:
            raise UsageError(f"bad duration {shown(text)}: not a [D-]HH:MM:SS time")
    else:
        raise UsageError(
            f"bad duration {shown(text)}: use a number with an optional s/m/h/d unit (1h30m),"
            " or [D-]HH:MM:SS"
        )
    if seconds > SECONDS_MAX:
        raise UsageError(f"bad duration {shown(text)}: more than {SECONDS_MAX / 86400:.0f} days")
    return seconds


_SLURM_UNITS = {
    **{u: 1.0 for u in ("", "s", "sec", "secs", "second", "seconds")},
    **{u: 60.0 for u in ("m", "min", "mins", "minute", "minutes")},
    **{u: 3600.0 for u in ("h", "hour", "hours")},
    **{u: 86400.0 for u in ("d", "day", "days")},
    **{u: 7 * 86400.0 for u in ("w", "week", "weeks")},
}
_NOW = re.compile(r"now(?:([+-])([0-9]{1,20}(?:\.[0-9]{1,20})?)([a-z]*))?")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9:.]{1,15}(?:Z|[+-][0-9:]{1,8})?)?")


def parse_time(text: str, now: float, flag: str) -> float:
    """A point in time as Slurm's ``sacct -S/-E`` take one (for option ``flag``), in epoch seconds.

    ``2026-11-01`` and ``2026-11-01T10:00[:00]`` (local time unless an
    offset or ``Z`` follows), ``now``, ``now-7days`` or ``now+1hour`` (units
    seconds, minutes, hours, days, weeks, or s/m/h/d/w; none is seconds),
    ``today`` or ``midnight`` (00:00 today), or a duration ago as ``gctl
    events --since`` takes it (``30m``, ``7d``).
    """
    word = text.strip().lower()
    if word in ("today", "midnight"):
        day = datetime.fromtimestamp(now)
        return day.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    relative = _NOW.fullmatch(word)
    if relative:
        sign, count, unit = relative.groups()
        if sign is None:
            return now
        if unit not in _SLURM_UNITS:
            raise UsageError(f"{flag} {shown(text)}: unknown unit {shown(unit)}")
        seconds = float(count) * _SLURM_UNITS[unit]
        if seconds > SECONDS_MAX:
            raise UsageError(f"{flag} {shown(text)}: more than {SECONDS_MAX / 86400:.0f} days")
        return now - seconds if sign == "-" else now + seconds
    if _DATE.fullmatch(text.strip()):
        try:
            return datetime.fromisoformat(text.strip()).timestamp()
        except (ValueError, OverflowError, OSError):
            raise UsageError(f"{flag} {shown(text)}: no such date or time") from None
    try:
        return now - parse_duration(word)
    except UsageError:
        pass
    raise UsageError(
        f"{flag} {shown(text)}: not a time; use YYYY-MM-DD[THH:MM[:SS]], now, now-COUNT[UNIT]"
        " (e.g. now-7days), today, or a duration ago (e.g. 7d)"
    )


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


def parse_names(text: str | None, flag: str) -> set[str] | None:
    """A comma list of names to filter by, each one a name may be (see :mod:`gctl.limits`)."""
    if not text:
        return None
    names = {p.strip() for p in text.split(",") if p.strip()}
    check_int(len(names), f"{flag}: number of names", high=SPEC_ITEMS_MAX)
    for name in names:
        check_text(name, flag, limit=NAME_MAX)
    return names


def parse_ids(text: str | None, flag: str) -> set[int] | None:
    """A comma list of job ids to filter by (squeue's ``-j``)."""
    if not text:
        return None
    ids = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if not part.isdigit() or len(part) > 10:
            raise UsageError(f"{flag} {shown(part)}: not a job id")
        ids.add(check_int(int(part), flag))
    check_int(len(ids), f"{flag}: number of ids", high=SPEC_ITEMS_MAX)
    return ids


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
