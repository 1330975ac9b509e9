"""``gctl why``: why a job is where it is, from what the daemon recorded in the store.

Everything comes from the store, nothing from the hosts: the job's state and
latest reason, how it is suspended, the GPUs it holds and who shares them,
the move that brought it there, the operation the daemon is in the middle of,
operator intents still waiting for the daemon, and the job's recent events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gctl.daemon import lease
from gctl.services.db import Store
from gctl.services.errors import NotFound
from gctl.store.engine import transaction
from gctl.store.models import (
    AllocationRow,
    EventRow,
    GpuRow,
    IntentRow,
    JobRow,
    JobStateRow,
    NodeRow,
    now,
    utc,
)

RECENT = 10
"""How many of the job's latest events ``gctl why`` shows."""


@dataclass(frozen=True, slots=True)
class GpuUse:
    """One GPU the job holds, and how it shares it."""

    node: str
    index: int
    mode: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys."""
        return {"node": self.node, "gpu": self.index, "mode": self.mode}


@dataclass(frozen=True, slots=True)
class Move:
    """The migration that put the job on the GPUs it holds now, as its event says."""

    at: float
    src: str
    dst: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys; the time as a UTC datetime."""
        return {"at": utc(self.at), "from": self.src, "to": self.dst, "message": self.message}


@dataclass(frozen=True, slots=True)
class PendingIntent:
    """An operator's request for this job that the daemon has not carried out yet."""

    id: int
    kind: str
    user: str
    created_at: float
    args: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys; the time as a UTC datetime."""
        return {
            "id": self.id,
            "kind": self.kind,
            "user": self.user,
            "created_at": utc(self.created_at),
            "args": self.args,
        }


@dataclass(frozen=True, slots=True)
class Decision:
    """One recorded event of the job: a daemon decision or an operator action."""

    at: float
    kind: str
    user: str
    message: str
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys; the time as a UTC datetime."""
        return {
            "at": utc(self.at),
            "kind": self.kind,
            "user": self.user,
            "message": self.message,
            "data": self.data,
        }


@dataclass(frozen=True, slots=True)
class Why:
    """Why a job is in its state and where it runs, as ``gctl why`` shows it.

    ``since`` is when the job entered its current state (None when its history
    does not say). ``mechanism`` is how the daemon suspends the job, as
    recorded on it (``freeze``, or ``checkpoint`` for a job that checkpoints);
    ``suspended_by`` is how a suspended job is suspended now: ``freeze`` while
    it keeps its GPUs frozen (docker pause, GPU memory kept), ``checkpoint``
    once it checkpointed and exited (GPUs given back, or kept to wait for
    its turn when the jobs sharing them do not fit their memory at once).
    ``moved`` is set only while the job holds the GPUs a migration put it
    on; ``decisions`` are its latest events, oldest first.
    """

    job_id: int
    name: str
    user: str
    state: str
    reason: str | None
    held: bool
    since: float | None
    exit_code: int | None
    restarts: int
    mechanism: str | None
    suspended_by: str | None
    gpus: tuple[GpuUse, ...]
    shared_with: tuple[int, ...]
    moved: Move | None
    operation: dict[str, Any] | None
    pending_intents: tuple[PendingIntent, ...]
    decisions: tuple[Decision, ...]
    daemon: bool = True
    """Whether a daemon holds the store: without one, nothing the job waits for happens."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys; times as UTC datetimes (``emit_json`` writes ISO 8601)."""
        return {
            "job": self.job_id,
            "name": self.name,
            "user": self.user,
            "state": self.state,
            "reason": self.reason,
            "held": self.held,
            "since": utc(self.since),
            "exit_code": self.exit_code,
            "restarts": self.restarts,
            "mechanism": self.mechanism,
            "suspended_by": self.suspended_by,
            "gpus": [g.to_dict() for g in self.gpus],
            "shared_with": list(self.shared_with),
            "moved": self.moved.to_dict() if self.moved else None,
            "operation": self.operation,
            "pending_intents": [i.to_dict() for i in self.pending_intents],
            "decisions": [d.to_dict() for d in self.decisions],
            "daemon": self.daemon,
        }


def explain(store: Store, job_id: int) -> Why:
    """Everything the store says about why job ``job_id`` is where it is."""
    with transaction(store.engine, write=False) as s:
        row = s.get(JobRow, job_id)
        if row is None:
            raise NotFound(f"unknown job {job_id}")
        allocs = s.execute(
            select(
                AllocationRow.gpu_id,
                NodeRow.name,
                GpuRow.index,
                AllocationRow.mode,
                AllocationRow.since,
            )
            .join(GpuRow, AllocationRow.gpu_id == GpuRow.id)
            .join(NodeRow, GpuRow.node_id == NodeRow.id)
            .where(AllocationRow.job_id == job_id)
            .order_by(NodeRow.name, GpuRow.index)
        ).all()
        shared = s.scalars(
            select(AllocationRow.job_id)
            .where(AllocationRow.gpu_id.in_([gpu_id for gpu_id, *_ in allocs]))
            .where(AllocationRow.job_id != job_id)
            .distinct()
            .order_by(AllocationRow.job_id)
        ).all()
        last_state = s.execute(
            select(JobStateRow.state, JobStateRow.at)
            .where(JobStateRow.job_id == job_id)
            .order_by(JobStateRow.id.desc())
            .limit(1)
        ).first()
        intents = s.scalars(
            select(IntentRow)
            .where(IntentRow.job_id == job_id, IntentRow.status == "pending")
            .order_by(IntentRow.id)
        ).all()
        recent = s.scalars(
            select(EventRow)
            .where(EventRow.job_id == job_id, EventRow.kind != "job.submit")
            .order_by(EventRow.id.desc())
            .limit(RECENT)
        ).all()
        return Why(
            job_id=row.id,
            name=row.name,
            user=row.user,
            state=row.state,
            reason=row.reason,
            held=row.held,
            since=last_state.at if last_state and last_state.state == row.state else None,
            exit_code=row.exit_code,
            restarts=row.restarts,
            mechanism=row.mechanism,
            suspended_by=_suspended_by(s, job_id, bool(allocs))
            if row.state == "SUSPENDED"
            else None,
            gpus=tuple(GpuUse(node, index, mode) for _, node, index, mode, _ in allocs),
            shared_with=tuple(shared),
            moved=_move(s, job_id, max(a.since for a in allocs)) if allocs else None,
            operation=row.op,
            pending_intents=tuple(
                PendingIntent(i.id, i.kind, i.user, i.created_at, dict(i.args)) for i in intents
            ),
            decisions=tuple(
                Decision(e.at, e.kind, e.user, e.message, dict(e.data)) for e in reversed(recent)
            ),
            daemon=lease.held(s, now()),
        )


def _suspended_by(s: Session, job_id: int, holds_gpus: bool) -> str:
    """How a suspended job is suspended: as its latest suspend recorded, else by where it is.

    A job that gave its GPUs back was checkpointed; one that keeps them was
    frozen, unless its suspend says it waits its turn checkpointed.
    """
    data = s.scalar(
        select(EventRow.data)
        .where(EventRow.job_id == job_id, EventRow.kind.in_(("job.suspend", "job.unpack")))
        .order_by(EventRow.id.desc())
        .limit(1)
    )
    recorded = (data or {}).get("mechanism")
    if holds_gpus and recorded in ("freeze", "checkpoint"):
        return str(recorded)
    return "freeze" if holds_gpus else "checkpoint"


def _move(s: Session, job_id: int, since: float) -> Move | None:
    """The daemon's latest move of the job made when it took its newest GPU or later.

    Only the daemon's ``job.migrate`` events say where from; an operator's
    ``gctl migrate`` records one that only asks.
    """
    events = s.scalars(
        select(EventRow)
        .where(EventRow.job_id == job_id, EventRow.kind == "job.migrate", EventRow.at >= since)
        .order_by(EventRow.id.desc())
    )
    for e in events:
        if "from" in e.data:
            return Move(e.at, str(e.data["from"]), str(e.data.get("to", "?")), e.message)
    return None
