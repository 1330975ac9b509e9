"""Whether the store a long-running process opened is still there and sound.

A SQLite file deleted or replaced under a running daemon goes unnoticed by
SQLite itself: the daemon's open connections keep reading and writing the
old file, which nobody else sees. Random pages written over the file go
unnoticed until a query happens to read them. :class:`StoreHealth` tells
these apart, in one line each, so the daemon can stop with the reason
instead of carrying on against a store that no other command shares.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from sqlalchemy.exc import SQLAlchemyError

from gctl.services.errors import ServiceError
from gctl.store.engine import sqlite_path
from gctl.store.settings import BUSY_TIMEOUT_S

if TYPE_CHECKING:
    from gctl.services.db import Store


class StoreBroken(ServiceError):
    """The store is gone, replaced, corrupt or not answering; the message says which."""


class StoreHealth:
    """Checks an opened store against what it was when this checker was made.

    Make it when the process starts using the store (for SQLite it records
    the database file's device and inode then), and call :meth:`check` at
    start and every so often after.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._path = sqlite_path(store.engine.url)
        self._identity = None if self._path is None else _identity(self._path)
        if self._path is not None and self._identity is None:
            raise StoreBroken(f"database file {self._path} does not exist")

    def check(self) -> None:
        """Raise :class:`StoreBroken` unless the store is the one opened and reads as sound.

        SQLite: the file at the path is still the one opened (same device and
        inode) and ``PRAGMA quick_check`` says ok, read through a connection
        of its own so that no page cached by the process's connections hides
        damage on disk. Other databases: a trivial query answers.
        """
        if self._path is None:
            self._answers()
            return
        now = _identity(self._path)
        if now is None:
            raise StoreBroken(f"database file {self._path} was deleted while the daemon ran")
        if now != self._identity:
            raise StoreBroken(f"database file {self._path} was replaced while the daemon ran")
        _quick_check(self._path)

    def _answers(self) -> None:
        """StoreBroken unless a trivial query gets its answer (a server, not a file)."""
        try:
            with self._store.engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1").all()
        except SQLAlchemyError as exc:
            why = getattr(exc, "orig", None) or exc
            raise StoreBroken(f"database {self._store.url} does not answer: {_line(why)}") from None


def _identity(path: Path) -> tuple[int, int] | None:
    """The file's (device, inode), or None when there is no file at ``path``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreBroken(f"database file {path} cannot be checked: {exc.strerror}") from None
    return st.st_dev, st.st_ino


def _quick_check(path: Path) -> None:
    """StoreBroken unless ``PRAGMA quick_check`` on the file says ok."""
    try:
        # mode=rw: a file that vanished since the identity check is not created anew.
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=rw", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            row = conn.execute("PRAGMA quick_check(1)").fetchone()
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:  # locked past the timeout, I/O error, no file
        raise StoreBroken(f"database file {path} cannot be read: {_line(exc)}") from None
    except sqlite3.DatabaseError as exc:  # "file is not a database", "... malformed"
        raise StoreBroken(f"database file {path} is corrupt: {_line(exc)}") from None
    if row is None or row[0] != "ok":
        # Its first complaint, past the "*** in database main ***" heading.
        lines = [] if row is None else str(row[0]).splitlines()
        found = next((ln for ln in lines if not ln.startswith("*** ")), "no details")
        raise StoreBroken(f"database file {path} is corrupt: {_line(found)}")


def _line(what: object) -> str:
    """Text as one line: a driver's message may span several."""
    return " ".join(str(what).split()) or type(what).__name__
