"""The data layer: one frame of nodes, GPUs, jobs and events from the services, kept if stale.

:class:`FrameSource` reads a :class:`~gctl.watch.frame.Frame` through the
same services as the CLI (``nodes.views``, ``queue.queue``,
``events.list_events``) plus the few things no service lists for a whole
cluster at once: each allocation's sharing mode, each job's mechanism and
time of its last state change, and the profile samples. It runs in a worker
thread. :class:`Feed` keeps the last good frame when a refresh fails and
says how old it is, so the screen never freezes and never lies.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from gctl.services import events, nodes, queue
from gctl.services.db import Store
from gctl.services.errors import ServiceError
from gctl.store.engine import StoreError, transaction
from gctl.store.models import AllocationRow, GpuRow, JobRow, JobStateRow, NodeRow
from gctl.watch.frame import Frame, GpuCell, Holder, JobLine, NodeLine
from gctl.watch.history import History, latest_rate

Clock = Callable[[], float]
"""Epoch seconds now (tests pass a frozen one)."""

EVENTS = 300
"""How many of the newest events a frame carries."""

_Placed = dict[tuple[str, int], list[Holder]]


class FrameSource:
    """Builds frames from a store; keeps the profile history between builds."""

    def __init__(self, store: Store, clock: Clock, *, events_limit: int = EVENTS) -> None:
        """Read ``store``; ``clock`` stamps each frame."""
        self.store = store
        self.clock = clock
        self.events_limit = events_limit
        self.history = History()

    def build(self) -> Frame:
        """A new frame (raises the store's errors; :class:`Feed` handles them)."""
        started = time.perf_counter()
        with transaction(self.store.engine, write=False) as s:
            views = nodes.views(s, nodes.named_rows(s, None), detail=True)
            placed, where = _allocations(s)
            mechanism, since = _job_extras(s)
            samples = self.history.read(s, {h.job_id for hs in placed.values() for h in hs})
        listed = queue.queue(self.store)
        recent = tuple(events.list_events(self.store, limit=self.events_limit))
        lines = tuple(
            NodeLine(
                v,
                tuple(
                    GpuCell(
                        v.name,
                        g.index,
                        g.model,
                        g.memory_mb,
                        g.emulated,
                        tuple(placed.get((v.name, g.index), ())),
                    )
                    for g in v.gpus
                ),
            )
            for v in views
        )
        job_lines = tuple(
            JobLine(
                job_id,
                name,
                user,
                state,
                gpus,
                where.get(job_id, ""),
                mechanism.get(job_id),
                latest_rate(samples.get(job_id, ())),
                since.get(job_id),
                reason,
                held,
            )
            for job_id, name, user, state, gpus, reason, held in zip(
                listed.id,
                listed.name,
                listed.user,
                listed.state,
                listed.gpus,
                listed.reason,
                listed.held,
                strict=True,
            )
        )
        return Frame(
            taken_at=self.clock(),
            nodes=lines,
            jobs=job_lines,
            events=recent,
            samples=samples,
            build_seconds=time.perf_counter() - started,
        )


def _allocations(s: Session) -> tuple[_Placed, dict[int, str]]:
    """Who holds each GPU and how, oldest first; and where each job runs (``n1:0,1 n2:3``)."""
    rows = s.execute(
        select(
            NodeRow.__table__.c.name,
            GpuRow.__table__.c.index,
            AllocationRow.__table__.c.job_id,
            AllocationRow.__table__.c.mode,
            JobRow.__table__.c.state,
        )
        .select_from(AllocationRow.__table__)
        .join(GpuRow.__table__, GpuRow.__table__.c.id == AllocationRow.__table__.c.gpu_id)
        .join(NodeRow.__table__, NodeRow.__table__.c.id == GpuRow.__table__.c.node_id)
        .join(JobRow.__table__, JobRow.__table__.c.id == AllocationRow.__table__.c.job_id)
        .order_by(AllocationRow.__table__.c.since, AllocationRow.__table__.c.id)
    ).all()
    held: dict[int, dict[str, list[int]]] = {}
    for node, index, job_id, _, _ in rows:
        held.setdefault(job_id, {}).setdefault(node, []).append(index)
    placed: _Placed = {}
    for node, index, job_id, mode, state in rows:
        count = sum(len(v) for v in held[job_id].values())
        placed.setdefault((node, index), []).append(Holder(job_id, mode, state == "RUNNING", count))
    where = {
        job_id: " ".join(
            f"{node}:{','.join(map(str, sorted(idx)))}" for node, idx in sorted(by_node.items())
        )
        for job_id, by_node in held.items()
    }
    return placed, where


def _job_extras(s: Session) -> tuple[dict[int, str | None], dict[int, float]]:
    """Each unfinished job's suspend mechanism, and when it entered its state."""
    job, hist = JobRow.__table__.c, JobStateRow.__table__.c
    open_states = sorted(set(queue.STATE_CODES) - queue.FINISHED)
    mechanism: dict[int, str | None] = {
        job_id: mech
        for job_id, mech in s.execute(
            select(job.id, job.mechanism).where(
                job.state.in_(open_states), job.mechanism.is_not(None)
            )
        ).all()
    }
    since: dict[int, float] = {
        job_id: at
        for job_id, at in s.execute(
            select(hist.job_id, func.max(hist.at))
            .join(JobRow.__table__, job.id == hist.job_id)
            .where(job.state.in_(open_states))
            .group_by(hist.job_id)
        ).all()
    }
    return mechanism, since


FAILURES = (SQLAlchemyError, StoreError, ServiceError, OSError)
"""What a refresh may fail with when the store is away; anything else is a bug."""


@dataclass(slots=True)
class Feed:
    """The latest good frame, and the error of the refreshes that failed since."""

    source: FrameSource
    frame: Frame | None = None
    error: str | None = None

    def refresh(self) -> Frame | None:
        """Try a new frame; on a store failure keep the last one and remember why."""
        try:
            self.frame = self.source.build()
            self.error = None
        except FAILURES as exc:
            self.error = " ".join(str(exc).split())[:200] or type(exc).__name__
        return self.frame

    def age(self) -> float | None:
        """Seconds since the frame shown was taken (None before the first)."""
        return None if self.frame is None else self.source.clock() - self.frame.taken_at
