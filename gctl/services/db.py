"""Opening the state store for a command, and creating or upgrading its schema."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import URL, Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import SQLAlchemyError as _SAError

from gctl import config
from gctl.services.reader import require_head
from gctl.store import schema
from gctl.store.engine import StoreError, make_engine, parse_url


@dataclass(frozen=True, slots=True)
class Store:
    """An opened store: its engine and where the choice of database came from.

    ``url`` is for messages (password masked); ``config_url`` is what a
    config file may hold: the URL without its password, which belongs in
    ``~/.pgpass`` or ``$PGPASSWORD`` instead.
    """

    engine: Engine
    url: str
    source: str
    config_url: str


def connect(db: str | None = None) -> Store:
    """The store named by ``--db``, the environment, config files or the default."""
    settings = config.resolve(db)
    url = parse_url(settings.db)
    try:
        engine = make_engine(url)
    except (ImportError, _SAError) as exc:
        raise StoreError(f"cannot use database {url.render_as_string()}: {exc}") from None
    return Store(
        engine,
        url.render_as_string(hide_password=True),
        settings.db_source,
        URL.create(
            url.drivername, url.username, None, url.host, url.port, url.database, url.query
        ).render_as_string(hide_password=False),
    )


def open_store(db: str | None = None) -> Store:
    """The store, checked to be at the schema this gctl expects."""
    store = connect(db)
    require_head(revision(store), store.url)
    return store


def revision(store: Store) -> str | None:
    """The schema revision of the store (None when empty)."""
    try:
        return schema.current(store.engine)
    except OperationalError as exc:
        raise StoreError(f"cannot open database {store.url}: {exc.orig}") from None


def write_starter_config(store: Store) -> Path | None:
    """Write a config naming this store where ``gctl init`` keeps it, unless one exists."""
    path = config.starter_config_path()
    return path if config.write_starter(path, store.config_url) else None


def upgrade(store: Store) -> tuple[str | None, str]:
    """Bring the store to the newest schema; returns (before, after)."""
    before = revision(store)
    try:
        schema.upgrade(store.engine)
    except OperationalError as exc:
        raise StoreError(f"cannot upgrade database {store.url}: {exc.orig}") from None
    return before, schema.head()
