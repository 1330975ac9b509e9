"""What every store command shares: the ``--db`` choice and opening the store with it."""

from __future__ import annotations

import typer

from gctl.services import db


def target(ctx: typer.Context) -> str | None:
    """The root ``--db`` value, if given."""
    value = ctx.find_root().params.get("db")
    return value if isinstance(value, str) else None


def store(ctx: typer.Context) -> db.Store:
    """The store chosen by ``--db``, config, environment or default, checked to be current."""
    return db.open_store(target(ctx))
