"""Connecting to the state store: engine setup and transactions that never hit "database is locked".

SQLite gets WAL mode (readers never block the writer), foreign keys, a busy
timeout, and write transactions that take the write lock up front with
``BEGIN IMMEDIATE``: a deferred transaction that reads first and then tries
to write can fail at once with "database is locked" whatever the timeout,
because SQLite cannot wait for a lock that would deadlock it. Read-only
transactions stay deferred, so ``gctl queue`` never waits for a writer.
PostgreSQL needs none of this and gets plain transactions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError

from gctl.store.settings import BUSY_TIMEOUT_S

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

_WRITE = "gctl_write"
FENCE = "gctl_fence"
"""Execution option: a callable run on the connection at the start of every write transaction.

The daemon's lease check (:func:`gctl.daemon.lease.fenced`) raises there
when the daemon no longer holds the store, so nothing of the transaction is
written.
"""


ACTOR = "gctl_actor"
"""Execution option: the user the events written through this engine are recorded as.

The daemon's store carries ``gctl-daemon`` (:func:`acting_as`), so what the
daemon does is its own in the event log, whichever OS user runs it; the
events it records for a user's request still name that user.
"""


def acting_as(engine: Engine, user: str) -> Engine:
    """``engine`` whose sessions record their events as ``user`` unless told otherwise."""
    return engine.execution_options(**{ACTOR: user})


def actor(session: Session) -> str | None:
    """The user the session's engine records events as (:func:`acting_as`); None when unset."""
    value = session.get_bind().get_execution_options().get(ACTOR)
    return value if isinstance(value, str) else None


class StoreError(Exception):
    """The store cannot be reached or used (bad URL, missing database, no permission)."""


def parse_url(target: str) -> URL:
    """A database URL from a URL or a plain file path (which means SQLite)."""
    if "://" not in target:
        return URL.create("sqlite+pysqlite", database=str(Path(target).expanduser()))
    try:
        return make_url(target)
    except ArgumentError as exc:
        raise StoreError(f"bad database URL {target!r}: {exc}") from None


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL (None for other backends, memory and ``file:`` URIs)."""
    db = url.database
    if url.get_backend_name() != "sqlite" or not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db)


def make_engine(url: URL) -> Engine:
    """An engine for ``url`` with gctl's connection settings.

    Nothing is created here: a SQLite file appears at the first connection,
    which only :func:`gctl.services.db.upgrade` makes to a missing file.
    """
    if url.get_backend_name() != "sqlite":
        engine = create_engine(url, pool_pre_ping=True)
        _fence_on_begin(engine)
        return engine
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN, so it can choose IMMEDIATE.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        write = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    _fence_on_begin(engine)  # after BEGIN IMMEDIATE: the check holds the write lock
    return engine


def _fence_on_begin(engine: Engine) -> None:
    """Run the :data:`FENCE` check of a write transaction as its first statement."""

    @event.listens_for(engine, "begin")
    def _fence(conn: Any) -> None:
        options = conn.get_execution_options()
        check = options.get(FENCE)
        if check is not None and options.get(_WRITE, False):
            check(conn)


@contextmanager
def transaction(engine: Engine, *, write: bool) -> Iterator[Session]:
    """A session in one transaction: committed on success, rolled back on any error.

    ``write=True`` takes SQLite's write lock at the start (see the module
    docstring); use it for every transaction that may write.
    """
    from sqlalchemy.orm import Session  # here: ``gctl queue`` reads without the ORM

    bind = engine.execution_options(**{_WRITE: True}) if write else engine
    with Session(bind, expire_on_commit=False) as session, session.begin():
        yield session
