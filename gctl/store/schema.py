"""Creating and upgrading the store's schema with the Alembic migrations shipped in the package.

Alembic and the models are imported only to change or compare the schema;
the check every command makes (is the database at :data:`HEAD`?) reads the
version table directly, so commands start fast.
"""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING

from sqlalchemy import Engine, MetaData, inspect, text

from gctl.store.settings import HEAD

if TYPE_CHECKING:
    from alembic.config import Config


def alembic_config() -> Config:
    """An Alembic config pointing at the migrations inside the installed package."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(files("gctl.migrations")))
    return cfg


def head() -> str:
    """The newest revision this gctl knows."""
    return HEAD


def current(engine: Engine) -> str | None:
    """The revision the database is at (None for an empty database)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        value = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        return None if value is None else str(value)


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database to ``revision`` (creating the tables on an empty one)."""
    from alembic import command

    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def differences(engine: Engine, metadata: MetaData | None = None) -> list[object]:
    """How the database schema differs from ``metadata`` (default: the models); empty if none."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from gctl.store.models import Base

    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(ctx, Base.metadata if metadata is None else metadata))
