"""What commands share: the ``--json`` flag, the ``--db`` choice and opening the store with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gctl.services.db import Store

JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]
"""The ``--json`` flag every read command takes."""


def target(ctx: typer.Context) -> str | None:
    """The root ``--db`` value, if given."""
    value = ctx.find_root().params.get("db")
    return value if isinstance(value, str) else None


def store(ctx: typer.Context) -> Store:
    """The store chosen by ``--db``, config, environment or default, checked to be current."""
    from gctl.services import db  # the simulator's commands need no database

    return db.open_store(target(ctx))
