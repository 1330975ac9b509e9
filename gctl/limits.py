"""What gctl accepts as input: one rule, checked before any database sees a value.

SQLite stores whatever it is given (a 10 MB name, a count of 2**63, a NUL
byte) where PostgreSQL refuses what its columns cannot hold with errors of
its own. So every value a user gives is checked here first, and a store of
either kind refuses the same input with the same one-line message:

- names (jobs, nodes, users, hosts, profiles, datasets): at most
  :data:`NAME_MAX` characters, what the ``String(255)`` columns hold;
- other single text values (reasons, images, paths, targets): at most
  :data:`TEXT_MAX` characters;
- a job's command, and its environment: at most :data:`SPEC_BYTES_MAX`
  bytes each as UTF-8, and :data:`SPEC_ITEMS_MAX` arguments or variables;
- no text holds NUL, or is anything but UTF-8 (no lone surrogates, which
  undecodable bytes in arguments become);
- whole numbers (ids, counts, limits) at most :data:`INT_MAX`, what a
  PostgreSQL ``integer`` holds; GPUs and GPU memory have bounds of their
  own; durations are finite and at most :data:`SECONDS_MAX`.
"""

from __future__ import annotations

import re

from gctl.services.errors import ServiceError

NAME_MAX = 255
"""Characters in a name: what the store's ``String(255)`` columns hold on PostgreSQL."""
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
"""A node or dataset name: letters, digits, ``.``, ``_``, ``-``, a letter or digit first, 63 at
most (a host name label's limit, and safe in paths and container labels)."""
TEXT_MAX = 4096
"""Characters in any other single text value: a reason, an image, a path (PATH_MAX)."""
SPEC_BYTES_MAX = 128 * 1024
"""UTF-8 bytes of a job's command, and of its environment (keys and values), each."""
SPEC_ITEMS_MAX = 4096
"""Arguments of a job's command; variables, mounts and datasets of its spec."""
INT_MAX = 2**31 - 1
"""The largest id, count or limit: what a PostgreSQL ``integer`` column holds."""
GPUS_MAX = 65536
"""The most GPUs one job (or an elastic job's maximum) may ask for."""
GPU_MEM_MAX_MB = 1 << 20
"""The most GPU memory a job may ask for: 1 TiB, in MiB."""
SECONDS_MAX = 100 * 365 * 86400.0
"""The longest duration (``--since``, trace windows): a hundred years."""
PERIOD_MAX = 7 * 86400.0
"""The longest period between a daemon's or the dashboard's passes: a week."""
FORMAT_WIDTH_MAX = 1024
"""The widest field of a ``gctl queue --format``."""
BATCH_BYTES_MAX = 64 << 20
"""The largest batch file ``gctl submit -f`` reads: 64 MiB, some 400,000 job specs."""
SHOWN_MAX = 80
"""Characters of a refused value an error message repeats."""


class LimitError(ServiceError):
    """A value over one of gctl's input limits; the message names the value and the limit."""


def check_text(value: str, what: str, *, limit: int = NAME_MAX) -> str:
    """``value`` unchanged if it is UTF-8 text without NUL of at most ``limit`` characters."""
    if "\x00" in value:
        raise LimitError(f"{what}: NUL characters are not allowed")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        why = "not valid UTF-8 text (undecodable bytes or a lone surrogate)"
        raise LimitError(f"{what}: {why}") from None
    if len(value) > limit:
        raise LimitError(f"{what}: {len(value):,} characters, more than the {limit:,} allowed")
    return value


def check_int(value: int, what: str, *, low: int = 1, high: int = INT_MAX) -> int:
    """``value`` if it is a whole number from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise LimitError(f"{what} {value!r}: must be a whole number from {low:,} to {high:,}")
    return value


def shown(value: str) -> str:
    """``value`` as an error message repeats it: quoted, cut after :data:`SHOWN_MAX` characters."""
    if len(value) <= SHOWN_MAX:
        return repr(value)
    return f"{value[:SHOWN_MAX]!r}... ({len(value):,} characters)"
