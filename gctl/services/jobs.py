"""Job use cases: submit (one or a batch), the queue, show, and operator actions.

States use Slurm's names and codes. What needs a running job to be touched
(suspend, resume, requeue, migrate, cancel of a running job) is recorded as
an intent for the daemon, and the caller is told so; what only changes the
queue (cancel or hold of a pending job, release) happens at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Select, insert, select
from sqlalchemy.orm import Session

from gctl.services import events
from gctl.services.db import Store
from gctl.services.errors import NotFound, ServiceError
from gctl.services.specs import JobRequest
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

STATE_CODES: dict[str, str] = {
    "PENDING": "PD",
    "RUNNING": "R",
    "SUSPENDED": "S",
    "STOPPED": "ST",
    "COMPLETING": "CG",
    "COMPLETED": "CD",
    "FAILED": "F",
    "CANCELLED": "CA",
    "PREEMPTED": "PR",
    "TIMEOUT": "TO",
    "REQUEUED": "RQ",
    "REQUEUE_HOLD": "RH",
}
"""Slurm job state names and their squeue codes."""

FINISHED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})
ON_GPUS = frozenset({"RUNNING", "SUSPENDED", "STOPPED", "COMPLETING"})


def parse_states(text: str) -> set[str]:
    """``-t`` filter: comma-separated state names or codes, any case (``all`` for every one)."""
    by_code = {code: name for name, code in STATE_CODES.items()}
    out: set[str] = set()
    for part in text.split(","):
        word = part.strip().upper()
        if word == "ALL":
            return set(STATE_CODES)
        name = by_code.get(word, word)
        if name not in STATE_CODES:
            raise ServiceError(f"-t {part.strip()!r}: unknown job state")
        out.add(name)
    return out


@dataclass(slots=True)
class JobView:
    """A job as ``gctl queue`` and ``gctl show job`` present it.

    Not frozen: ``gctl queue`` builds 100,000 of these, and a frozen
    dataclass's ``__init__`` costs twice as much.
    """

    id: int
    name: str
    user: str
    state: str
    gpus: int
    priority: str
    submit_time: float
    start_time: float | None
    end_time: float | None
    reason: str | None
    held: bool
    nodes: tuple[str, ...]

    @property
    def code(self) -> str:
        """The squeue state code."""
        return STATE_CODES[self.state]

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys; times as UTC datetimes (``emit_json`` writes ISO 8601)."""
        return {
            "id": self.id,
            "name": self.name,
            "user": self.user,
            "state": self.state,
            "state_code": STATE_CODES[self.state],
            "gpus": self.gpus,
            "priority": self.priority,
            "submit_time": utc(self.submit_time),
            "start_time": utc(self.start_time),
            "end_time": utc(self.end_time),
            "nodes": self.nodes,
            "reason": self.reason,
            "held": self.held,
        }


@dataclass(frozen=True, slots=True)
class JobDetail:
    """Everything stored about one job: spec, where it runs, history and events."""

    view: JobView
    spec: dict[str, Any]
    allocations: tuple[tuple[str, int, str], ...]
    history: tuple[tuple[float, str, str | None], ...]
    intents: tuple[tuple[int, str, str], ...]
    runtime: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys; times as UTC datetimes (``emit_json`` writes ISO 8601)."""
        return {
            **self.view.to_dict(),
            "spec": self.spec,
            "allocations": [{"node": n, "gpu": i, "mode": m} for n, i, m in self.allocations],
            "history": [
                {"at": utc(at), "state": st, "reason": why} for at, st, why in self.history
            ],
            "intents": [{"id": i, "kind": k, "status": st} for i, k, st in self.intents],
            "runtime": self.runtime,
        }


def _row_values(req: JobRequest, user: str, at: float) -> dict[str, Any]:
    return {
        "name": req.name or (req.command[0].rsplit("/", 1)[-1] if req.command else "job"),
        "user": user,
        "image": req.image,
        "command": list(req.command),
        "env": dict(req.env),
        "mounts": [asdict(m) for m in req.mounts],
        "gpus": req.gpus,
        "priority": req.priority,
        "job_class": req.job_class,
        "elastic_min": req.elastic[0] if req.elastic else None,
        "elastic_max": req.elastic[1] if req.elastic else None,
        "gpu_mem_mb": req.gpu_mem_mb,
        "datasets": list(req.datasets),
        "profile": req.profile,
        "state": "PENDING",
        "held": False,
        "restarts": 0,
        "attempt": 0,
        "submit_time": at,
    }


def submit(store: Store, requests: Iterable[JobRequest]) -> list[int]:
    """Store new pending jobs in one transaction; their ids, in order.

    All or nothing: the requests are fully checked before anything is written.
    """
    reqs = list(requests)
    if not reqs:
        return []
    user = events.current_user()
    at = now()
    values = [_row_values(r, user, at) for r in reqs]
    with transaction(store.engine, write=True) as s:
        ids = list(
            s.scalars(insert(JobRow).returning(JobRow.id, sort_by_parameter_order=True), values)
        )
        s.execute(
            insert(JobStateRow),
            [{"job_id": i, "state": "PENDING", "at": at, "reason": "submitted"} for i in ids],
        )
        s.execute(
            insert(EventRow),
            [
                {
                    "at": at,
                    "user": user,
                    "kind": "job.submit",
                    "job_id": i,
                    "node": None,
                    "message": f"job {i} submitted: {r.gpus} GPU(s), {r.image}",
                    "data": {},
                }
                for i, r in zip(ids, reqs, strict=True)
            ],
        )
    return ids


def queue(
    store: Store,
    *,
    users: set[str] | None = None,
    states: set[str] | None = None,
    nodes: set[str] | None = None,
) -> list[JobView]:
    """Jobs by id; by default those not finished (like squeue)."""
    wanted = states or (set(STATE_CODES) - FINISHED)
    q = select(
        JobRow.id,
        JobRow.name,
        JobRow.user,
        JobRow.state,
        JobRow.gpus,
        JobRow.priority,
        JobRow.submit_time,
        JobRow.start_time,
        JobRow.end_time,
        JobRow.reason,
        JobRow.held,
    ).where(JobRow.state.in_(sorted(wanted)))
    if users:
        q = q.where(JobRow.user.in_(sorted(users)))
    if nodes:
        q = q.where(JobRow.id.in_(_on_nodes(nodes)))
    q = q.order_by(JobRow.id)
    with transaction(store.engine, write=False) as s:
        rows = s.connection().execute(q).all()
        placed = _nodes_of(s, wanted)
    empty: tuple[str, ...] = ()
    # One comprehension, no per-row branching: this is the hot loop of a
    # 100,000-job queue.
    return [JobView(*row, placed.get(row[0], empty)) for row in rows]


def _on_nodes(names: set[str]) -> Select[int]:
    """Ids of the jobs holding GPUs on any of these nodes."""
    return (
        select(AllocationRow.job_id)
        .join(GpuRow, AllocationRow.gpu_id == GpuRow.id)
        .join(NodeRow, GpuRow.node_id == NodeRow.id)
        .where(NodeRow.name.in_(sorted(names)))
    )


def _nodes_of(s: Session, states: set[str]) -> dict[int, tuple[str, ...]]:
    """Nodes each job with GPUs holds, for the states asked."""
    if not states & ON_GPUS:
        return {}
    rows = s.execute(
        select(AllocationRow.job_id, NodeRow.name)
        .join(GpuRow, AllocationRow.gpu_id == GpuRow.id)
        .join(NodeRow, GpuRow.node_id == NodeRow.id)
        .order_by(AllocationRow.job_id, NodeRow.name)
    ).all()
    out: dict[int, dict[str, None]] = {}
    for job_id, name in rows:
        out.setdefault(job_id, {})[name] = None
    return {j: tuple(n) for j, n in out.items()}


def show_job(store: Store, job_id: int) -> JobDetail:
    """One job with its spec, GPUs, history and open intents."""
    with transaction(store.engine, write=False) as s:
        row = _get(s, job_id)
        allocs = s.execute(
            select(NodeRow.name, GpuRow.index, AllocationRow.mode)
            .join(GpuRow, AllocationRow.gpu_id == GpuRow.id)
            .join(NodeRow, GpuRow.node_id == NodeRow.id)
            .where(AllocationRow.job_id == job_id)
            .order_by(NodeRow.name, GpuRow.index)
        ).all()
        hist = s.execute(
            select(JobStateRow.at, JobStateRow.state, JobStateRow.reason)
            .where(JobStateRow.job_id == job_id)
            .order_by(JobStateRow.id)
        ).all()
        intents = s.execute(
            select(IntentRow.id, IntentRow.kind, IntentRow.status)
            .where(IntentRow.job_id == job_id)
            .order_by(IntentRow.id)
        ).all()
        nodes = tuple(dict.fromkeys(n for n, _, _ in allocs))
        return JobDetail(
            view=_view(row, nodes),
            spec={
                "image": row.image,
                "command": row.command,
                "env": row.env,
                "mounts": row.mounts,
                "gpus": row.gpus,
                "priority": row.priority,
                "class": row.job_class,
                "elastic": [row.elastic_min, row.elastic_max] if row.elastic_min else None,
                "gpu_mem_mb": row.gpu_mem_mb,
                "datasets": row.datasets,
                "profile": row.profile,
            },
            allocations=tuple((n, i, m) for n, i, m in allocs),
            history=tuple((a, st, why) for a, st, why in hist),
            intents=tuple((i, k, st) for i, k, st in intents),
            runtime={
                "mechanism": row.mechanism,
                "attempt": row.attempt,
                "restarts": row.restarts,
                "operation": row.op,
            },
        )


def _view(row: JobRow, nodes: tuple[str, ...]) -> JobView:
    return JobView(
        row.id,
        row.name,
        row.user,
        row.state,
        row.gpus,
        row.priority,
        row.submit_time,
        row.start_time,
        row.end_time,
        row.reason,
        row.held,
        nodes,
    )


def _get(s: Session, job_id: int) -> JobRow:
    row = s.get(JobRow, job_id)
    if row is None:
        raise NotFound(f"unknown job {job_id}")
    return row


def set_state(s: Session, row: JobRow, state: str, reason: str) -> None:
    """Move a job to ``state`` in the caller's transaction, keeping its history."""
    at = now()
    row.state = state
    row.reason = reason
    if state in FINISHED:
        row.end_time = at
    s.add(JobStateRow(job_id=row.id, state=state, at=at, reason=reason))


@dataclass(frozen=True, slots=True)
class ActionResult:
    """What an operator action did: at once, or recorded for the daemon."""

    job_id: int
    action: str
    done: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


_NEEDS_RUNNING = {
    "suspend": {"RUNNING"},
    "resume": {"SUSPENDED"},
    "requeue": {"RUNNING", "SUSPENDED"},
    "migrate": {"RUNNING", "SUSPENDED"},
}


def act(store: Store, job_id: int, action: str, **args: Any) -> ActionResult:
    """Carry out (or record for the daemon) ``cancel``, ``hold``, ``release``, ``suspend``, ...

    ``args`` are kept with the intent: ``signal`` for cancel, ``hold`` for
    requeue, ``to`` (``NODE[:GPUS]``) for migrate.
    """
    user = events.current_user()
    with transaction(store.engine, write=True) as s:
        row = _get(s, job_id)
        if row.state in FINISHED:
            raise ServiceError(f"job {job_id} already finished ({row.state})")
        result = _act(s, row, action, args, user)
        events.record(s, f"job.{action}", result.message, job_id=job_id, user=user, data=args)
        return result


def _act(s: Session, row: JobRow, action: str, args: dict[str, Any], user: str) -> ActionResult:
    jid = row.id
    if action == "cancel" and row.state == "PENDING":
        row.held = False
        set_state(s, row, "CANCELLED", f"cancelled by {user}")
        return ActionResult(jid, action, True, f"job {jid} cancelled")
    if action == "hold":
        if row.state != "PENDING":
            raise ServiceError(f"job {jid} is {row.state}; only pending jobs can be held")
        row.held = True
        row.reason = f"held by {user}"
        return ActionResult(jid, action, True, f"job {jid} held")
    if action == "release":
        if not row.held:
            raise ServiceError(f"job {jid} is not held")
        row.held = False
        if row.state == "REQUEUE_HOLD":
            set_state(s, row, "PENDING", f"released by {user}")
        else:
            row.reason = f"released by {user}"
        return ActionResult(jid, action, True, f"job {jid} released")
    if action == "migrate" and args.get("to"):
        _check_target(s, str(args["to"]))
    allowed = _NEEDS_RUNNING.get(action, {"RUNNING", "SUSPENDED", "STOPPED", "COMPLETING"})
    if action != "cancel" and row.state not in allowed:
        raise ServiceError(f"job {jid} is {row.state}; {action} needs {'/'.join(sorted(allowed))}")
    s.add(IntentRow(kind=action, job_id=jid, args=args, user=user))
    return ActionResult(jid, action, False, f"{action} of job {jid} recorded for the daemon")


def _check_target(s: Session, target: str) -> None:
    """``NODE[:GPU,GPU...]`` names a node that exists and GPUs it has."""
    name, _, gpus = target.partition(":")
    node = s.scalar(select(NodeRow).where(NodeRow.name == name))
    if node is None:
        raise NotFound(f"--to: unknown node {name!r}")
    if not gpus:
        return
    have = {g.index for g in node.gpus}
    for part in gpus.split(","):
        if not part.isdigit() or int(part) not in have:
            raise ServiceError(f"--to {target!r}: node {name} has no GPU {part!r}")
