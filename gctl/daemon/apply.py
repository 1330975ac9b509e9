"""The one place where scheduling decisions become host actions and store writes.

A decision is carried out on the hosts first and recorded in the store
after, so the store never claims a container that was not started; what a
host refuses becomes the job's reason. Checkpoint moves are recorded first
and then carried through (:mod:`gctl.daemon.moves`), so a restart finishes
them.

- ``Place``: a container per node the job spans, on exactly the chosen GPUs.
- ``Queue``: the reason the job waits.
- ``Suspend``, ``Unpack`` and ``Resume`` of time slicing use the *freeze*
  mechanism (docker pause and unpause: the job keeps its GPU memory and
  resumes in place within milliseconds). A job whose container is gone
  resumes as a new attempt from its checkpoint.
- ``Pack`` onto the GPUs the job already holds just lets it run alongside;
  onto others it is a checkpoint move, like ``Migrate``, ``Grow``,
  ``Shrink`` and ``Requeue``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Double, Update, bindparam, delete, func, insert, select, update
from sqlalchemy.orm import Session, selectinload

from gctl.core.decisions import (
    Decision,
    Grow,
    Migrate,
    Pack,
    Place,
    Queue,
    Requeue,
    Resume,
    Shrink,
    Suspend,
    Unpack,
)
from gctl.core.model import GpuRef
from gctl.daemon import moves
from gctl.daemon.site import Site, job_gpus, job_nodes
from gctl.gcpause import gc_paused
from gctl.hosts.ssh import HostError
from gctl.services import events
from gctl.services.jobs import set_state
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, JobRow, JobStateRow, NodeRow, now
from gctl.store.snapshot import MECHANISM_FREEZE, Snapshot

_MOVE_KINDS: dict[type, str] = {Migrate: "migrate", Grow: "grow", Shrink: "shrink"}
BATCH = 500
"""Decisions recorded per transaction."""
RECORD_EVERY = 1.0
"""Seconds of host actions after which a batch records what it did before going on."""
Batched = Place | Queue | Suspend | Unpack
"""Decisions carried out in batches: a host action each, recorded together."""


@dataclass
class Applied:
    """What one batch of decisions did: carried out, and refused by a host."""

    done: list[Decision] = field(default_factory=list)
    failed: list[tuple[Decision, str]] = field(default_factory=list)


class Applier:
    """Carries out the decisions taken on one snapshot of the store."""

    def __init__(self, site: Site, snap: Snapshot, observe: Callable[[str, float], None]):
        self.site = site
        self.snap = snap
        self.observe = observe
        self._nodes: dict[str, NodeRow] | None = None
        self._placed: dict[str, tuple[GpuRef, ...]] = {}

    def apply(self, decisions: list[Decision]) -> Applied:
        """Carry out ``decisions`` in order; a refused one is reported, the rest go on.

        Runs of placements, queue reasons and freezes are carried out on the
        hosts one by one and recorded together, one transaction per
        :data:`BATCH` or per :data:`RECORD_EVERY` seconds of host actions,
        whichever comes first; moves and thaws are carried out one at a time.
        """
        out = Applied()
        batch: list[Batched] = []
        for d in decisions:
            if isinstance(d, Place | Queue | Suspend | Unpack):
                batch.append(d)
                if len(batch) < BATCH:
                    continue
            self._batch(batch, out)
            batch = []
            if not isinstance(d, Place | Queue | Suspend | Unpack):
                self._timed(d, out)
        self._batch(batch, out)
        return out

    def _timed(self, d: Decision, out: Applied) -> None:
        started = now()
        try:
            self._one(d)
        except HostError as exc:
            self._refused(d, str(exc))
            out.failed.append((d, str(exc)))
        else:
            out.done.append(d)
        self.observe(type(d).__name__.lower(), now() - started)

    def _rows(self, s: Session, batch: list[Batched]) -> dict[int, JobRow]:
        ids = {self.snap.job_ids[d.job_id] for d in batch}
        return {r.id: r for r in s.scalars(select(JobRow).where(JobRow.id.in_(ids)))}

    def _node_rows(self, s: Session) -> dict[str, NodeRow]:
        """Every node with its GPUs, read once per applier (placements look them up)."""
        if self._nodes is None:
            query = select(NodeRow).options(selectinload(NodeRow.gpus))
            self._nodes = {n.name: n for n in s.scalars(query)}
        return self._nodes

    def _batch(self, batch: list[Batched], out: Applied) -> None:
        """Act on the hosts (no write lock held), then record the whole batch in one go.

        The cyclic garbage collector waits meanwhile: the batch's many rows
        and records are acyclic and gone by its end, and the collector's
        passes would walk the whole cluster state for nothing.
        """
        while batch:
            with gc_paused():
                started, batch = self._act(batch, out)
                self._record([d for d, _ in started], out)
            for d, at in started:
                self.observe(type(d).__name__.lower(), now() - at)

    def _act(
        self, batch: list[Batched], out: Applied
    ) -> tuple[list[tuple[Batched, float]], list[Batched]]:
        """Carry out the batch's host actions for up to :data:`RECORD_EVERY` seconds.

        Returns the decisions carried out, with when each began, and those
        left for the next round, so that what has started is recorded soon.
        """
        started: list[tuple[Batched, float]] = []
        begun = now()
        with transaction(self.site.store.engine, write=False) as s:
            rows = self._rows(s, batch)
            for i, d in enumerate(batch):
                at = now()
                if at - begun >= RECORD_EVERY:
                    return started, batch[i:]
                row = rows.get(self.snap.job_ids[d.job_id])
                try:
                    if row is None:
                        raise HostError("-", f"job {d.job_id} removed from the store")
                    if isinstance(d, Place):
                        self.site.start(s, row, d.gpus, nodes=self._node_rows(s))
                        self._placed[d.job_id] = d.gpus
                    elif isinstance(d, Suspend | Unpack):
                        self._pause(s, row, d.job_id)
                except HostError as exc:
                    self._refused(d, str(exc))
                    out.failed.append((d, str(exc)))
                    continue
                started.append((d, at))
        return started, []

    def _record(self, done: list[Batched], out: Applied) -> None:
        """Record decisions carried out on the hosts, in one write transaction."""
        with transaction(self.site.store.engine, write=True) as s:
            records = _Records(self.snap, now())
            for d in done:
                records.add(d)
            records.write(s)
        out.done += done

    def sync_modes(self) -> None:
        """Record how each placed job now shares its GPUs (exclusive, packed, time-sliced).

        Placing a job into a group changes the mode of the jobs already there.
        """
        state = self.snap.state
        want = {
            self.snap.job_ids[j]: state.mode_of(j).value
            for j, js in state.jobs.items()
            if js.gpus and j in self.snap.job_ids
        }
        with transaction(self.site.store.engine, write=True) as s, gc_paused():
            found = s.execute(select(AllocationRow.id, AllocationRow.job_id, AllocationRow.mode))
            changed = [
                {"id": a, "mode": want[j]} for a, j, mode in found if want.get(j, mode) != mode
            ]
            if changed:
                s.execute(update(AllocationRow), changed)

    def _row(self, s: Session, job_id: str) -> JobRow:
        row = s.get(JobRow, self.snap.job_ids[job_id])
        if row is None:
            raise HostError("-", f"job {job_id} removed from the store")
        return row

    def _mode(self, job_id: str) -> str:
        return self.snap.state.mode_of(job_id).value

    def _one(self, d: Decision) -> None:
        if isinstance(d, Migrate | Grow | Shrink | Requeue) or (
            isinstance(d, Pack) and not self._holds(d.job_id, d.gpus)
        ):
            self._move(d)
            return
        with transaction(self.site.store.engine, write=True) as s:
            row = self._row(s, d.job_id)
            if isinstance(d, Resume | Pack):  # Pack onto the GPUs it holds
                self._thaw(s, row, d)

    def _holds(self, job_id: str, gpus: tuple[tuple[str, int], ...]) -> bool:
        with transaction(self.site.store.engine, write=False) as s:
            return job_gpus(s, self.snap.job_ids[job_id]) == sorted(gpus)

    def _pause(self, s: Session, row: JobRow, job_id: str) -> None:
        """Freeze the job's running containers (it may have been placed in this very batch)."""
        if job_id in self._placed:
            rows = self._node_rows(s)
            nodes = [rows[n] for n in sorted({n for n, _ in self._placed[job_id]}) if n in rows]
        else:
            nodes = job_nodes(s, row.id)
        for node in nodes:
            engine = self.site.engine(node)
            for c in self.site.containers(node, row.id, row.attempt):
                if c.running and not c.paused:
                    engine.pause(c.id)

    def _thaw(self, s: Session, row: JobRow, d: Resume | Pack) -> None:
        """Let the job run on its GPUs: thaw its containers, or start it anew if they are gone."""
        nodes = job_nodes(s, row.id)
        found = {n.name: self.site.containers(n, row.id, row.attempt) for n in nodes}
        if all(found.values()):
            for node in nodes:
                for c in found[node.name]:
                    if c.paused:
                        self.site.engine(node).unpause(c.id)
        else:
            self.site.kill(nodes, row.id)
            row.attempt += 1
            self.site.start(s, row, job_gpus(s, row.id))
        set_state(s, row, "RUNNING", d.reason)
        if isinstance(d, Pack):
            with_ = [self.snap.job_ids[j] for j in d.with_jobs if j in self.snap.job_ids]
            text = f"job {row.id} packed with job(s) {', '.join(map(str, with_))}: {d.reason}"
            events.record(s, "job.pack", text, job_id=row.id, data={"with": with_})
        else:
            events.record(s, "job.resume", f"job {row.id} resumed: {d.reason}", job_id=row.id)

    def _move(self, d: Migrate | Grow | Shrink | Requeue | Pack) -> None:
        """A checkpoint move: recorded, then carried through (see :mod:`gctl.daemon.moves`)."""
        with transaction(self.site.store.engine, write=True) as s:
            row = self._row(s, d.job_id)
            if isinstance(d, Requeue):
                moves.begin(s, row, "requeue", (), mode="exclusive", reason=d.reason)
            else:
                dst = d.dst if isinstance(d, Migrate) else d.gpus
                kind = _MOVE_KINDS.get(type(d), "pack")
                moves.begin(s, row, kind, dst, mode=self._mode(d.job_id), reason=d.reason)
            row_id = row.id
        moves.finish(self.site, row_id)

    def _refused(self, d: Decision, why: str) -> None:
        """A host refused: the job waits again, with the host's words as its reason."""
        job_id = getattr(d, "job_id", None)
        if job_id is None or job_id not in self.snap.job_ids:
            return
        with transaction(self.site.store.engine, write=True) as s:
            row = s.get(JobRow, self.snap.job_ids[job_id])
            if row is None:
                return
            if isinstance(d, Place):  # containers it got on other nodes go
                names = {n for n, _ in d.gpus}
                self.site.kill(s.scalars(select(NodeRow).where(NodeRow.name.in_(names))), row.id)
                s.execute(delete(AllocationRow).where(AllocationRow.job_id == row.id))
                row.reason = f"start failed: {why}"
            events.record(s, "job.error", f"job {row.id}: {why}", job_id=row.id)


class _Records:
    """The store writes of one batch of decisions, gathered in order and written in bulk.

    The same rows :func:`gctl.services.jobs.set_state` and
    :func:`gctl.services.events.record` write one at a time: each job's new
    state and reason, its history, its allocations and an event per decision,
    all stamped with the batch's time.
    """

    def __init__(self, snap: Snapshot, at: float) -> None:
        self.snap = snap
        self.at = at
        self.updates: dict[int, dict[str, Any]] = {}
        self.allocations: list[dict[str, Any]] = []
        self.history: list[dict[str, Any]] = []
        self.events: list[events.NewEvent] = []

    def add(self, d: Batched) -> None:
        """Gather what ``d`` writes; a later decision on the same job overrides an earlier."""
        job = self.snap.job_ids[d.job_id]
        if isinstance(d, Queue):
            self._job(job, new_reason=d.reason)
            return
        if isinstance(d, Place):
            to, ids = moves.where(d.gpus), self.snap.gpu_ids
            self.allocations += [
                {"job_id": job, "gpu_id": ids[ref], "mode": d.mode.value, "since": self.at}
                for ref in d.gpus
            ]
            self._job(job, started_at=self.at)
            self._state(job, "RUNNING", d.reason)
            text = f"job {job} on {to}: {d.reason}"
            self.events.append(events.NewEvent("job.place", text, job_id=job, data={"to": to}))
            return
        self._state(job, "SUSPENDED", d.reason)
        self.events.append(
            events.NewEvent(
                "job.unpack" if isinstance(d, Unpack) else "job.suspend",
                f"job {job} suspended (freeze): {d.reason}",
                job_id=job,
                data={"mechanism": "freeze"},
            )
        )

    def _job(self, job: int, **values: Any) -> None:
        self.updates.setdefault(job, {}).update(values)

    def _state(self, job: int, state: str, reason: str) -> None:
        self._job(job, new_state=state, new_reason=reason)
        self.history.append({"job_id": job, "state": state, "at": self.at, "reason": reason})

    def write(self, s: Session) -> None:
        """Write everything gathered in the caller's transaction, a statement per table."""
        conn = s.connection()
        by_keys: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for job, values in self.updates.items():
            by_keys.setdefault(tuple(sorted(values)), []).append({"row_id": job, **values})
        for keys, params in by_keys.items():
            conn.execute(_job_update(keys), params)
        if self.allocations:
            conn.execute(insert(AllocationRow), self.allocations)
        if self.history:
            conn.execute(insert(JobStateRow), self.history)
        events.record_many(s, self.events, at=self.at)


def _job_update(keys: tuple[str, ...]) -> Update:
    """An UPDATE of one job (``row_id``) setting the columns its parameter ``keys`` name.

    ``started_at`` is a placement: the job's first start time and its
    mechanism are set unless already known.
    """
    values: dict[Any, Any] = {}
    if "new_state" in keys:
        values[JobRow.state] = bindparam("new_state")
    if "new_reason" in keys:
        values[JobRow.reason] = bindparam("new_reason")
    if "started_at" in keys:
        values[JobRow.start_time] = func.coalesce(
            JobRow.start_time, bindparam("started_at", type_=Double())
        )
        values[JobRow.mechanism] = func.coalesce(JobRow.mechanism, MECHANISM_FREEZE)
    return update(JobRow).where(JobRow.id == bindparam("row_id")).values(values)
