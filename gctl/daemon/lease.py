"""The store lease: only one daemon acts on a store at a time, and a deposed one writes nothing.

A daemon takes the single lease row when it is free, when its holder has
not renewed it for the lease time, or when its holder was a process on this
same machine that no longer exists (a daemon killed with SIGKILL is replaced
at once, without waiting out the lease). Each takeover raises the lease's
*epoch*. The daemon renews the lease every tick and gives it back when it
stops. A second daemon is told who holds the store, or, with ``--standby``,
waits and takes over when the lease lapses.

Fencing: every write transaction of a daemon first reads the lease in the
same transaction (:func:`fenced`) and raises :class:`Fenced` unless it still
holds it at its epoch. A daemon paused past its lease (SIGSTOP, a VM
freeze, a cut-off database) therefore writes nothing once it resumes and
stops with a clear message. On PostgreSQL the read is ``FOR SHARE``, so a
takeover waits for a write transaction in flight to end instead of slipping
in between its check and its commit; the daemon's sessions are ended by the
server if they sit idle inside a transaction for a quarter of the lease, so
a daemon paused inside one cannot hold the takeover back for long.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
import threading
from collections.abc import Callable

from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from gctl.services.db import Store
from gctl.services.errors import ServiceError
from gctl.store.engine import FENCE, transaction
from gctl.store.models import DaemonLeaseRow, now

DEFAULT_LEASE = 30.0
"""Seconds without renewal after which another daemon may take the store over."""


class LeaseHeld(ServiceError):
    """Another live daemon holds the store."""


class Fenced(LeaseHeld):
    """The lease was lost: another daemon took the store over, so this one must stop."""


def me() -> str:
    """The calling process as a lease holder: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _alive_here(holder: str, pid: int) -> bool:
    """Whether ``holder`` is a live process, when it ran on this machine (True if unknown)."""
    host = holder.rsplit(":", 1)[0]
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def held(s: Session, at: float, lease: float = DEFAULT_LEASE) -> bool:
    """Whether a daemon holds the store at ``at``: it renewed the lease within ``lease`` seconds.

    What commands that leave work to the daemon check, to say when none will
    do it. A holder on this host whose process is gone holds nothing.
    """
    row = s.get(DaemonLeaseRow, 1)
    return row is not None and _holds(row, at, lease)


def _holds(row: DaemonLeaseRow, at: float, lease: float) -> bool:
    return bool(row.holder) and at - row.heartbeat_at < lease and _alive_here(row.holder, row.pid)


def acquire(store: Store, *, lease: float = DEFAULT_LEASE) -> int:
    """Take the lease for this process and return its new epoch, or raise :class:`LeaseHeld`."""
    holder, at = me(), now()
    with transaction(store.engine, write=True) as s:
        row = s.get(DaemonLeaseRow, 1)
        if row is not None and row.holder and row.holder != holder:
            age = at - row.heartbeat_at
            if _holds(row, at, lease):
                raise LeaseHeld(
                    f"another gctl daemon holds this store: {row.holder}"
                    f" (last heartbeat {age:.0f}s ago; it is free {lease - age:.0f}s after"
                    " it stops renewing)"
                )
        if row is None:
            row = DaemonLeaseRow(id=1, holder=holder, pid=os.getpid(), epoch=0)
            s.add(row)
        row.holder, row.pid, row.started_at, row.heartbeat_at = holder, os.getpid(), at, at
        row.epoch = (row.epoch or 0) + 1
        return row.epoch


def wait_for(
    store: Store,
    stop: threading.Event,
    *,
    lease: float = DEFAULT_LEASE,
    waiting: Callable[[str], None] | None = None,
) -> int | None:
    """Take the lease as soon as it is free (``--standby``); its epoch, or None if stopped first.

    ``waiting`` is told, once, why the lease is not free yet.
    """
    told = False
    while not stop.is_set():
        try:
            return acquire(store, lease=lease)
        except Fenced:
            raise
        except LeaseHeld as exc:
            if waiting is not None and not told:
                waiting(str(exc))
                told = True
        stop.wait(min(1.0, lease / 4))
    return None


def check(conn: Connection, epoch: int, idle_ms: int = 0) -> None:
    """Raise :class:`Fenced` unless this process holds the lease at ``epoch`` (in ``conn``'s txn).

    On PostgreSQL the lease row is share-locked to the end of the
    transaction, which the server ends if it sits idle for ``idle_ms``.
    """
    query = select(DaemonLeaseRow.holder, DaemonLeaseRow.epoch).where(DaemonLeaseRow.id == 1)
    if conn.dialect.name == "postgresql":
        if idle_ms:
            conn.exec_driver_sql(f"SET LOCAL idle_in_transaction_session_timeout = {idle_ms:d}")
        query = query.with_for_update(read=True)
    row = conn.execute(query).first()
    if row is None or row[0] != me() or row[1] != epoch:
        who = "nobody" if row is None or not row[0] else f"{row[0]} (epoch {row[1]})"
        raise Fenced(
            f"this daemon lost the store's lease (epoch {epoch}); it is held by {who}."
            " It stops without writing anything more"
        )


def fenced(store: Store, epoch: int, *, lease: float = DEFAULT_LEASE) -> Store:
    """``store`` whose every write transaction checks the lease at ``epoch`` first."""
    idle_ms = max(1000, int(lease * 250))
    checker = functools.partial(check, epoch=epoch, idle_ms=idle_ms)
    return dataclasses.replace(store, engine=store.engine.execution_options(**{FENCE: checker}))


def check_held(store: Store, epoch: int) -> None:
    """Raise :class:`Fenced` naming the new holder (after :func:`renew` said False)."""
    with store.engine.connect() as conn:
        check(conn, epoch)
    raise Fenced(f"this daemon lost the store's lease (epoch {epoch}); it stops")


def renew(store: Store, epoch: int) -> bool:
    """Renew this process's lease; False when another daemon took it over.

    Read and written without the fence, which would raise instead of answering.
    """
    plain = store.engine.execution_options(**{FENCE: None})
    with transaction(plain, write=True) as s:
        row = s.get(DaemonLeaseRow, 1)
        if row is None or row.holder != me() or row.epoch != epoch:
            return False
        row.heartbeat_at = now()
        return True


def release(store: Store, epoch: int | None = None) -> None:
    """Give the lease back (only when this process holds it, at ``epoch`` when given).

    The row stays, with no holder, so the next takeover's epoch is higher.
    """
    plain = store.engine.execution_options(**{FENCE: None})
    with transaction(plain, write=True) as s:
        row = s.get(DaemonLeaseRow, 1)
        if row is not None and row.holder == me() and epoch in (None, row.epoch):
            row.holder, row.heartbeat_at = "", 0.0
