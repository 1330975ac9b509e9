"""The append-only event log: recording who did what and why, and reading it back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from gctl.config import site_policy
from gctl.identity import who
from gctl.services import access
from gctl.services.db import Store
from gctl.store.engine import actor, transaction
from gctl.store.models import EventRow, now, utc


def current_user() -> str:
    """The user a command acts for: the system's word (:mod:`gctl.identity`)."""
    return who(site_policy().admin_group).name


def author(session: Session) -> str:
    """Who the events of ``session`` are recorded as: its engine's actor, else the caller."""
    return actor(session) or current_user()


def record(
    session: Session,
    kind: str,
    message: str,
    *,
    job_id: int | None = None,
    node: str | None = None,
    user: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Append one event in the caller's transaction.

    Its user is ``user``, else the one the session's engine acts as (the
    daemon's: :func:`gctl.store.engine.acting_as`), else the caller's.
    """
    session.add(
        EventRow(
            at=now(),
            user=user or author(session),
            kind=kind,
            job_id=job_id,
            node=node,
            message=message,
            data=data or {},
        )
    )


def prune(store: Store, before: float) -> int:
    """Delete the events recorded before ``before`` (epoch seconds); how many. Operators only.

    The log is append-only otherwise: this is its retention (``gctl events
    prune``, and the daemon past the site's ``[events] keep_days``).
    """
    access.operator_only(store, "gctl events prune")
    return prune_before(store, before)


def prune_before(store: Store, before: float) -> int:
    """:func:`prune` without the caller's check: for the daemon, which holds the store."""
    with transaction(store.engine, write=True) as s:
        old = EventRow.at < before
        count = s.scalar(select(func.count()).select_from(EventRow).where(old)) or 0
        s.execute(delete(EventRow).where(old))
        return int(count)


@dataclass(frozen=True, slots=True)
class EventView:
    """One event as commands show it."""

    id: int
    at: float
    user: str
    kind: str
    job_id: int | None
    node: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys; times as UTC datetimes (``emit_json`` writes ISO 8601)."""
        return {
            "id": self.id,
            "at": utc(self.at),
            "user": self.user,
            "kind": self.kind,
            "job_id": self.job_id,
            "node": self.node,
            "message": self.message,
        }


def list_events(
    store: Store,
    *,
    job_id: int | None = None,
    node: str | None = None,
    since: float | None = None,
    limit: int | None = None,
    after: int = 0,
) -> list[EventView]:
    """Events, oldest first, filtered by job, node and time; the newest ``limit`` when given.

    ``after``: only events with a higher id, i.e. recorded after that one
    (how ``gctl events --follow`` asks for what is new).
    """
    q = select(EventRow).where(EventRow.id > after)
    if job_id is not None:
        q = q.where(EventRow.job_id == job_id)
    if node is not None:
        q = q.where(EventRow.node == node)
    if since is not None:
        q = q.where(EventRow.at >= since)
    q = q.order_by(EventRow.id.desc())
    if limit is not None:
        q = q.limit(limit)
    with transaction(store.engine, write=False) as s:
        rows = s.scalars(q).all()
        return [
            EventView(r.id, r.at, r.user, r.kind, r.job_id, r.node, r.message)
            for r in reversed(rows)
        ]
