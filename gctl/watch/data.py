"""The data layer: one frame of nodes, GPUs, jobs and events from the services, kept if stale.

:class:`FrameSource` reads a :class:`~gctl.watch.frame.Frame` through the
same services as the CLI (``queue.queue``, ``events.list_events``) and the
dashboard's own (:mod:`gctl.services.dashboard`: nodes with who holds each
GPU and how, each job's mechanism and time in state, profile samples); no
SQL here. It runs in a worker thread. Each refresh first reads the
store's stamp (:class:`~gctl.services.dashboard.Stamper`: a few tens of
ms at 1,000 nodes and 10,000 jobs; on SQLite, nothing while nobody
writes); only when it changed is a new frame built (about a
second there), else the last frame is taken again at the new time, with
the very same lines, so the widgets can tell that nothing changed.
:class:`Feed` keeps the last good frame when a refresh fails and says how
old it is, so the screen never freezes and never lies.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from gctl.services import dashboard, events, queue
from gctl.services.db import Store
from gctl.services.errors import ServiceError
from gctl.store.engine import StoreError
from gctl.watch.frame import Frame, GpuCell, JobLine, NodeLine
from gctl.watch.history import latest_rate

Clock = Callable[[], float]
"""Epoch seconds now (tests pass a frozen one)."""

EVENTS = 300
"""How many of the newest events a frame carries."""


class FrameSource:
    """Builds frames from a store; keeps the profile history between builds."""

    def __init__(self, store: Store, clock: Clock, *, events_limit: int = EVENTS) -> None:
        """Read ``store``; ``clock`` stamps each frame."""
        self.store = store
        self.clock = clock
        self.events_limit = events_limit
        self.history = dashboard.ProfileHistory()
        self._stamp: dashboard.Stamp | None = None
        self._stamper = dashboard.Stamper(store)
        self._last: Frame | None = None

    def latest(self) -> Frame:
        """A frame of now: built anew if the store's stamp changed, else the last one re-timed."""
        started = time.perf_counter()
        # The stamp before the build: a change made meanwhile is seen by the next refresh.
        if self._stamper.store is not self.store:  # another store now: its own stamps
            self._stamper.close()
            self._stamper = dashboard.Stamper(self.store)
        stamp = self._stamper.stamp()
        if self._last is None or stamp != self._stamp:
            self._last, self._stamp = self.build(), stamp
            return self._last
        return dataclasses.replace(
            self._last, taken_at=self.clock(), build_seconds=time.perf_counter() - started
        )

    def build(self) -> Frame:
        """A new frame, read in full (raises the store's errors; :class:`Feed` handles them)."""
        started = time.perf_counter()
        cluster = dashboard.read(self.store, self.history)
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
                        tuple(cluster.placed.get((v.name, g.index), ())),
                    )
                    for g in v.gpus
                ),
            )
            for v in cluster.nodes
        )
        job_lines = tuple(
            JobLine(
                job_id,
                name,
                user,
                state,
                gpus,
                cluster.where.get(job_id, ""),
                cluster.mechanism.get(job_id),
                latest_rate(cluster.samples.get(job_id, ())),
                start,
                end,
                reason,
                held,
            )
            for job_id, name, user, state, gpus, start, end, reason, held in zip(
                listed.id,
                listed.name,
                listed.user,
                listed.state,
                listed.gpus,
                listed.start_time,
                listed.end_time,
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
            samples=cluster.samples,
            build_seconds=time.perf_counter() - started,
        )


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
            self.frame = self.source.latest()
            self.error = None
        except FAILURES as exc:
            self.error = " ".join(str(exc).split())[:200] or type(exc).__name__
        return self.frame

    def age(self) -> float | None:
        """Seconds since the frame shown was taken (None before the first)."""
        return None if self.frame is None else self.source.clock() - self.frame.taken_at
