"""Time limits in Slurm's notation: ``--time`` and the site's ``default_time``/``max_time``.

Accepted, as ``sbatch --time`` accepts them: ``MM``, ``MM:SS``,
``HH:MM:SS``, ``D-HH``, ``D-HH:MM`` and ``D-HH:MM:SS`` (a bare number is
minutes), and ``UNLIMITED`` or ``INFINITE`` for no limit. Printed back as
Slurm prints a time limit: ``[D-]HH:MM:SS``.
"""

from __future__ import annotations

import re

from gctl.limits import SECONDS_MAX

UNLIMITED = frozenset({"unlimited", "infinite"})
"""Words that mean no limit."""
_FORM = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


class TimeFormatError(ValueError):
    """A time limit not in any of Slurm's forms; the message says which forms are."""


def parse_time_limit(text: str, what: str = "--time") -> float | None:
    """Seconds of ``text`` (None for unlimited); TimeFormatError when it is no Slurm time."""
    value = text.strip()
    if value.lower() in UNLIMITED:
        return None
    found = _FORM.fullmatch(value)
    if found is None or len(value) > 32:
        raise TimeFormatError(
            f"{what} {value[:40]!r}: not a time limit; use MM, MM:SS, HH:MM:SS, D-HH,"
            " D-HH:MM, D-HH:MM:SS or UNLIMITED"
        )
    days, first, second, third = found.groups()
    parts = [int(p) for p in (first, second, third) if p is not None]
    if days is not None:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = [*parts, 0, 0][:3]
        total = int(days) * 86400 + hours * 3600 + minutes * 60 + seconds
    elif len(parts) == 3:
        total = parts[0] * 3600 + parts[1] * 60 + parts[2]
    elif len(parts) == 2:
        total = parts[0] * 60 + parts[1]
    else:
        total = parts[0] * 60
    if total <= 0 or total > SECONDS_MAX:
        raise TimeFormatError(f"{what} {value!r}: must be more than 0 and at most 100 years")
    return float(total)


def format_time_limit(seconds: float | None) -> str:
    """A limit as Slurm prints one: ``[D-]HH:MM:SS``, or ``UNLIMITED``."""
    if seconds is None:
        return "UNLIMITED"
    days, rest = divmod(round(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock
