"""Accounting, as Slurm's sacct and sreport: finished jobs, where they ran, and their GPU-hours.

A job is listed when it is finished (:data:`~gctl.services.queue.FINISHED`)
and its end time falls in the window asked, ``[start, end)``. For each:

- *nodes*: every node it held a GPU on, as one Slurm hostlist;
- *GPUs*: the most GPUs it held at one time;
- *elapsed*: the seconds it was running (``RUNNING`` or ``COMPLETING`` by
  its state history); time suspended does not count, as in Slurm;
- *GPU-hours*: each interval it held a GPU, counted only while the job was
  running (:mod:`gctl.store.usage`). A job keeps its GPUs while frozen for
  time slicing, and two time-sliced jobs share a GPU: each is charged for
  its own turns only. Jobs packed side by side both run, and are both
  charged for the GPU in full.

Jobs that ended before the store kept allocation history (schema 0009) have
none: their GPUs are the ones they asked for, their GPU-hours those GPUs
over their running time, and their nodes unknown.

:func:`summary` totals the listing per user and UTC month; a job counts,
with all its GPU-hours, in the month it ended (the month of the end time
that put it in the window).

Who is listed, as sacct does: the caller's own jobs, every user's for an
operator (:mod:`gctl.services.access`), or the users named; anyone may ask
for every user's (the queue shows every job to everyone). The store is
read as ``gctl queue`` reads it (:mod:`gctl.services.reader`): on a SQLite
store, without SQLAlchemy (``bench/acct.py`` times 100,000 jobs).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from gctl import config
from gctl.identity import Who, who
from gctl.services import hostlists
from gctl.services.errors import ServiceError
from gctl.services.queue import FINISHED, STATE_CODES, parse_states
from gctl.services.reader import Reader
from gctl.store.usage import gpu_seconds, most_at_once, stretches

_FIELDS = 'id, name, "user", state, exit_code, submit_time, start_time, end_time, gpus'


class Usage(NamedTuple):
    """One finished job as ``gctl acct`` lists it (module docstring: what each figure means).

    A named tuple, not a frozen dataclass: made 100,000 at a time, it is
    five times quicker to build.
    """

    id: int
    name: str
    user: str
    state: str
    exit_code: int | None
    submit_time: float
    start_time: float | None
    end_time: float
    nodes: str
    gpus: int
    elapsed: float
    gpu_hours: float

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys; times as UTC datetimes (``emit_json`` writes ISO 8601)."""
        when = datetime.fromtimestamp
        return {
            "id": self.id,
            "name": self.name,
            "user": self.user,
            "state": self.state,
            "state_code": STATE_CODES[self.state],
            "exit_code": self.exit_code,
            "submit_time": when(self.submit_time, UTC),
            "start_time": None if self.start_time is None else when(self.start_time, UTC),
            "end_time": when(self.end_time, UTC),
            "nodes": self.nodes,
            "gpus": self.gpus,
            "elapsed_s": self.elapsed,
            "gpu_hours": self.gpu_hours,
        }


@dataclass(frozen=True, slots=True)
class Total:
    """One user's finished jobs and GPU-hours in one UTC month (``YYYY-MM``)."""

    user: str
    month: str
    jobs: int
    gpu_hours: float

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys."""
        return dataclasses.asdict(self)


def caller(reader: Reader) -> Who:
    """The user running the command, as :func:`gctl.services.access.caller` has them.

    Asked here without that module, which loads SQLAlchemy: a SQLite store
    (read with ``?`` placeholders) is opened by operators only, its file's
    permissions being the boundary.
    """
    me = who(config.site_policy().admin_group)
    return dataclasses.replace(me, operator=True) if reader.mark == "?" else me


def whose(me: Who, users: set[str] | None, *, all_users: bool) -> set[str] | None:
    """The users to list (None: every one): those named, else all or the caller's, as sacct."""
    if users:
        return users
    return None if all_users or me.operator else {me.name}


def finished_states(text: str) -> set[str]:
    """``-s``: states or codes (:func:`~gctl.services.queue.parse_states`), finished ones only."""
    asked = parse_states(text)
    if asked == set(STATE_CODES):  # "all"
        return set(FINISHED)
    others = sorted(asked - FINISHED)
    if others:
        raise ServiceError(
            f"{others[0]} is not a finished state; accounting lists " + ", ".join(sorted(FINISHED))
        )
    return asked


def finished(
    reader: Reader,
    *,
    start: float,
    end: float,
    users: set[str] | None = None,
    states: set[str] | None = None,
) -> list[Usage]:
    """Finished jobs that ended in ``[start, end)``, of these users and states, by end time.

    Three plain queries (the jobs, their state history, their allocation
    history), grouped here by job: for 100,000 jobs, building the driver's
    tuples is most of the time, and SQL that pairs the rows up runs slower.
    Jobs are chosen by their end time alone, so that SQLite reads them by
    its index however many jobs ended before (only a finished job has an
    end time); the states asked are kept here.
    """
    wanted = states or FINISHED
    where = f"WHERE end_time >= {reader.mark} AND end_time < {reader.mark}"
    params: list[object] = [start, end]
    if users:
        where += f' AND "user" IN ({reader.marks(len(users))})'
        params += sorted(users)
    chosen = f"SELECT id FROM jobs {where}"
    jobs = reader.rows(f"SELECT {_FIELDS} FROM jobs {where} ORDER BY end_time, id", params)
    ran: dict[int, list[tuple[float, float]]] = {}
    for job_id, begun, ended in stretches(
        reader.rows(
            f"SELECT job_id, state, at FROM job_states WHERE job_id IN ({chosen})"
            " ORDER BY job_id, at, id",
            params,
        )
    ):
        ran.setdefault(job_id, []).append((begun, ended))
    held: dict[int, list[tuple[float, float]]] = {}
    on: dict[int, set[str]] = {}
    for job_id, node, since, until in reader.rows(
        f"SELECT job_id, node, since, until FROM allocation_history WHERE job_id IN ({chosen})",
        params,
    ):
        held.setdefault(job_id, []).append((since, until))
        on.setdefault(job_id, set()).add(node)
    lists: dict[frozenset[str], str] = {}
    out = []
    for job_id, name, user, state, code, submitted, started, ended, asked in jobs:
        if state not in wanted:
            continue
        running = ran.get(job_id, ())
        elapsed = sum([b - a for a, b in running])
        intervals = held.get(job_id)
        if intervals:
            names = frozenset(on[job_id])
            nodes = lists.get(names)
            if nodes is None:
                nodes = lists[names] = hostlists.collect(names)
            gpus = most_at_once(intervals)
            hours = gpu_seconds(intervals, running) / 3600
        else:  # never held a GPU, or ended before the history was kept
            nodes, gpus = "", asked if running else 0
            hours = gpus * elapsed / 3600
        out.append(
            Usage(
                job_id,
                name,
                user,
                state,
                code,
                submitted,
                started,
                ended,
                nodes,
                gpus,
                elapsed,
                hours,
            )
        )
    return out


def summary(rows: Iterable[Usage]) -> list[Total]:
    """Jobs and GPU-hours per user and UTC month of their end, by user then month (sreport)."""
    totals: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        year, month = time.gmtime(row.end_time)[:2]
        total = totals.setdefault((row.user, f"{year:04d}-{month:02d}"), [0, 0.0])
        total[0] += 1
        total[1] += row.gpu_hours
    return [
        Total(user, month, int(count), hours)
        for (user, month), (count, hours) in sorted(totals.items())
    ]
