"""Checkpoint moves: a job checkpoints, exits, and is restarted elsewhere, or waits.

Migrate, grow, shrink, pack onto other GPUs, requeue, an operator's suspend
and a time-slice suspend by checkpoint (``slice``: the job waits for its
turn with its GPU memory given back, keeping its place) all go the same
way, in steps that can each be repeated, so a daemon killed at any point
finishes the move after its restart (:func:`finish` is called for every job
with a pending operation before anything is decided):

1. :func:`begin`, one transaction: the operation is written on the job
   (``JobRow.op``: kind, source and target GPUs, the attempt being
   replaced) and its allocations are switched to the target GPUs (none for
   requeue and suspend; a slice keeps its own as they are), so nothing else
   is placed there meanwhile. Target GPUs another job still holds are marked
   shared whatever mode the pass meant (:func:`gctl.daemon.site.share_gpus`):
   the decisions that would have left the job alone there may be waiting.
2. :func:`finish`: unless the next attempt already runs on the target (a
   restart caught after starting it), the old attempt's containers get
   SIGTERM (the job SDK checkpoints and exits) and are removed; the old
   attempt's job directory is copied into the daemon's mirror. A job that
   turns out to have finished is recorded as completed. Then the next
   attempt starts on the target, in a directory of its own seeded with that
   checkpoint (:meth:`gctl.daemon.site.Site.prepare`), and one transaction
   clears the operation; requeue, suspend and slice instead leave the job
   waiting.

Progress therefore continues from the last checkpoint, never from zero. A
source host that does not answer holds the move back (the job may still run
there) until it answers or is marked down; a down node is not contacted at
all (its watchdog stops the job there, :mod:`gctl.hosts.agent`), and the
mirror's last copy stands in for its job directory. A target that refuses
sends the job back to the queue. :func:`finish` runs off the daemon's tick
(:mod:`gctl.daemon.inflight`): it may wait a grace period for a checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from gctl.core.model import GpuRef
from gctl.daemon import jobfiles
from gctl.daemon.site import Launch, Site, job_gpus, share_gpus
from gctl.hosts.ssh import HostError
from gctl.services import events
from gctl.services.jobs import set_state
from gctl.store.allocations import close, release
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, GpuRow, JobRow, NodeRow, now

RESTART_KINDS = frozenset({"migrate", "grow", "shrink", "pack"})
"""Moves that restart the job on target GPUs at once."""
WAIT_KINDS = frozenset({"requeue", "suspend", "slice"})
"""Moves that leave the job waiting: queued, suspended by an operator, or for its turn."""
SUSPEND_KINDS = frozenset({"suspend", "slice"})
"""Moves that suspend the job by checkpoint (recorded as ``job.suspend`` events)."""


def where(gpus: Sequence[GpuRef]) -> str:
    """GPUs as ``node:i,j node2:k``."""
    nodes: dict[str, list[str]] = {}
    for node, index in sorted(gpus):
        nodes.setdefault(node, []).append(str(index))
    return " ".join(f"{n}:{','.join(i)}" for n, i in nodes.items()) or "-"


def begin(
    s: Session,
    row: JobRow,
    kind: str,
    dst: Sequence[GpuRef],
    *,
    mode: str,
    reason: str,
    user: str | None = None,
    hold: bool = False,
) -> None:
    """Record the move on the job and switch its allocations to ``dst`` (step 1)."""
    src = job_gpus(s, row.id)
    at = now()
    row.op = {
        "kind": kind,
        "src": [list(g) for g in src],
        "dst": [list(g) for g in dst],
        "attempt": row.attempt,
        "reason": reason,
        "hold": hold,
        "at": at,
    }
    row.reason = reason
    if kind == "slice":  # it keeps its GPUs and their mode; it goes to the end of the turns
        close(s, row.id, at)
    else:
        release(s, row.id, at)
    if dst and kind != "slice":
        ids = _gpu_ids(s, dst)
        s.add_all(AllocationRow(job_id=row.id, gpu_id=i, mode=mode, since=at) for i in ids)
        s.flush()
        share_gpus(s.connection(), ids, mode)
    data = {"from": where(src), "to": where(dst), "reason": reason}
    text = f"job {row.id} {kind}: {where(src)} -> {where(dst)}: {reason}"
    if kind in SUSPEND_KINDS:
        data["mechanism"] = "checkpoint"
        text = f"job {row.id} suspended (checkpoint): {reason}"
        kind = "suspend"
    events.record(s, f"job.{kind}", text, job_id=row.id, user=user, data=data)


def _gpu_ids(s: Session, refs: Sequence[GpuRef]) -> list[int]:
    want = {(str(n), int(i)) for n, i in refs}
    rows = s.execute(
        select(GpuRow.id, NodeRow.name, GpuRow.index).join(NodeRow, NodeRow.id == GpuRow.node_id)
    ).all()
    ids = [gid for gid, name, index in rows if (name, index) in want]
    if len(ids) != len(want):
        raise HostError("-", f"target GPUs {where(list(want))} are not all in the store")
    return ids


def finish(site: Site, job_id: int) -> str:
    """Carry a recorded move through (step 2); what became of the job, in words."""
    with transaction(site.store.engine, write=False) as s:
        row = s.get(JobRow, job_id)
        if row is None or row.op is None:
            return "no move pending"
        op: dict[str, Any] = dict(row.op)
        src_nodes = _nodes(s, op["src"])
        dst_nodes = _nodes(s, op["dst"])
    old, new = int(op["attempt"]), int(op["attempt"]) + 1
    kind = str(op["kind"])
    if kind in RESTART_KINDS and dst_nodes and _already_started(site, dst_nodes, job_id, new):
        return _done(site, job_id, op, "restarted (found running)")
    live = [n for n in src_nodes if n.admin_state != "down"]
    stopped = site.stop(live, job_id, old)
    if stopped.unreachable:  # the job may still run there: never start it twice
        raise HostError(stopped.unreachable[0], "cannot stop the job there; the move is retried")
    report = _take_checkpoint(site, live, job_id, old)
    if report is not None and report.finished and stopped.clean and stopped.exit_codes:
        return _completed(site, job_id)
    if kind in WAIT_KINDS:
        return _wait(site, job_id, op)
    try:
        with transaction(site.store.engine, write=True) as s:
            row = s.get(JobRow, job_id)
            assert row is not None
            row.attempt = new
            site.start(s, Launch.of(row), [tuple(g) for g in op["dst"]])
    except HostError as exc:
        return _requeue_instead(site, job_id, op, str(exc))
    return _done(site, job_id, op, "restarted from its checkpoint")


def _nodes(s: Session, refs: list[list[Any]]) -> list[NodeRow]:
    """The nodes of ``refs``, by name, with their GPUs loaded (used after the transaction)."""
    names = {str(n) for n, _ in refs}
    query = select(NodeRow).options(selectinload(NodeRow.gpus)).where(NodeRow.name.in_(names))
    return list(s.scalars(query.order_by(NodeRow.name)))


def _already_started(site: Site, nodes: list[NodeRow], job_id: int, attempt: int) -> bool:
    try:
        return all(site.containers(n, job_id, attempt) for n in nodes)
    except HostError:
        return False


def _take_checkpoint(
    site: Site, nodes: list[NodeRow], job_id: int, attempt: int
) -> jobfiles.Report | None:
    """Copy the attempt's directory from its first answering node into the mirror; its report.

    None when no node answers: the mirror's last copy stands in.
    """
    for node in nodes:
        try:
            return site.save(node, job_id, attempt)[1]
        except HostError:
            continue
    return None


def _completed(site: Site, job_id: int) -> str:
    with transaction(site.store.engine, write=True) as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        row.op = None
        row.exit_code = 0
        release(s, job_id, now())
        set_state(s, row, "COMPLETED", "exit 0 (finished while being moved)")
        events.record(s, "job.end", f"job {job_id} completed: exit 0", job_id=job_id)
    site.mirror.drop(job_id)
    return "completed"


def _wait(site: Site, job_id: int, op: dict[str, Any]) -> str:
    with transaction(site.store.engine, write=True) as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        row.op = None
        row.attempt = int(op["attempt"]) + 1
        reason = str(op["reason"])
        if op["kind"] == "slice":
            set_state(s, row, "SUSPENDED", reason)
            return "suspended at its checkpoint; its turn restarts it on its GPUs"
        if op["kind"] == "suspend":
            row.held = True
            set_state(s, row, "SUSPENDED", reason)
            return "suspended at its checkpoint; GPUs given back"
        row.restarts += 1
        row.held = bool(op.get("hold"))
        set_state(s, row, "REQUEUE_HOLD" if row.held else "PENDING", reason)
    return "requeued from its checkpoint"


def _done(site: Site, job_id: int, op: dict[str, Any], how: str) -> str:
    with transaction(site.store.engine, write=True) as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        row.op = None
        row.attempt = int(op["attempt"]) + 1
        set_state(s, row, "RUNNING", str(op["reason"]))
    return how


def _requeue_instead(site: Site, job_id: int, op: dict[str, Any], why: str) -> str:
    """The target refused: the job goes back to the queue, its checkpoint in the mirror."""
    with transaction(site.store.engine, write=True) as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        release(s, job_id, now())
        row.op = None
        # Past the attempt that may have started on some target nodes: reconcile removes those.
        row.attempt = int(op["attempt"]) + 2
        row.restarts += 1
        set_state(s, row, "PENDING", f"{op['kind']} failed, requeued: {why}")
        events.record(s, "job.error", f"job {job_id}: {op['kind']} failed: {why}", job_id=job_id)
    return f"requeued: {why}"
