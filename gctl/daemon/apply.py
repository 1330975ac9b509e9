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

from sqlalchemy import delete, select
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
from gctl.hosts.ssh import HostError
from gctl.services import events
from gctl.services.jobs import set_state
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, JobRow, NodeRow, now
from gctl.store.snapshot import MECHANISM_FREEZE, Snapshot

_MOVE_KINDS: dict[type, str] = {Migrate: "migrate", Grow: "grow", Shrink: "shrink"}
BATCH = 500
"""Decisions recorded per transaction."""
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
        :data:`BATCH`; moves and thaws are carried out one at a time.
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
        """Act on the hosts (no write lock held), then record the whole batch in one go."""
        if not batch:
            return
        started: list[tuple[Batched, float]] = []
        with transaction(self.site.store.engine, write=False) as s:
            rows = self._rows(s, batch)
            for d in batch:
                at = now()
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
        with transaction(self.site.store.engine, write=True) as s, s.no_autoflush:
            rows = self._rows(s, [d for d, _ in started])
            for d, _ in started:
                row = rows[self.snap.job_ids[d.job_id]]
                if isinstance(d, Place):
                    self._record_place(s, row, d)
                elif isinstance(d, Queue):
                    row.reason = d.reason
                else:
                    self._record_freeze(s, row, d)
                out.done.append(d)
        for d, at in started:
            self.observe(type(d).__name__.lower(), now() - at)

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
        with transaction(self.site.store.engine, write=True) as s:
            for alloc in s.scalars(select(AllocationRow).where(AllocationRow.job_id.in_(want))):
                if alloc.mode != want[alloc.job_id]:
                    alloc.mode = want[alloc.job_id]

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

    def _record_place(self, s: Session, row: JobRow, d: Place) -> None:
        at = now()
        for ref in d.gpus:
            gpu_id = self.snap.gpu_ids[ref]
            s.add(AllocationRow(job_id=row.id, gpu_id=gpu_id, mode=d.mode.value, since=at))
        row.start_time = row.start_time or at
        row.mechanism = row.mechanism or MECHANISM_FREEZE
        set_state(s, row, "RUNNING", d.reason)
        text = f"job {row.id} on {moves.where(d.gpus)}: {d.reason}"
        events.record(s, "job.place", text, job_id=row.id, data={"to": moves.where(d.gpus)})

    def _pause(self, s: Session, row: JobRow, job_id: str) -> None:
        """Freeze the job's running containers (it may have been placed in this very batch)."""
        if job_id in self._placed:
            names = {n for n, _ in self._placed[job_id]}
            nodes = [n for name, n in self._node_rows(s).items() if name in names]
        else:
            nodes = job_nodes(s, row.id)
        for node in nodes:
            engine = self.site.engine(node)
            for c in self.site.containers(node, row.id, row.attempt):
                if c.running and not c.paused:
                    engine.pause(c.id)

    @staticmethod
    def _record_freeze(s: Session, row: JobRow, d: Suspend | Unpack) -> None:
        set_state(s, row, "SUSPENDED", d.reason)
        events.record(
            s,
            "job.unpack" if isinstance(d, Unpack) else "job.suspend",
            f"job {row.id} suspended (freeze): {d.reason}",
            job_id=row.id,
            data={"mechanism": "freeze"},
        )

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
