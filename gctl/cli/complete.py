"""Shell completion of values: job ids and node names from the store, states, priorities, policies.

Each function here is a Typer ``autocompletion`` callback: given what has
been typed of the value, it returns the candidates, each with a short help
that zsh and fish show beside it. Job ids and node names are read from the
store chosen as for any command (``--db`` already on the line, then the
environment, config files, default), with the standard library alone on a
SQLite store, so a Tab loads neither SQLAlchemy nor the scheduler. A store
that is missing, locked or broken offers nothing: a completion prints
candidates or nothing, never an error. Values that take comma lists
(``-t PD,R``, ``-w gpu01,gpu02``, ``--compare fifo,las``) complete their last
item.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import typer

from gctl.cli.context import target
from gctl.config import PRIORITIES
from gctl.registry import POLICY_GROUP, registered
from gctl.services.queue import FINISHED, STATE_CODES
from gctl.services.reader import Reader, reading
from gctl.textsafe import inert

Candidates = list[tuple[str, str]]
"""Completions with their help: ``[("12", "RUNNING train"), ...]``."""

JOBS_SHOWN = 200
"""The most job ids offered at once, newest first."""


def jobs(ctx: typer.Context, incomplete: str) -> Candidates:
    """Ids of every job, newest first: for commands that show a job."""
    return _jobs(ctx, incomplete, unfinished=False)


def unfinished_jobs(ctx: typer.Context, incomplete: str) -> Candidates:
    """Ids of the jobs not finished yet, newest first: for commands that act on a job."""
    return _jobs(ctx, incomplete, unfinished=True)


def nodes(ctx: typer.Context, incomplete: str) -> Candidates:
    """Node names, each with its host; for a comma list, its last item."""
    rows = _read(ctx, lambda r: r.rows("SELECT name, host FROM nodes ORDER BY name"))
    return _last_item(incomplete, [(name, inert(host)) for name, host in rows])


def states(incomplete: str) -> Candidates:
    """Job state names and codes (``PENDING``, ``PD``, ``all``), any case; a comma list's last."""
    choices = [("all", "every state")]
    choices += [(name, code) for name, code in STATE_CODES.items()]
    choices += [(code, name) for name, code in STATE_CODES.items()]
    return _last_item(incomplete, choices, fold_case=True)


def priorities() -> list[str]:
    """Job priorities, lowest first."""
    return list(PRIORITIES)


def policies(incomplete: str) -> Candidates:
    """Registered policies, built-in and plugins (loading none); for a comma list, its last item."""
    return _last_item(incomplete, [(name, "") for name in registered(POLICY_GROUP)])


def _jobs(ctx: typer.Context, incomplete: str, *, unfinished: bool) -> Candidates:
    """Jobs whose id starts with ``incomplete``, each with its name and state."""
    if not re.fullmatch(r"[0-9]{0,10}", incomplete):
        return []
    skipped = sorted(FINISHED) if unfinished else []

    def query(r: Reader) -> list[tuple[Any, ...]]:
        where = f" AND state NOT IN ({r.marks(len(skipped))})" if skipped else ""
        return r.rows(
            f"SELECT id, name, state FROM jobs WHERE CAST(id AS TEXT) LIKE {r.mark}{where}"
            f" ORDER BY id DESC LIMIT {JOBS_SHOWN}",
            [incomplete + "%", *skipped],
        )

    return [(str(job), inert(f"{state} {name}")) for job, name, state in _read(ctx, query)]


def _read(ctx: typer.Context, query: Callable[[Reader], list[tuple[Any, ...]]]) -> list[Any]:
    """What ``query`` reads from the store, or nothing when the store cannot be read."""
    try:
        with reading(target(ctx)) as reader:
            return query(reader)
    except Exception:  # no store, an old, locked or broken one: no candidates, no traceback
        return []


def _last_item(incomplete: str, choices: Candidates, *, fold_case: bool = False) -> Candidates:
    """The ``choices`` that complete the last item of a comma list, after the items before it.

    ``gpu01,gp`` offers ``gpu01,gpu02``, ``gpu01,gpu03``, ... (not ``gpu01``
    again); with ``fold_case``, ``pd,r`` offers ``pd,R`` and ``pd,RUNNING``.
    """
    head, sep, last = incomplete.rpartition(",")
    fold = str.lower if fold_case else str
    given = {fold(item) for item in head.split(",")}
    return [
        (head + sep + value, help_text)
        for value, help_text in choices
        if fold(value).startswith(fold(last)) and fold(value) not in given
    ]
