"""What ``gctl watch`` reads beyond the CLI's listings: GPU sharing, job extras, profile history.

The dashboard lists nodes, jobs and events through the CLI's own services
(``nodes.views``, ``queue.queue``, ``events.list_events``). The rest it
shows no command lists for a whole cluster at once: who holds each GPU and
how (exclusive, packed, time-sliced), each unfinished job's suspend
mechanism, and the last profile samples the daemon stored for each job on
GPUs. :func:`read` takes all of it, with the nodes, in one read
transaction; :class:`ProfileHistory` keeps the samples between reads so
each read fetches only the new ones. :class:`Stamper` says, for a fraction
of a read's cost, whether anything the dashboard shows may have changed.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gctl.services import nodes, queue
from gctl.services.db import Store
from gctl.services.nodes import NodeView
from gctl.services.reader import reading_store
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, GpuRow, JobRow, NodeRow, ProfileRow, now

HISTORY_DEPTH = 30
"""Profile samples kept per job (and so points in a GPU's sparkline)."""

GpuKey = tuple[str, int]
"""A GPU as ``(node name, index)``."""
Stamp = tuple[Any, ...]
"""What :meth:`Stamper.stamp` returns: equal stamps, nothing shown has changed."""

_OPEN_STATES = sorted(set(queue.STATE_CODES) - queue.FINISHED)
_STAMP_NODES = "SELECT id, name, admin_state, reason, emulated, last_seen, last_error FROM nodes"
_STAMP_TABLES = (
    'SELECT id, node_id, "index", model, memory_mb, emulated FROM gpus',
    "SELECT id, job_id, gpu_id, mode FROM allocations",
    "SELECT (SELECT max(id) FROM events), (SELECT max(id) FROM profiles)",
)
_STAMP_JOBS = (
    'SELECT id, name, "user", state, gpus, reason, held, start_time, end_time, mechanism'
    " FROM jobs WHERE state IN ({})"
)


@dataclass(frozen=True, slots=True)
class Sample:
    """One stored profile sample of a job (``profiles`` table)."""

    at: float
    util: float
    memory_mb: int
    rate: float


@dataclass(frozen=True, slots=True)
class Holder:
    """A job holding a GPU: how it shares it and whether it runs on it now."""

    job_id: int
    mode: str
    running: bool
    gpus_held: int


@dataclass(frozen=True, slots=True)
class Cluster:
    """One read of the cluster for the dashboard."""

    nodes: list[NodeView]
    """Every node by name, with its GPUs."""
    placed: dict[GpuKey, list[Holder]]
    """The jobs on each GPU that has any, oldest allocation first."""
    where: dict[int, str]
    """Where each job on GPUs runs, e.g. ``n1:0,1 n2:3``."""
    mechanism: dict[int, str | None]
    """Each unfinished job's suspend mechanism (``freeze``, ``checkpoint``), where known."""
    samples: dict[int, tuple[Sample, ...]]
    """The last samples of each job holding GPUs, oldest first."""


class ProfileHistory:
    """The last :data:`HISTORY_DEPTH` profile samples of each job still holding GPUs."""

    def __init__(self, depth: int = HISTORY_DEPTH) -> None:
        """Start empty; the first read back-fills from the newest stored samples."""
        self.depth = depth
        self._last_id: int | None = None
        self._by_job: dict[int, deque[Sample]] = {}

    def read(self, s: Session, holding: set[int]) -> dict[int, tuple[Sample, ...]]:
        """Add the samples stored since the last read; the history of each job in ``holding``."""
        p = ProfileRow.__table__.c
        if self._last_id is None:
            top = s.scalar(select(func.max(p.id))) or 0
            self._last_id = max(0, top - self.depth * max(1, len(holding)))
        rows = s.execute(
            select(p.id, p.job_id, p.at, p.gpu_util, p.memory_mb, p.progress_rate)
            .where(p.id > self._last_id)
            .order_by(p.id)
        ).all()
        for row_id, job_id, at, util, mem, rate in rows:
            self._last_id = row_id
            if job_id in holding:
                kept = self._by_job.get(job_id)
                if kept is None:
                    kept = self._by_job[job_id] = deque(maxlen=self.depth)
                kept.append(Sample(at, util, mem, rate))
        for gone in self._by_job.keys() - holding:
            del self._by_job[gone]
        return {job: tuple(kept) for job, kept in self._by_job.items()}


def read(store: Store, history: ProfileHistory) -> Cluster:
    """Nodes, GPU holders, job extras and new profile samples, in one read transaction."""
    with transaction(store.engine, write=False) as s:
        views = nodes.views(s, nodes.named_rows(s, None), detail=True)
        placed, where = _allocations(s)
        mechanism = _mechanisms(s)
        samples = history.read(s, {h.job_id for hs in placed.values() for h in hs})
    return Cluster(views, placed, where, mechanism, samples)


def _stamp_rows(store: Store) -> tuple[list[tuple[Any, ...]], list[Any]]:
    """The node rows of a stamp, and the rest of it."""
    with reading_store(store) as reader:
        node_rows = reader.rows(_STAMP_NODES)
        others = [reader.rows(sql) for sql in _STAMP_TABLES]
        open_jobs = reader.rows(_STAMP_JOBS.format(reader.marks(len(_OPEN_STATES))), _OPEN_STATES)
    return node_rows, [open_jobs, *others]


def _judged(rows: tuple[list[tuple[Any, ...]], list[Any]]) -> Stamp:
    """A stamp of its rows, each node's answering judged now."""
    at = now()
    node_rows, rest = rows
    judged = [(*row[:5], nodes.answering(row[5], row[6], at), row[6]) for row in node_rows]
    return (judged, *rest)


class Stamper:
    """The store's stamp, read again only when the store may have changed.

    On SQLite, ``PRAGMA data_version`` on a connection kept open says
    whether any other connection committed since the last look: while
    nobody writes, the rows of the last stamp are taken again (only the
    nodes' answering is judged anew, as time passes). Other backends read
    every time.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._version: Any = None
        self._rows: tuple[list[tuple[Any, ...]], list[Any]] | None = None
        self._conn: Any = None

    def stamp(self) -> Stamp:
        """The rows the dashboard's frame is made of, read cheaply: equal stamps, equal frames.

        Nodes (each one's answering judged now, not its last heartbeat, so a
        node going quiet changes the stamp and a heartbeat does not), GPUs,
        allocations, the queue's columns of unfinished jobs, and the newest
        event and profile sample. Plain SQL, no objects: a few tens of ms for
        1,000 nodes and 10,000 jobs, where :func:`read` and the queue take ~1 s.
        """
        version = self._data_version()
        if self._rows is None or version is None or version != self._version:
            self._rows, self._version = _stamp_rows(self.store), version
        return _judged(self._rows)

    def _data_version(self) -> Any:
        """SQLite's count of other connections' commits, as this kept connection sees it."""
        if self.store.engine.dialect.name != "sqlite":
            return None
        try:
            if self._conn is None:
                self._conn = self.store.engine.raw_connection()
            cursor = self._conn.cursor()
            version = cursor.execute("PRAGMA data_version").fetchone()
            cursor.close()
        except self.store.engine.dialect.loaded_dbapi.Error:
            self.close()  # read in full; the store's own errors come from there
            return None
        return version

    def close(self) -> None:
        """Give the kept connection back."""
        conn, self._conn = self._conn, None
        if conn is not None:  # a connection gone bad is gone either way
            with contextlib.suppress(self.store.engine.dialect.loaded_dbapi.Error):
                conn.close()


def _allocations(s: Session) -> tuple[dict[GpuKey, list[Holder]], dict[int, str]]:
    """Who holds each GPU and how, oldest first; and where each job runs."""
    alloc, gpu, node, job = (
        AllocationRow.__table__.c,
        GpuRow.__table__.c,
        NodeRow.__table__.c,
        JobRow.__table__.c,
    )
    rows = s.execute(
        select(node.name, gpu.index, alloc.job_id, alloc.mode, job.state)
        .select_from(AllocationRow.__table__)
        .join(GpuRow.__table__, gpu.id == alloc.gpu_id)
        .join(NodeRow.__table__, node.id == gpu.node_id)
        .join(JobRow.__table__, job.id == alloc.job_id)
        .order_by(alloc.since, alloc.id)
    ).all()
    held: dict[int, dict[str, list[int]]] = {}
    for name, index, job_id, _, _ in rows:
        held.setdefault(job_id, {}).setdefault(name, []).append(index)
    placed: dict[GpuKey, list[Holder]] = {}
    for name, index, job_id, mode, state in rows:
        count = sum(len(v) for v in held[job_id].values())
        placed.setdefault((name, index), []).append(Holder(job_id, mode, state == "RUNNING", count))
    where = {
        job_id: " ".join(
            f"{name}:{','.join(map(str, sorted(idx)))}" for name, idx in sorted(by_node.items())
        )
        for job_id, by_node in held.items()
    }
    return placed, where


def _mechanisms(s: Session) -> dict[int, str | None]:
    """Each unfinished job's suspend mechanism, where known."""
    job = JobRow.__table__.c
    return {
        job_id: mech
        for job_id, mech in s.execute(
            select(job.id, job.mechanism).where(
                job.state.in_(_OPEN_STATES), job.mechanism.is_not(None)
            )
        ).all()
    }
