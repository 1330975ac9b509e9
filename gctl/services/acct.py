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

These figures are worked out once, as the job finishes
(:func:`gctl.services.jobs.set_state`, its GPUs already released), and
kept in its ``jobs`` row (``run_seconds``, ``gpu_seconds``, ``gpus_held``,
``nodes_held``), as Slurm's job table keeps them: listing a job reads that
row alone. A job that finished before they were kept (or was ended by an
older daemon) has them worked out here the same way, from its state and
allocation history, at every listing.

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
from gctl.store.usage import Totals, stretches, totals

_FIELDS = (
    'id, name, "user", state, exit_code, submit_time, start_time, end_time,'
    " nodes_held, gpus_held, run_seconds, gpu_seconds, gpus"
)


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

    One plain query reads the jobs with the totals stored when they
    finished; only jobs without (module docstring) have theirs worked out,
    from their histories, read at the first such job (:class:`_Histories`).
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
    jobs = reader.rows(f"SELECT {_FIELDS} FROM jobs {where} ORDER BY end_time, id", params)
    past: _Histories | None = None
    out = []
    for job_id, name, user, state, code, submitted, started, ended, *kept in jobs:
        if state not in wanted:
            continue
        nodes, gpus, elapsed, used, asked = kept
        if elapsed is None:  # finished before its totals were kept
            past = past or _Histories(reader, f"{where} AND run_seconds IS NULL", params)
            nodes, (elapsed, used, gpus) = past.totals(job_id, asked)
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
                used / 3600,
            )
        )
    return out


class _Histories:
    """The state and allocation history of jobs without stored totals, to work them out.

    Read for all of them at once, as two plain queries grouped here by job:
    building the driver's tuples is most of the time, and SQL that pairs the
    rows up runs slower.
    """

    def __init__(self, reader: Reader, where: str, params: list[object]) -> None:
        chosen = f"SELECT id FROM jobs {where}"
        self.ran: dict[int, list[tuple[float, float]]] = {}
        for job_id, begun, ended in stretches(
            reader.rows(
                f"SELECT job_id, state, at FROM job_states WHERE job_id IN ({chosen})"
                " ORDER BY job_id, at, id",
                params,
            )
        ):
            self.ran.setdefault(job_id, []).append((begun, ended))
        self.held: dict[int, list[tuple[float, float]]] = {}
        self.on: dict[int, set[str]] = {}
        for job_id, node, since, until in reader.rows(
            "SELECT job_id, node, since, until FROM allocation_history"
            f" WHERE job_id IN ({chosen}) ORDER BY job_id, id",
            params,
        ):
            self.held.setdefault(job_id, []).append((since, until))
            self.on.setdefault(job_id, set()).add(node)
        self.lists: dict[frozenset[str], str] = {}

    def totals(self, job_id: int, asked: int) -> tuple[str, Totals]:
        """One job's nodes (a hostlist) and totals; ``asked``: the GPUs it asked for."""
        intervals = self.held.get(job_id, ())
        nodes = ""
        if intervals:
            names = frozenset(self.on[job_id])
            nodes = self.lists.get(names) or self.lists.setdefault(names, hostlists.collect(names))
        return nodes, totals(asked, self.ran.get(job_id, ()), intervals)


def summary(rows: Iterable[Usage]) -> list[Total]:
    """Jobs and GPU-hours per user and UTC month of their end, by user then month (sreport)."""
    sums: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        year, month = time.gmtime(row.end_time)[:2]
        total = sums.setdefault((row.user, f"{year:04d}-{month:02d}"), [0, 0.0])
        total[0] += 1
        total[1] += row.gpu_hours
    return [
        Total(user, month, int(count), hours)
        for (user, month), (count, hours) in sorted(sums.items())
    ]
