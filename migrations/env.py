"""Alembic environment: runs migrations on the connection gctl hands in.

gctl calls Alembic from :mod:`gctl.store.schema` with an open connection in
``config.attributes["connection"]``; ``alembic`` on the command line works
too when given ``-x url=...``. SQLite gets batch mode, since it cannot alter
tables in place.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from gctl.store.models import Base

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("alembic: pass the database with -x url=...")
    with create_engine(url).connect() as conn:
        _run(conn)
