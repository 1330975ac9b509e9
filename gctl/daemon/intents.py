"""Operator intents (``gctl cancel/suspend/resume/requeue/migrate``) carried out by the daemon.

Each pending intent is taken in the order it was recorded, carried out, and
marked ``done`` or ``failed`` with the result in words (also an event).

- cancel: the job's containers are killed and it ends CANCELLED; with
  ``--signal`` the signal is only delivered, as ``scancel --signal`` does.
- suspend: the job checkpoints and exits, giving its GPUs back, and stays
  SUSPENDED until resumed. A job that cannot checkpoint (it does not use the
  job SDK) is refused: freezing it would hold its GPUs indefinitely.
- resume: an operator-suspended job goes back to the queue and restarts from
  its checkpoint as soon as GPUs are free.
- requeue: checkpoint, back to the queue (``--hold``: REQUEUE_HOLD).
- migrate: checkpoint and restart on ``--to NODE[:GPUS]`` (free GPUs there),
  or without ``--to`` on the free GPUs the scheduler would choose.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gctl.core.placement import free_set, node_set
from gctl.daemon import lease, moves
from gctl.daemon.jobfiles import Mirror, mirror_dir
from gctl.daemon.site import Site, job_gpus, job_nodes
from gctl.hosts.ssh import HostError, Pool
from gctl.services import events
from gctl.services.db import Store
from gctl.services.jobs import set_state
from gctl.services.queue import FINISHED
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, IntentRow, JobRow, now
from gctl.store.snapshot import MECHANISM_CHECKPOINT, read


class Refused(Exception):
    """An intent that cannot be carried out, with why."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one intent."""

    intent_id: int
    kind: str
    job_id: int | None
    status: str
    result: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form with stable keys."""
        return asdict(self)


def carry_out(site: Site) -> list[Outcome]:
    """Carry out every pending intent, oldest first; what became of each."""
    with transaction(site.store.engine, write=False) as s:
        pending = s.execute(
            select(IntentRow.id, IntentRow.kind, IntentRow.job_id, IntentRow.args, IntentRow.user)
            .where(IntentRow.status == "pending")
            .order_by(IntentRow.id)
        ).all()
    out: list[Outcome] = []
    for intent_id, kind, job_id, args, user in pending:
        try:
            result = _one(site, kind, job_id, dict(args or {}), user)
            status = "done"
        except (Refused, HostError) as exc:
            result, status = str(exc), "failed"
        with transaction(site.store.engine, write=True) as s:
            intent = s.get(IntentRow, intent_id)
            if intent is not None:
                intent.status, intent.result, intent.done_at = status, result, now()
            events.record(s, f"intent.{status}", f"{kind} of job {job_id}: {result}", job_id=job_id)
        out.append(Outcome(intent_id, kind, job_id, status, result))
    return out


def carry_out_unless_a_daemon_runs(
    store: Store, state_dir: Path | None = None
) -> list[Outcome] | None:
    """Carry out pending intents here when no daemon holds the store; None when one does.

    The lease is held meanwhile, so a daemon started now waits its turn.
    """
    try:
        lease.acquire(store)
    except lease.LeaseHeld:
        return None
    mirror = Mirror(mirror_dir(state_dir))
    try:
        with Pool() as pool:
            site = Site(store, pool, mirror)
            try:
                return carry_out(site)
            finally:
                site.close()
    finally:
        lease.release(store)


def _one(site: Site, kind: str, job_id: int | None, args: dict[str, object], user: str) -> str:
    if job_id is None:
        raise Refused(f"{kind}: no job given")
    with transaction(site.store.engine, write=True) as s:
        row = s.get(JobRow, job_id)
        if row is None or row.state in FINISHED:
            raise Refused(f"job {job_id} has already finished")
        if row.op is not None:
            raise Refused(f"job {job_id} is being moved ({row.op['kind']}); try again")
        if kind == "cancel":
            return _cancel(site, s, row, args, user)
        if kind == "resume":
            return _resume(s, row, user)
        if kind in ("suspend", "requeue", "migrate"):
            if kind != "requeue" and row.mechanism != MECHANISM_CHECKPOINT:
                raise Refused(
                    f"job {job_id} cannot checkpoint (it does not use the gctl job SDK),"
                    f" so it cannot be {'suspended' if kind == 'suspend' else 'moved'};"
                    " it can only take turns by time slicing"
                )
            if not job_gpus(s, job_id):
                raise Refused(f"job {job_id} is {row.state} and holds no GPUs")
            dst = _target(site.store, s, row, args.get("to")) if kind == "migrate" else []
            why = f"{kind} asked by {user}"
            moves.begin(
                s,
                row,
                kind,
                dst,
                mode="exclusive",
                reason=why,
                user=user,
                hold=bool(args.get("hold")),
            )
    return moves.finish(site, job_id)


def _cancel(site: Site, s: Session, row: JobRow, args: dict[str, object], user: str) -> str:
    signal = args.get("signal")
    nodes = job_nodes(s, row.id)
    if signal:
        for node in nodes:
            engine = site.engine(node)
            for c in site.containers(node, row.id, row.attempt):
                engine.kill(c.id, str(signal))
        return f"signal {signal} sent"
    missed = site.kill(nodes, row.id)
    s.execute(delete(AllocationRow).where(AllocationRow.job_id == row.id))
    row.held = False
    set_state(s, row, "CANCELLED", f"cancelled by {user}")
    site.mirror.drop(row.id)
    if missed:
        return f"cancelled; node(s) {', '.join(missed)} did not answer (reconcile removes the rest)"
    return "cancelled"


def _resume(s: Session, row: JobRow, user: str) -> str:
    if row.state != "SUSPENDED" or not row.held:
        raise Refused(f"job {row.id} was not suspended by an operator; it resumes at its turn")
    row.held = False
    set_state(s, row, "PENDING", f"resumed by {user}; restarts from its checkpoint")
    return "back in the queue; restarts from its checkpoint"


def _target(store: Store, s: Session, row: JobRow, to: object) -> list[tuple[str, int]]:
    """Free GPUs for the job to move to, as many as it holds.

    ``to`` is what ``--to NODE[:GPUS]`` named, or None (no ``--to``): then
    the scheduler picks as for a job of that size (Gandiva's choice among
    free GPUs, which the job's own are not), within one node unless the job
    is larger than any.
    """
    count = len(job_gpus(s, row.id))
    snap = read(store.engine, now=now())
    if not to:
        state = snap.state
        found = free_set(state, count, span=count > state.max_size)
        if found is None:
            raise Refused(f"no {count} free GPU(s) for job {row.id} to move to; try again later")
        return list(found)
    name, _, listed = str(to).partition(":")
    ns = snap.state.nodes.get(name)
    if ns is None or not ns.open:
        raise Refused(f"node {name} is not up")
    if listed:
        wanted = sorted(int(i) for i in listed.split(","))
        if len(wanted) != count:
            raise Refused(f"job {row.id} holds {count} GPU(s); --to names {len(wanted)}")
        busy = [i for i in wanted if not ns.free_mask >> i & 1]
        if busy:
            raise Refused(f"GPU(s) {','.join(map(str, busy))} of {name} are not free")
        return [(name, i) for i in wanted]
    chosen = node_set(ns, count)
    if chosen is None:
        raise Refused(f"node {name} has no {count} free GPU(s)")
    return list(chosen)
