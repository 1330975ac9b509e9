"""The job queue as ``gctl queue`` lists it, and Slurm's names and codes for job states.

The queue is read with SQLAlchemy Core alone, through the few columns named
below, not through the mapped classes of :mod:`gctl.store.models`: loading
the ORM and configuring its mappers would cost ``gctl queue`` a tenth of its
time. The tests run these statements against SQLite and PostgreSQL stores
made by the migrations, so a renamed column cannot go unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection, Select, column, select, table

from gctl.services.db import Store
from gctl.services.errors import ServiceError

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

_JOBS = table(
    "jobs",
    column("id"),
    column("name"),
    column("user"),
    column("state"),
    column("gpus"),
    column("priority"),
    column("submit_time"),
    column("start_time"),
    column("end_time"),
    column("reason"),
    column("held"),
)
_ALLOCATIONS = table("allocations", column("job_id"), column("gpu_id"))
_GPUS = table("gpus", column("id"), column("node_id"))
_NODES = table("nodes", column("id"), column("name"))


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


@dataclass(frozen=True, slots=True)
class JobColumns:
    """Jobs as ``gctl queue`` lists them, in id order: one list per field of a job.

    Columns rather than an object per job: for 100,000 jobs a dozen lists are
    quicker to build and to print, and the cyclic garbage collector, which
    would scan 100,000 objects again and again while they are made, has
    nothing to scan.
    """

    id: list[int]
    name: list[str]
    user: list[str]
    state: list[str]
    gpus: list[int]
    priority: list[str]
    submit_time: list[float]
    start_time: list[float | None]
    end_time: list[float | None]
    reason: list[str | None]
    held: list[bool]
    nodes: list[tuple[str, ...]]

    def __len__(self) -> int:
        return len(self.id)

    @property
    def code(self) -> list[str]:
        """The squeue state codes."""
        return [STATE_CODES[state] for state in self.state]

    def to_dicts(self) -> list[dict[str, Any]]:
        """Each job's JSON form, stable keys; times as UTC datetimes (written as ISO 8601)."""
        when = datetime.fromtimestamp
        return [
            {
                "id": job_id,
                "name": name,
                "user": user,
                "state": state,
                "state_code": STATE_CODES[state],
                "gpus": gpus,
                "priority": priority,
                "submit_time": when(submitted, UTC),
                "start_time": None if started is None else when(started, UTC),
                "end_time": None if ended is None else when(ended, UTC),
                "nodes": nodes,
                "reason": reason,
                "held": held,
            }
            for (
                job_id,
                name,
                user,
                state,
                gpus,
                priority,
                submitted,
                started,
                ended,
                reason,
                held,
                nodes,
            ) in zip(
                self.id,
                self.name,
                self.user,
                self.state,
                self.gpus,
                self.priority,
                self.submit_time,
                self.start_time,
                self.end_time,
                self.reason,
                self.held,
                self.nodes,
                strict=True,
            )
        ]


def queue(
    store: Store,
    *,
    users: set[str] | None = None,
    states: set[str] | None = None,
    nodes: set[str] | None = None,
) -> JobColumns:
    """Jobs by id; by default those not finished (like squeue)."""
    wanted = states or (set(STATE_CODES) - FINISHED)
    job = _JOBS.c
    q = select(
        job.id,
        job.name,
        job.user,
        job.state,
        job.gpus,
        job.priority,
        job.submit_time,
        job.start_time,
        job.end_time,
        job.reason,
        job.held,
    ).where(job.state.in_(sorted(wanted)))
    if users:
        q = q.where(job.user.in_(sorted(users)))
    if nodes:
        q = q.where(job.id.in_(_on_nodes(nodes)))
    with store.engine.begin() as conn:  # a read: SQLite's BEGIN stays deferred
        # The driver's own tuples, not SQLAlchemy rows: for 100,000 jobs its
        # Row objects cost more than the query, and they are objects the
        # garbage collector keeps scanning.
        rows = conn.execute(q).cursor.fetchall()
        placed = _nodes_of(conn, wanted)
    # Sorted here, not by ORDER BY: SQLite reads the (state, id) index one state
    # at a time and would pass every row through a temporary B-tree to sort
    # them, where merging those already sorted runs here takes a few ms.
    rows = sorted(rows, key=itemgetter(0))
    columns = {
        key: list(map(itemgetter(i), rows)) for i, key in enumerate(q.selected_columns.keys())
    }
    columns["held"] = list(map(bool, columns["held"]))  # 0 and 1 on SQLite
    empty: tuple[str, ...] = ()
    return JobColumns(**columns, nodes=[placed.get(i, empty) for i in columns["id"]])


def _on_nodes(names: set[str]) -> Select[Any]:
    """Ids of the jobs holding GPUs on any of these nodes."""
    return (
        select(_ALLOCATIONS.c.job_id)
        .join(_GPUS, _ALLOCATIONS.c.gpu_id == _GPUS.c.id)
        .join(_NODES, _GPUS.c.node_id == _NODES.c.id)
        .where(_NODES.c.name.in_(sorted(names)))
    )


def _nodes_of(conn: Connection, states: set[str]) -> dict[int, tuple[str, ...]]:
    """Nodes each job with GPUs holds, for the states asked."""
    if not states & ON_GPUS:
        return {}
    rows = conn.execute(
        select(_ALLOCATIONS.c.job_id, _NODES.c.name)
        .join(_GPUS, _ALLOCATIONS.c.gpu_id == _GPUS.c.id)
        .join(_NODES, _GPUS.c.node_id == _NODES.c.id)
        .order_by(_ALLOCATIONS.c.job_id, _NODES.c.name)
    ).all()
    out: dict[int, dict[str, None]] = {}
    for job_id, name in rows:
        out.setdefault(job_id, {})[name] = None
    return {j: tuple(n) for j, n in out.items()}
