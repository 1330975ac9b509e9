"""Reconcile: make the hosts match the store, level-triggered, at start and periodically.

The store says which attempt of which job runs on which GPUs; each node's
containers of this store, as a trustworthy observation found them
(:meth:`gctl.daemon.watch.Watch.trusted`), are compared with it, and what
must change is done in the background (:mod:`gctl.daemon.inflight`):

- moves a daemon left half done are finished first (:mod:`gctl.daemon.moves`);
- a container of a job's current attempt that the store does not know
  about (a daemon died between starting it and recording it) is *adopted*
  when its GPUs are free: its allocation is recorded and the job runs on;
- any other container the store does not account for (old attempts, ended
  or cancelled jobs, jobs requeued while their node was down or cut off) is
  removed; a node that comes back is reconciled before it gets new work;
- a container frozen while its job should run is thawed, and one running
  while its job is suspended is frozen;
- a job the store has running whose container vanished (deleted by hand,
  or the host rebooted) restarts from its checkpoint as a new attempt.

Nothing is ever started twice: a container's name carries the job and
attempt, and the engine refuses a second container of the same name.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session

from gctl.core.model import GpuRef
from gctl.daemon import moves
from gctl.daemon.inflight import Inflight
from gctl.daemon.site import Launch, Site, job_gpus, job_nodes
from gctl.daemon.watch import Watch
from gctl.hosts.engine import ContainerState
from gctl.services import events
from gctl.services.jobs import set_state
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, GpuRow, JobRow, NodeRow, now
from gctl.store.snapshot import MECHANISM_FREEZE

CHUNK = 50
"""Nodes reconciled in one write transaction: one lease check and one commit for all of them
(one transaction per node took 2.8 s of a tick at 100 nodes on PostgreSQL)."""


@dataclass
class Report:
    """What one reconcile did (host actions started in the background)."""

    moves_resumed: list[int] = field(default_factory=list)
    adopted: list[int] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    thawed: list[int] = field(default_factory=list)
    frozen: list[int] = field(default_factory=list)
    restarted: list[int] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)


def reconcile(
    site: Site, watch: Watch, inflight: Inflight, names: Collection[str] | None = None
) -> Report:
    """Compare the store with the nodes' trustworthy observations and fix the difference.

    ``names`` limits it to those nodes (default: every node observed). A
    node reconciled is no longer *unreconciled* (:class:`Watch`). Moves
    left pending by a daemon that died are carried on in the background.
    """
    out = Report()
    busy = inflight.busy_jobs
    with transaction(site.store.engine, write=False) as s:
        pending = s.execute(select(JobRow.id, JobRow.op).where(JobRow.op.is_not(None))).all()
        nodes = {r.name: r for r in s.scalars(select(NodeRow))}
    for job_id, op in pending:
        if job_id in busy:
            continue
        gpus = [(str(n), int(i)) for n, i in (op or {}).get("src", []) + (op or {}).get("dst", [])]
        inflight.submit(
            f"finishing job {job_id}'s {op.get('kind') if op else 'move'}",
            partial(moves.finish, site, job_id),
            jobs=[job_id],
            gpus=gpus,
        )
        out.moves_resumed.append(job_id)
    todo: list[tuple[NodeRow, list[ContainerState]]] = []
    for name in sorted(watch.latest if names is None else names):
        seen = watch.trusted(name)
        if seen is not None and name in nodes:
            todo.append((nodes[name], list(seen.containers)))
    for first in range(0, len(todo), CHUNK):
        chunk = todo[first : first + CHUNK]
        with transaction(site.store.engine, write=True) as s:
            held = _held_on(s, [node.id for node, _ in chunk])
            ids = {c.job_id for _, found in chunk for c in found if c.job_id is not None}
            ids.update(job_id for jobs in held.values() for job_id in jobs)
            s.scalars(select(JobRow).where(JobRow.id.in_(sorted(ids)))).all()  # s.get's, at once
            for node, found in chunk:
                _node(site, inflight, s, node, found, held.get(node.id, {}), out)
        for node, _ in chunk:
            watch.unreconciled.discard(node.name)
            out.nodes.append(node.name)
    return out


def _node(
    site: Site,
    inflight: Inflight,
    s: Session,
    node: NodeRow,
    containers: list[ContainerState],
    held: dict[int, str],
    out: Report,
) -> None:
    """Reconcile one node's ``containers`` with the jobs ``held`` on its GPUs, in ``s``."""
    busy = inflight.busy_jobs
    present: set[int] = set()
    for c in containers:
        job_id = c.job_id
        if job_id in busy:
            continue
        row = s.get(JobRow, job_id) if job_id is not None else None
        if row is None or c.attempt != row.attempt or row.op is not None:
            if row is None or row.op is None:
                _remove(site, inflight, s, node, c, row, out)
            continue
        if row.id in held:
            present.add(row.id)
            if c.exit_code is not None:
                continue  # ended: gctl.daemon.ends records it
            if row.state == "RUNNING" and c.paused:
                _act(site, inflight, node, c, "unpause")
                out.thawed.append(row.id)
            elif row.state == "SUSPENDED" and not c.paused:
                _act(site, inflight, node, c, "pause")
                out.frozen.append(row.id)
        elif row.state == "PENDING" and c.running and _adopt(s, node, row, c):
            present.add(row.id)
            out.adopted.append(row.id)
        else:
            _remove(site, inflight, s, node, c, row, out)
    for job_id, state in held.items():
        if job_id not in present and job_id not in busy and state == "RUNNING":
            row = s.get(JobRow, job_id)
            assert row is not None
            if row.op is None:
                _restart(site, inflight, s, row)
                out.restarted.append(job_id)


def _held_on(s: Session, node_ids: list[int]) -> dict[int, dict[int, str]]:
    """By node id, the jobs holding GPUs of each of ``node_ids``, with their state."""
    rows = s.execute(
        select(GpuRow.node_id, JobRow.id, JobRow.state)
        .join(AllocationRow, AllocationRow.job_id == JobRow.id)
        .join(GpuRow, GpuRow.id == AllocationRow.gpu_id)
        .where(GpuRow.node_id.in_(node_ids))
        .distinct()
    ).all()
    out: dict[int, dict[int, str]] = {}
    for node_id, job_id, state in rows:
        out.setdefault(node_id, {})[job_id] = state
    return out


def _gpus(node: NodeRow, c: ContainerState) -> list[GpuRef]:
    return [(node.name, i) for i in c.gpu_indices]


def _remove(
    site: Site,
    inflight: Inflight,
    s: Session,
    node: NodeRow,
    c: ContainerState,
    row: JobRow | None,
    out: Report,
) -> None:
    """Remove a container the store does not account for (forced: a running one is killed).

    One still running gets a ``job.stray`` event, in ``s``: most often an
    attempt requeued while its node was away, which ran until now beside
    the job's current attempt (the watchdog there should have killed it).
    """
    inflight.submit(
        f"removing stale container {c.name} on {node.name}",
        lambda: site.remove(node, c),
        jobs=[c.job_id] if c.job_id is not None else [],
        gpus=_gpus(node, c),
    )
    out.removed.append(c.name)
    if not (c.running or c.paused):
        return
    if row is None:
        text = f"container {c.name} on {node.name} still running, of no job in the store; removed"
    else:
        text = (
            f"job {row.id}: attempt {c.attempt} still running on {node.name}, the job is at "
            f"attempt {row.attempt} ({row.state}); removed"
        )
    data = {"container": c.name, "attempt": c.attempt, "started_at": c.started_at}
    events.record(s, "job.stray", text, job_id=row.id if row else None, node=node.name, data=data)


def _act(site: Site, inflight: Inflight, node: NodeRow, c: ContainerState, how: str) -> None:
    """Freeze or thaw a container whose state disagrees with its job's."""
    engine = site.engine(node)
    action = engine.unpause if how == "unpause" else engine.pause
    inflight.submit(
        f"{how} of {c.name} on {node.name}",
        partial(action, c.id),
        jobs=[c.job_id] if c.job_id is not None else [],
        gpus=_gpus(node, c),
    )


def _adopt(s: Session, node: NodeRow, row: JobRow, c: ContainerState) -> bool:
    """Record a running container of the job's current attempt the store lost track of."""
    indices = c.gpu_indices
    if len(indices) != row.gpus:
        return False  # a part of a job spanning nodes: removed and placed again instead
    # ``node`` was read in an earlier session: its GPUs are read in this one.
    gpus = s.scalars(
        select(GpuRow).where(GpuRow.node_id == node.id, GpuRow.index.in_(indices))
    ).all()
    taken = s.scalar(
        select(AllocationRow.id).where(AllocationRow.gpu_id.in_([g.id for g in gpus])).limit(1)
    )
    if len(gpus) != len(indices) or taken is not None:
        return False
    at = now()
    s.add_all(AllocationRow(job_id=row.id, gpu_id=g.id, mode="exclusive", since=at) for g in gpus)
    row.start_time = row.start_time or at
    row.mechanism = row.mechanism or MECHANISM_FREEZE
    set_state(s, row, "RUNNING", "adopted: found running after a daemon restart")
    where = f"{node.name}:{','.join(map(str, indices))}"
    events.record(s, "job.adopt", f"job {row.id} adopted on {where}", job_id=row.id)
    return True


def _restart(site: Site, inflight: Inflight, s: Session, row: JobRow) -> None:
    """A running job whose container vanished starts again from its checkpoint (next attempt).

    The new attempt is recorded here; its start runs in the background.
    """
    nodes, gpus = job_nodes(s, row.id), job_gpus(s, row.id)
    row.attempt += 1
    launch = Launch.of(row)
    text = f"job {row.id}: container gone; restarted from its checkpoint (attempt {row.attempt})"
    events.record(s, "job.restart", text, job_id=row.id)

    def start() -> None:
        site.kill(nodes, launch.id)
        with transaction(site.store.engine, write=False) as rs:
            site.start(rs, launch, gpus)

    inflight.submit(f"restart of job {row.id}", start, jobs=[row.id], gpus=gpus)
