"""Slurm hostlist expressions for node names: ``gpu[01-08]``, ``gpu[01-03,07],cpu1``, both ways.

Expanded and collected by python-hostlist (the library Slurm sites use in Python). An
expression that would name more than :data:`MOST` nodes is refused before
it is expanded, so a typo such as ``n[0-99999999]`` costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import hostlist  # type: ignore[import-untyped]

from gctl.limits import NAME_MAX, TEXT_MAX, check_text, shown
from gctl.services.errors import ServiceError

MOST = 100_000
"""The most node names one command's expressions may expand to."""
_RANGE = re.compile(r"\[([^\]]*)\]")


def _bound(text: str) -> int:
    """An upper bound on how many names ``text`` expands to (product of its bracket sizes)."""
    total = 1
    for inside in _RANGE.findall(text):
        size = 0
        for part in inside.split(","):
            lo, sep, hi = part.partition("-")
            if sep and lo.isdigit() and hi.isdigit():
                size += max(0, int(hi) - int(lo)) + 1
            else:
                size += 1
        total *= max(size, 1)
    return total * (text.count(",") + 1)


def expand(texts: Iterable[str]) -> list[str]:
    """The node names of hostlist expressions, in order, each once."""
    names: dict[str, None] = {}
    for text in texts:
        check_text(text, "node list", limit=TEXT_MAX)
        if _bound(text) > MOST:
            raise ServiceError(f"node list {shown(text)}: names more than {MOST} nodes")
        try:
            expanded = hostlist.expand_hostlist(text)
        except hostlist.BadHostlist as exc:
            raise ServiceError(f"node list {shown(text)}: {exc}") from None
        for name in expanded:
            check_text(name, "node name", limit=NAME_MAX)
        names.update(dict.fromkeys(expanded))
        if len(names) > MOST:
            raise ServiceError(f"node lists name more than {MOST} nodes")
    return list(names)


def collect(names: Iterable[str]) -> str:
    """Node names as one hostlist expression, as Slurm prints a job's nodes (``gpu[01-03,07]``)."""
    return str(hostlist.collect_hostlist(list(names)))
