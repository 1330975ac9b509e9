"""Operator intents (``gctl cancel/suspend/resume/requeue/migrate``) carried out by the daemon.

Each pending intent is taken in the order it was recorded, carried out, and
marked ``done`` or ``failed`` with the result in words (also an event). Its
store side is done by the tick; its host work runs in the background
(``running`` meanwhile), so a host that hangs delays only its own intents.

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

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gctl.config import site_policy
from gctl.core.placement import free_set, node_set
from gctl.daemon import lease, moves
from gctl.daemon.ends import end_now
from gctl.daemon.inflight import Inflight
from gctl.daemon.jobfiles import mirror_dir
from gctl.daemon.site import Site, job_gpus, job_nodes
from gctl.hosts.ssh import HostError, Pool
from gctl.services import events
from gctl.services.db import Store
from gctl.services.jobs import set_state
from gctl.services.queue import FINISHED
from gctl.store.engine import transaction
from gctl.store.models import IntentRow, JobRow, now
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


Started = Callable[[], str]
"""Host work an intent still needs (run in the background); returns the result in words."""


def carry_out(site: Site, inflight: Inflight, outcomes: list[Outcome] | None = None) -> None:
    """Carry out every pending intent, oldest first, never waiting for a host.

    An intent's store side is done here; its host work (killing, signalling,
    a checkpoint move) runs in the background (:mod:`gctl.daemon.inflight`)
    and the intent is marked ``running`` meanwhile, then ``done`` or
    ``failed``. An intent on a job with work in flight waits its turn. Each
    outcome is appended to ``outcomes`` when given, as it is known.
    """
    busy = inflight.busy_jobs
    with transaction(site.store.engine, write=False) as s:
        pending = s.execute(
            select(
                IntentRow.id,
                IntentRow.kind,
                IntentRow.job_id,
                IntentRow.args,
                IntentRow.user,
                IntentRow.status,
            )
            .where(IntentRow.status.in_(("pending", "running")))
            .order_by(IntentRow.id)
        ).all()
    for intent_id, kind, job_id, args, user, status in pending:
        if job_id in busy:
            continue
        if status == "running":  # its work ended with a daemon that died: the move is finished
            _close(site, Outcome(intent_id, kind, job_id, "done", "carried through"), outcomes)
            continue
        try:
            result = _start(site, kind, job_id, dict(args or {}), user, intent_id)
        except (Refused, HostError) as exc:
            _close(site, Outcome(intent_id, kind, job_id, "failed", str(exc)), outcomes)
            continue
        if isinstance(result, str):
            _close(site, Outcome(intent_id, kind, job_id, "done", result), outcomes)
            continue
        work, gpus = result

        def done(future: Future[str], i: int = intent_id, k: str = kind, j: int = job_id) -> None:
            error = future.exception()
            if error is not None and not isinstance(error, HostError):
                raise error
            status, text = ("failed", str(error)) if error else ("done", future.result())
            _close(site, Outcome(i, k, j, status, text), outcomes)

        inflight.submit(f"{kind} of job {job_id}", work, jobs=[job_id], gpus=gpus, done=done)
        busy.add(job_id)


def _close(site: Site, outcome: Outcome, outcomes: list[Outcome] | None) -> None:
    """Mark an intent done or failed, with its result (also an event)."""
    with transaction(site.store.engine, write=True) as s:
        intent = s.get(IntentRow, outcome.intent_id)
        if intent is not None:
            intent.status, intent.result, intent.done_at = outcome.status, outcome.result, now()
        text = f"{outcome.kind} of job {outcome.job_id}: {outcome.result}"
        events.record(s, f"intent.{outcome.status}", text, job_id=outcome.job_id)
    if outcomes is not None:
        outcomes.append(outcome)


def carry_out_unless_a_daemon_runs(
    store: Store, state_dir: Path | None = None, *, wait: float = 120.0
) -> list[Outcome] | None:
    """Carry out pending intents here when no daemon holds the store; None when one does.

    The lease is held meanwhile, so a daemon started now waits its turn; the
    host work is waited for (up to ``wait`` seconds).
    """
    try:
        epoch = lease.acquire(store)
    except lease.LeaseHeld:
        return None
    out: list[Outcome] = []
    inflight = Inflight()
    try:
        with Pool() as pool:
            fenced = lease.fenced(store, epoch)
            site = Site(fenced, pool, mirror_dir(state_dir), epoch=epoch, policy=site_policy())
            try:
                carry_out(site, inflight, out)
                inflight.wait(wait)
                inflight.collect()
            finally:
                site.close()
    finally:
        inflight.close()
        lease.release(store, epoch)
    return out


def _start(
    site: Site, kind: str, job_id: int | None, args: dict[str, object], user: str, intent_id: int
) -> str | tuple[Started, list[tuple[str, int]]]:
    """Do an intent's store side; its result, or the host work it still needs and its GPUs."""
    if job_id is None:
        raise Refused(f"{kind}: no job given")
    with transaction(site.store.engine, write=True) as s:
        row = s.get(JobRow, job_id)
        if row is None or row.state in FINISHED:
            raise Refused(f"job {job_id} has already finished")
        if row.op is not None:
            raise Refused(f"job {job_id} is being moved ({row.op['kind']}); try again")
        gpus = job_gpus(s, job_id)
        intent = s.get(IntentRow, intent_id)
        if intent is not None:
            intent.status = "running"  # undone if this transaction fails
        if kind == "cancel":
            return _cancel(site, s, row, args, user), gpus
        if kind == "resume":
            return _resume(s, row, user)
        if kind not in ("suspend", "requeue", "migrate"):
            raise Refused(f"unknown intent {kind!r}")
        if kind != "requeue" and row.mechanism != MECHANISM_CHECKPOINT:
            raise Refused(
                f"job {job_id} cannot checkpoint (it does not use the gctl job SDK),"
                f" so it cannot be {'suspended' if kind == 'suspend' else 'moved'};"
                " it can only take turns by time slicing"
            )
        if not gpus:
            raise Refused(f"job {job_id} is {row.state} and holds no GPUs")
        dst = _target(site.store, s, row, args.get("to")) if kind == "migrate" else []
        why = f"{kind} asked by {user}"
        hold = bool(args.get("hold"))
        moves.begin(s, row, kind, dst, mode="exclusive", reason=why, user=user, hold=hold)
    return partial(moves.finish, site, job_id), gpus + list(dst)


def _cancel(site: Site, s: Session, row: JobRow, args: dict[str, object], user: str) -> Started:
    """Cancel in the store now (or note a signal); the killing (signalling) is host work."""
    signal = args.get("signal")
    if signal:
        nodes = job_nodes(s, row.id)
        attempt = row.attempt
        message = f"job {row.id}: signal {signal} sent by {user}"
        data = {"signal": str(signal), "attempt": attempt}
        events.record(s, "job.signal", message, job_id=row.id, user=user, data=data)

        def send() -> str:
            for node in nodes:
                engine = site.engine(node)
                for c in site.containers(node, row.id, attempt):
                    engine.kill(c.id, str(signal))
            return f"signal {signal} sent"

        return send
    row.held = False
    nodes = end_now(site, s, row, "CANCELLED", f"cancelled by {user}")
    job_id = row.id

    def kill() -> str:
        missed = site.kill(nodes, job_id)
        if missed:
            names = ", ".join(missed)
            return f"cancelled; node(s) {names} did not answer (reconcile removes the rest)"
        return "cancelled"

    return kill


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
