"""``gctl init`` and ``gctl db``: create, upgrade and inspect the state store."""

from __future__ import annotations

from typing import Annotated

import typer

from gctl.cli import render
from gctl.cli.context import JsonOpt, target

app = typer.Typer(help="The state store's schema: upgrade it or show its revision.")


def init(
    ctx: typer.Context,
    write_config: Annotated[
        bool | None,
        typer.Option(
            "--write-config/--no-config",
            help="Write a config naming this database (never over an existing one), or never."
            " Default: only for the default database or one named by --db (user config).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Create or upgrade the database; say whether a config file was written, and why."""
    from gctl.services import db  # here: other commands start without SQLAlchemy
    from gctl.services.errors import ServiceError

    store = db.connect(target(ctx))
    before, after = db.upgrade(store)
    what = "created" if before is None else ("upgraded" if before != after else "already current")
    render.message(f"database {store.url} {what} (schema {after}; chosen by {store.source})")
    outcome = db.starter_config(store, write_config)
    if outcome.refused:
        raise ServiceError(f"{outcome.message}; remove or edit it by hand")
    render.message(outcome.message)


@app.command("upgrade")
def upgrade(ctx: typer.Context) -> None:
    """Bring the database to this gctl's schema."""
    from gctl.services import db

    store = db.connect(target(ctx))
    before, after = db.upgrade(store)
    render.message(f"database {store.url}: schema {before or 'empty'} -> {after}")


@app.command("current")
def current(
    ctx: typer.Context,
    json_out: JsonOpt = False,
) -> None:
    """Show the database's schema revision and the one this gctl needs."""
    from gctl.services import db
    from gctl.store.settings import HEAD

    store = db.connect(target(ctx))
    db.require_file(store)
    at, head = db.revision(store), HEAD
    doc = {"url": store.url, "source": store.source, "current": at, "head": head}
    if json_out:
        render.emit_json(doc)
    else:
        state = "up to date" if at == head else "needs 'gctl db upgrade'"
        render.message(f"{store.url}: schema {at or 'empty'} (this gctl: {head}) - {state}")


@app.command("copy")
def copy(
    ctx: typer.Context,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="URL",
            help="The empty database to copy into: a URL or a SQLite file (schema made).",
        ),
    ],
    json_out: JsonOpt = False,
) -> None:
    """Copy the whole store into another, empty database (e.g. from SQLite to PostgreSQL)."""
    from gctl.services import db, dbcopy

    copied = dbcopy.copy(db.open_store(target(ctx)), to)
    if json_out:
        render.emit_json(copied.to_dict())
        return
    rows = ", ".join(f"{n:,} {table}" for table, n in copied.rows.items())
    render.message(f"copied into {copied.target}: {rows}")
    render.message("point gctl at it with --db, $GCTL_DB or [store] url in gctl.toml")
