"""The one place where scheduling decisions become host actions and store writes.

A decision is carried out on the hosts first (start a container, freeze or
thaw it) and recorded in the store after, in one transaction per decision,
so the store never claims a container that was not started. What a host
refuses is recorded as the job's reason and the job goes back to the queue.

This first part carries out the reactive decisions: ``Place`` (a container
per node the job spans, on exactly the chosen GPUs), ``Queue`` (the reason
the job waits), and the freeze mechanism of time slicing, ``Suspend`` and
``Resume`` (docker pause and unpause: the job keeps its GPU memory).
Checkpoint-based moves (migrate, pack, grow, shrink, requeue) come next.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gctl.core.decisions import Decision, Place, Queue, Resume, Suspend
from gctl.core.model import GpuRef
from gctl.hosts.engine import ContainerSpec, Engine
from gctl.hosts.mounts import Mount
from gctl.hosts.ssh import HostError, Pool
from gctl.services import events, hostops
from gctl.services.db import Store
from gctl.services.jobs import set_state
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, GpuRow, JobRow, NodeRow, now
from gctl.store.snapshot import Snapshot


@dataclass
class Applied:
    """What one batch of decisions did: carried out, and refused by a host."""

    done: list[Decision] = field(default_factory=list)
    failed: list[tuple[Decision, str]] = field(default_factory=list)


class Applier:
    """Carries out decisions for one snapshot of the store, over one SSH pool."""

    def __init__(self, store: Store, pool: Pool, snap: Snapshot) -> None:
        self.store = store
        self.pool = pool
        self.snap = snap
        self._engines: dict[str, Engine] = {}

    def engine(self, s: Session, node: str) -> Engine:
        """The node's engine, made once per applier."""
        if node not in self._engines:
            row = s.get(NodeRow, self.snap.node_ids[node])
            if row is None:
                raise HostError(node, "node removed from the store")
            self._engines[node] = hostops.engine(self.pool, row)
        return self._engines[node]

    def apply(self, decisions: list[Decision]) -> Applied:
        """Carry out ``decisions`` in order; a refused one is reported, the rest go on."""
        out = Applied()
        for d in decisions:
            try:
                self._one(d)
            except HostError as exc:
                self._refused(d, str(exc))
                out.failed.append((d, str(exc)))
            else:
                out.done.append(d)
        return out

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
        with transaction(self.store.engine, write=True) as s:
            for alloc in s.scalars(select(AllocationRow).where(AllocationRow.job_id.in_(want))):
                if alloc.mode != want[alloc.job_id]:
                    alloc.mode = want[alloc.job_id]

    def close(self) -> None:
        """Close the engines' channels (the pool's connections stay)."""
        for engine in self._engines.values():
            engine.close()

    def _row(self, s: Session, job_id: str) -> JobRow:
        row = s.get(JobRow, self.snap.job_ids[job_id])
        if row is None:
            raise HostError("-", f"job {job_id} removed from the store")
        return row

    def _one(self, d: Decision) -> None:
        with transaction(self.store.engine, write=True) as s:
            if isinstance(d, Place):
                self._place(s, d)
            elif isinstance(d, Queue):
                row = self._row(s, d.job_id)
                row.reason = d.reason
            elif isinstance(d, Suspend | Resume):
                self._freeze(s, d)
            else:
                raise HostError("-", f"{type(d).__name__} is not carried out yet")

    def _place(self, s: Session, d: Place) -> None:
        row = self._row(s, d.job_id)
        by_node: dict[str, list[int]] = defaultdict(list)
        for node, index in d.gpus:
            by_node[node].append(index)
        gpu_rows = {
            (node, index): s.get(GpuRow, self.snap.gpu_ids[(node, index)]) for node, index in d.gpus
        }
        for node, indices in by_node.items():
            node_row = s.get(NodeRow, self.snap.node_ids[node])
            assert node_row is not None
            gpus = [gpu_rows[(node, i)] for i in indices]
            self.engine(s, node).start(
                ContainerSpec(
                    job_id=row.id,
                    attempt=row.attempt,
                    node=node,
                    image=row.image,
                    command=tuple(row.command),
                    gpu_indices=tuple(indices),
                    gpu_uuids=tuple(g.uuid or f"GPU-{node}-{g.index}" for g in gpus if g),
                    job_dir=hostops.job_dir(node_row, row.id),
                    emulated=node_row.emulated,
                    env=dict(row.env),
                    mounts=tuple(Mount(**m) for m in row.mounts),
                    cpuset=hostops.cpuset([g for g in gpus if g]),
                    gpu_mem_mb=row.gpu_mem_mb,
                )
            )
        at = now()
        for gpu in gpu_rows.values():
            assert gpu is not None
            s.add(AllocationRow(job_id=row.id, gpu_id=gpu.id, mode=d.mode.value, since=at))
        row.start_time = row.start_time or at
        set_state(s, row, "RUNNING", d.reason)
        events.record(
            s, "job.place", f"job {row.id} on {_where(d.gpus)}: {d.reason}", job_id=row.id
        )

    def _freeze(self, s: Session, d: Suspend | Resume) -> None:
        row = self._row(s, d.job_id)
        for node in {n for n, _ in self.snap.state.jobs[d.job_id].gpus}:
            engine = self.engine(s, node)
            for c in engine.owned(row.id):
                if c.running:
                    (engine.pause if isinstance(d, Suspend) else engine.unpause)(c.id)
        state = "SUSPENDED" if isinstance(d, Suspend) else "RUNNING"
        set_state(s, row, state, d.reason)
        kind = "job.suspend" if isinstance(d, Suspend) else "job.resume"
        events.record(s, kind, f"job {row.id} {state.lower()}: {d.reason}", job_id=row.id)

    def _refused(self, d: Decision, why: str) -> None:
        """A host refused: the job waits again, with the host's words as its reason."""
        job_id = getattr(d, "job_id", None)
        if job_id is None or job_id not in self.snap.job_ids:
            return
        with transaction(self.store.engine, write=True) as s:
            row = s.get(JobRow, self.snap.job_ids[job_id])
            if row is None:
                return
            if isinstance(d, Place):
                s.execute(delete(AllocationRow).where(AllocationRow.job_id == row.id))
                row.reason = f"start failed: {why}"
            events.record(s, "job.error", f"job {row.id}: {why}", job_id=row.id)


def _where(gpus: tuple[GpuRef, ...]) -> str:
    nodes: dict[str, list[str]] = defaultdict(list)
    for node, index in gpus:
        nodes[node].append(str(index))
    return " ".join(f"{n}:{','.join(i)}" for n, i in nodes.items())
