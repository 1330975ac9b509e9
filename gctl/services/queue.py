"""The job queue as ``gctl queue`` lists it, and Slurm's names and codes for job states.

The queue is read with plain SQL through a :class:`~gctl.services.reader.Reader`,
not through SQLAlchemy: on a SQLite store ``gctl queue`` then never imports
it, which is close to half a second of a 100,000-job listing. The SQL is
written for both SQLite and PostgreSQL (``"user"`` is quoted: PostgreSQL
reserves the word), and the tests run it against stores of both kinds made
by the migrations, so a renamed column cannot go unnoticed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from gctl.config import PRIORITIES
from gctl.services.errors import ServiceError
from gctl.services.reader import Reader, reading_store

if TYPE_CHECKING:
    from gctl.services.db import Store

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

_FIELDS = (
    "id",
    "name",
    "user",
    "state",
    "gpus",
    "priority",
    "submit_time",
    "start_time",
    "end_time",
    "reason",
    "held",
    "job_class",
    "time_limit",
)
_SELECT_JOBS = "SELECT " + ", ".join(f'"{f}"' for f in _FIELDS) + " FROM jobs"
_ALLOCATED = "FROM allocations a JOIN gpus g ON a.gpu_id = g.id JOIN nodes n ON g.node_id = n.id"


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
    job_class: list[str]
    time_limit: list[float | None]
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
                "class": job_class,
                "time_limit": time_limit,
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
                job_class,
                time_limit,
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
                self.job_class,
                self.time_limit,
                self.nodes,
                strict=True,
            )
        ]

    def sorted_by(self, keys: str, now: float) -> JobColumns:
        """The jobs in the order of squeue's ``-S``: field codes, each ``-`` for descending.

        ``keys`` is a comma list such as ``-p,i``; ties keep id order. A code
        that cannot sort is a ServiceError naming the ones that can.
        """
        order = list(range(len(self.id)))
        for part in reversed([k.strip() for k in keys.split(",") if k.strip()]):
            descending, code = part.startswith("-"), part.lstrip("+-")
            key = _SORT_KEYS.get(code)
            if key is None:
                known = " ".join(sorted(_SORT_KEYS))
                raise ServiceError(f"-S {part!r}: cannot sort by that (fields: {known})")
            column = key(self, now)
            order.sort(key=column.__getitem__, reverse=descending)
        return JobColumns(
            **{f.name: [getattr(self, f.name)[i] for i in order] for f in fields(self)}
        )


_LATEST = float("inf")
"""Where a job without the time sorts: after every job with one, as squeue sorts it."""


def _or_latest(values: list[float | None]) -> list[float]:
    return [_LATEST if v is None else v for v in values]


_SORT_KEYS: dict[str, Callable[[JobColumns, float], list[Any]]] = {
    "i": lambda j, now: j.id,
    "j": lambda j, now: j.name,
    "u": lambda j, now: j.user,
    "t": lambda j, now: j.state,
    "T": lambda j, now: j.state,
    "b": lambda j, now: j.gpus,
    "p": lambda j, now: [PRIORITIES.index(p) if p in PRIORITIES else 0 for p in j.priority],
    "q": lambda j, now: j.job_class,
    "V": lambda j, now: j.submit_time,
    "S": lambda j, now: _or_latest(j.start_time),
    "e": lambda j, now: _or_latest(j.end_time),
    "l": lambda j, now: _or_latest(j.time_limit),
    "M": lambda j, now: [
        0.0 if start is None else (end or now) - start
        for start, end in zip(j.start_time, j.end_time, strict=True)
    ],
    "N": lambda j, now: [",".join(n) for n in j.nodes],
    "D": lambda j, now: [len(n) for n in j.nodes],
}
"""How ``-S`` sorts by each field code: its column as sortable values."""


def queue(
    store: Store,
    *,
    users: set[str] | None = None,
    states: set[str] | None = None,
    nodes: set[str] | None = None,
    ids: set[int] | None = None,
) -> JobColumns:
    """Jobs by id; by default those not finished (like squeue). See :func:`listing`."""
    with reading_store(store) as reader:
        return listing(reader, users=users, states=states, nodes=nodes, ids=ids)


def matching(
    store: Store,
    ids: list[int],
    *,
    users: set[str] | None = None,
    states: set[str] | None = None,
    names: set[str] | None = None,
    nodes: set[str] | None = None,
) -> list[int]:
    """Jobs chosen as scancel chooses them: ``ids`` that match the filters.

    With no ids, every job (not finished, unless ``states`` says) that
    matches; with no filters, ``ids`` as given.
    """
    if not (users or states or names or nodes):
        return ids
    listed = queue(store, users=users, states=states, nodes=nodes)
    pairs = zip(listed.id, listed.name, strict=True)
    found = [i for i, n in pairs if not names or n in names]
    if not ids:
        return found
    asked = set(ids)
    return [i for i in found if i in asked]


def listing(
    reader: Reader,
    *,
    users: set[str] | None = None,
    states: set[str] | None = None,
    nodes: set[str] | None = None,
    ids: set[int] | None = None,
) -> JobColumns:
    """Jobs by id in the states asked, of these users, on these nodes, of these ids.

    By default the jobs not finished; with ``ids`` (squeue's ``-j``), those
    jobs in any state unless ``states`` says otherwise.
    """
    every = set(STATE_CODES) if ids else set(STATE_CODES) - FINISHED
    wanted = sorted(states or every)
    sql = f"{_SELECT_JOBS} WHERE state IN ({reader.marks(len(wanted))})"
    params: list[object] = [*wanted]
    if ids:
        sql += f" AND id IN ({reader.marks(len(ids))})"
        params += sorted(ids)
    if users:
        sql += f' AND "user" IN ({reader.marks(len(users))})'
        params += sorted(users)
    if nodes:
        on_nodes = f"SELECT a.job_id {_ALLOCATED} WHERE n.name IN ({reader.marks(len(nodes))})"
        sql += f" AND id IN ({on_nodes})"
        params += sorted(nodes)
    # The driver's own tuples, not SQLAlchemy rows or objects: for 100,000
    # jobs anything more per row costs more than the query itself.
    rows = reader.rows(sql, params)
    placed = _nodes_of(reader, set(wanted))
    # Sorted here, not by ORDER BY: SQLite reads the (state, id) index one state
    # at a time and would pass every row through a temporary B-tree to sort
    # them, where merging those already sorted runs here takes a few ms.
    rows.sort(key=itemgetter(0))
    columns = {key: list(map(itemgetter(i), rows)) for i, key in enumerate(_FIELDS)}
    columns["held"] = list(map(bool, columns["held"]))  # 0 and 1 on SQLite
    empty: tuple[str, ...] = ()
    return JobColumns(**columns, nodes=[placed.get(i, empty) for i in columns["id"]])


def _nodes_of(reader: Reader, states: set[str]) -> dict[int, tuple[str, ...]]:
    """Nodes each job with GPUs holds, for the states asked."""
    if not states & ON_GPUS:
        return {}
    out: dict[int, dict[str, None]] = {}
    for job_id, name in reader.rows(
        f"SELECT a.job_id, n.name {_ALLOCATED} ORDER BY a.job_id, n.name"
    ):
        out.setdefault(job_id, {})[name] = None
    return {j: tuple(n) for j, n in out.items()}
