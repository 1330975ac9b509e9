"""The store lease: only one daemon acts on a store at a time.

A daemon takes the single lease row when it is free, when its holder has
not renewed it for the lease time, or when its holder was a process on this
same machine that no longer exists (a daemon killed with SIGKILL is replaced
at once, without waiting out the lease). It renews the lease every pass and
gives it back when it stops. A second daemon is told who holds the store.
"""

from __future__ import annotations

import os
import socket

from gctl.services.db import Store
from gctl.services.errors import ServiceError
from gctl.store.engine import transaction
from gctl.store.models import DaemonLeaseRow, now

DEFAULT_LEASE = 30.0
"""Seconds without renewal after which another daemon may take the store over."""


class LeaseHeld(ServiceError):
    """Another live daemon holds the store."""


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


def acquire(store: Store, *, lease: float = DEFAULT_LEASE) -> None:
    """Take the lease for this process, or raise :class:`LeaseHeld` naming its holder."""
    holder, at = me(), now()
    with transaction(store.engine, write=True) as s:
        row = s.get(DaemonLeaseRow, 1)
        if row is not None and row.holder != holder:
            age = at - row.heartbeat_at
            if age < lease and _alive_here(row.holder, row.pid):
                raise LeaseHeld(
                    f"another gctl daemon holds this store: {row.holder}"
                    f" (last heartbeat {age:.0f}s ago; it is free {lease - age:.0f}s after"
                    " it stops renewing)"
                )
        if row is None:
            s.add(
                DaemonLeaseRow(id=1, holder=holder, pid=os.getpid(), started_at=at, heartbeat_at=at)
            )
        else:
            row.holder, row.pid, row.started_at, row.heartbeat_at = holder, os.getpid(), at, at


def renew(store: Store) -> bool:
    """Renew this process's lease; False when another daemon took it over."""
    with transaction(store.engine, write=True) as s:
        row = s.get(DaemonLeaseRow, 1)
        if row is None or row.holder != me():
            return False
        row.heartbeat_at = now()
        return True


def release(store: Store) -> None:
    """Give the lease back (only when this process holds it)."""
    with transaction(store.engine, write=True) as s:
        row = s.get(DaemonLeaseRow, 1)
        if row is not None and row.holder == me():
            s.delete(row)
