"""Reconcile: make the hosts match the store, level-triggered, at start and periodically.

The store says which attempt of which job runs on which GPUs; each
answering node's gctl containers are compared with it:

- moves a daemon left half done are finished first (:mod:`gctl.daemon.moves`);
- a container of a job's current attempt that the store does not know
  about (a daemon died between starting it and recording it) is *adopted*
  when its GPUs are free: its allocation is recorded and the job runs on;
- any other container the store does not account for (old attempts, ended
  or cancelled jobs, jobs requeued while their node was down) is removed;
- a container frozen while its job should run is thawed, and one running
  while its job is suspended is frozen;
- a job the store has running whose container vanished (deleted by hand,
  or the host rebooted) restarts from its checkpoint as a new attempt.

Nothing is ever started twice: a container's name carries the job and
attempt, and the engine refuses a second container of the same name.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from gctl.daemon import moves
from gctl.daemon.site import Launch, Site, job_gpus, job_nodes
from gctl.hosts.engine import ContainerState, Engine
from gctl.hosts.ssh import HostError, fan_out
from gctl.services import events, hostops
from gctl.services.jobs import set_state
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, GpuRow, JobRow, NodeRow, now
from gctl.store.snapshot import MECHANISM_FREEZE


@dataclass
class Report:
    """What one reconcile did."""

    moves_finished: list[int] = field(default_factory=list)
    adopted: list[int] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    thawed: list[int] = field(default_factory=list)
    frozen: list[int] = field(default_factory=list)
    restarted: list[int] = field(default_factory=list)


def reconcile(site: Site) -> Report:
    """Compare the store with every answering node's containers and fix the difference."""
    out = Report()
    with transaction(site.store.engine, write=False) as s:
        pending_ops = list(s.scalars(select(JobRow.id).where(JobRow.op.is_not(None))))
    for job_id in pending_ops:
        with contextlib.suppress(HostError):
            moves.finish(site, job_id)
            out.moves_finished.append(job_id)
    with transaction(site.store.engine, write=False) as s:
        nodes = {r.name: r for r in s.scalars(select(NodeRow).where(NodeRow.admin_state != "down"))}
    seen = fan_out(
        [hostops.target(r) for r in nodes.values()], lambda t: site.engine(nodes[t.node]).owned()
    )
    for name, got in seen.items():
        if not isinstance(got, HostError):
            _node(site, nodes[name], got, out)
    return out


def _node(site: Site, node: NodeRow, containers: list[ContainerState], out: Report) -> None:
    engine = site.engine(node)
    with transaction(site.store.engine, write=True) as s:
        held = _held_here(s, node)
        present: set[int] = set()
        for c in containers:
            job_id = c.job_id
            row = s.get(JobRow, job_id) if job_id is not None else None
            if row is None or c.attempt != row.attempt or row.op is not None:
                if row is None or row.op is None:
                    _remove(engine, c, out)
                continue
            if row.id in held:
                present.add(row.id)
                if c.exit_code is not None:
                    continue  # ended: finish_exited records it
                if row.state == "RUNNING" and c.paused:
                    engine.unpause(c.id)
                    out.thawed.append(row.id)
                elif row.state == "SUSPENDED" and not c.paused:
                    engine.pause(c.id)
                    out.frozen.append(row.id)
            elif row.state == "PENDING" and c.running and _adopt(s, node, row, c):
                present.add(row.id)
                out.adopted.append(row.id)
            else:
                _remove(engine, c, out)
        for job_id, state in held.items():
            if job_id not in present and state == "RUNNING":
                row = s.get(JobRow, job_id)
                assert row is not None
                if row.op is None and _restart(site, s, row):
                    out.restarted.append(job_id)


def _held_here(s: Session, node: NodeRow) -> dict[int, str]:
    """Jobs holding GPUs of ``node``, with their state."""
    rows = s.execute(
        select(JobRow.id, JobRow.state)
        .join(AllocationRow, AllocationRow.job_id == JobRow.id)
        .join(GpuRow, GpuRow.id == AllocationRow.gpu_id)
        .where(GpuRow.node_id == node.id)
        .distinct()
    ).all()
    return {job_id: state for job_id, state in rows}


def _remove(engine: Engine, c: ContainerState, out: Report) -> None:
    with contextlib.suppress(HostError):
        engine.remove(c.id)  # forced: a running one is killed first
        out.removed.append(c.name)


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


def _restart(site: Site, s: Session, row: JobRow) -> bool:
    """A running job whose container vanished starts again from its checkpoint."""
    try:
        site.kill(job_nodes(s, row.id), row.id)
        row.attempt += 1
        site.start(s, Launch.of(row), job_gpus(s, row.id))
    except HostError as exc:
        row.reason = f"restart failed: {exc}"
        return False
    events.record(
        s,
        "job.restart",
        f"job {row.id}: container gone; restarted from its checkpoint (attempt {row.attempt})",
        job_id=row.id,
    )
    return True
