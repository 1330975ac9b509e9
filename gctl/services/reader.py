"""Read-only access to the store as a plain DB-API connection, for listings that must start fast.

``gctl queue`` lists 100,000 jobs within a second, and importing SQLAlchemy
alone takes close to half of that. So on a SQLite store the listing reads
through the standard library's ``sqlite3`` and never imports SQLAlchemy;
any other database is opened the usual way and read through the engine's
raw driver connection. Either way the caller gets a :class:`Reader`: one
read transaction (a consistent snapshot across its statements) and the
driver's placeholder, so the same SQL text serves both.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gctl import config
from gctl.services.errors import ServiceError
from gctl.store.settings import BUSY_TIMEOUT_S, HEAD

if TYPE_CHECKING:
    from gctl.services.db import Store

_SQLITE_SCHEMES = ("sqlite", "sqlite+pysqlite")


@dataclass(frozen=True, slots=True)
class Reader:
    """A DB-API cursor inside one read transaction, and its driver's placeholder (? or %s)."""

    cursor: Any
    mark: str

    def marks(self, count: int) -> str:
        """``count`` placeholders separated by commas, for an ``IN (...)`` list."""
        return ", ".join([self.mark] * count)

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """Every row of ``sql`` as the driver's own tuples."""
        self.cursor.execute(sql, tuple(params))
        rows: list[tuple[Any, ...]] = self.cursor.fetchall()
        return rows


def require_head(at: str | None, url: str) -> None:
    """Refuse a store that is empty or at another schema revision than this gctl's."""
    if at is None:
        raise ServiceError(f"no gctl database at {url}; run 'gctl init' first")
    if at != HEAD:
        raise ServiceError(
            f"database {url} is at schema {at}, this gctl needs {HEAD}; run 'gctl db upgrade'"
        )


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite store named by a path or a plain ``sqlite:///`` URL, else None.

    URLs with query options, in-memory databases and other backends are left
    to SQLAlchemy, which knows what they mean.
    """
    if "://" not in url:
        return Path(url).expanduser()
    scheme, _, rest = url.partition("://")
    if scheme not in _SQLITE_SCHEMES or "?" in rest or not rest.startswith("/"):
        return None
    path = rest[1:]
    return Path(path) if path and path != ":memory:" else None


@contextmanager
def reading(target: str | None) -> Iterator[Reader]:
    """A reader of the store chosen by ``--db``, the environment, config files or the default."""
    url = config.resolve(target).db
    path = sqlite_file(url)
    if path is None:
        from gctl.services import db

        with reading_store(db.open_store(target)) as reader:
            yield reader
        return
    shown = url if "://" in url else f"sqlite+pysqlite:///{path}"
    try:
        # mode=rw: a missing file is an error here, not a new empty database.
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=rw", uri=True, timeout=BUSY_TIMEOUT_S)
    except sqlite3.OperationalError:
        raise ServiceError(f"no gctl database at {shown}; run 'gctl init' first") from None
    conn.isolation_level = None  # BEGIN below, then every statement in that one snapshot
    try:
        cursor = conn.cursor()
        cursor.execute("BEGIN")
        require_head(_sqlite_revision(cursor), shown)
        yield Reader(cursor, "?")
    except sqlite3.Error as exc:
        raise ServiceError(f"cannot read database {shown}: {exc}") from None
    finally:
        conn.close()


@contextmanager
def reading_store(store: Store) -> Iterator[Reader]:
    """A reader over an opened store's engine (any backend); a driver error is a ServiceError.

    That includes failing to connect (a store gone away).
    """
    failed = store.engine.dialect.loaded_dbapi.Error  # raw: SQLAlchemy wraps none
    try:
        conn = store.engine.raw_connection()
    except failed as exc:
        raise _unreadable(store, exc) from None
    sqlite = store.engine.dialect.name == "sqlite"
    try:
        cursor = conn.cursor()
        if sqlite:  # gctl's SQLite connections leave BEGIN to their user
            cursor.execute("BEGIN")
        yield Reader(cursor, "?" if sqlite else "%s")
    except failed as exc:
        raise _unreadable(store, exc) from None
    finally:
        conn.rollback()
        conn.close()


def _unreadable(store: Store, exc: Exception) -> ServiceError:
    why = " ".join(str(exc).split())
    return ServiceError(f"cannot read database {store.url}: {why}")


def _sqlite_revision(cursor: sqlite3.Cursor) -> str | None:
    try:
        row = cursor.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.OperationalError:  # no such table: not a gctl database (yet)
        return None
    return None if row is None else str(row[0])
