"""Time limits: a job that has run for its ``--time`` is asked to checkpoint, then stopped.

A job's limit counts the time it ran, as Slurm's does: stretches in a
running state from the job's state history, so turns it waited suspended
(time slicing, a checkpoint move) do not count. Each tick :func:`expired`
finds the running jobs past their limit; :func:`stop` ends each in the store
as ``TIMEOUT`` (its GPUs leave the job then) and, in the background, sends
its containers SIGTERM, which the job SDK answers with a checkpoint and a
clean exit, and kills them after the daemon's ``--grace`` (``docker stop``).
The GPUs stay out of new placements until the containers are gone. A daemon
killed in between leaves the containers of a finished job, which reconcile
removes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

from sqlalchemy import select

from gctl.daemon.ends import end_now
from gctl.daemon.inflight import Inflight
from gctl.daemon.site import Site, job_gpus
from gctl.services import events
from gctl.services.db import Store
from gctl.slurmtime import format_time_limit
from gctl.store.engine import transaction
from gctl.store.models import JobRow, JobStateRow
from gctl.store.usage import run_times


@dataclass(frozen=True, slots=True)
class Expired:
    """A running job past its time limit, as one look found it."""

    job_id: int
    attempt: int
    limit: float
    ran: float

    @property
    def reason(self) -> str:
        """The job's end reason."""
        return f"time limit {format_time_limit(self.limit)} reached"


def expired(store: Store, at: float, busy: Iterable[int] = ()) -> list[Expired]:
    """The running jobs with a time limit that have run past it by ``at``.

    A job with a move under way, or daemon work in flight, is left for the
    next tick.
    """
    skip = set(busy)
    with transaction(store.engine, write=False) as s:
        limited = {
            job_id: (attempt, limit)
            for job_id, attempt, limit in s.execute(
                select(JobRow.id, JobRow.attempt, JobRow.time_limit).where(
                    JobRow.state == "RUNNING",
                    JobRow.time_limit.is_not(None),
                    JobRow.op.is_(None),
                )
            )
            if job_id not in skip and limit is not None
        }
        if not limited:
            return []
        history = s.execute(
            select(JobStateRow.job_id, JobStateRow.state, JobStateRow.at)
            .where(JobStateRow.job_id.in_(sorted(limited)))
            .order_by(JobStateRow.job_id, JobStateRow.at, JobStateRow.id)
        ).all()
    ran = run_times(((j, st, t) for j, st, t in history), at)
    return [
        Expired(job_id, attempt, limit, ran[job_id])
        for job_id, (attempt, limit) in sorted(limited.items())
        if ran.get(job_id, 0.0) >= limit
    ]


def stop(site: Site, due: Iterable[Expired], inflight: Inflight) -> list[int]:
    """End each job ``TIMEOUT`` in the store, then stop its containers in the background.

    A job that ended, moved or restarted since the look is left alone. Its
    GPUs are held out of placement until its containers have gone.
    """
    stopped = []
    with transaction(site.store.engine, write=True) as s:
        for job in due:
            row = s.get(JobRow, job.job_id)
            if row is None or row.state != "RUNNING" or row.op is not None:
                continue
            if row.attempt != job.attempt:
                continue
            gpus = job_gpus(s, row.id)
            nodes = end_now(site, s, row, "TIMEOUT", job.reason)
            message = (
                f"job {row.id} timed out: {job.reason} after {format_time_limit(job.ran)}"
                f" of running; asked to checkpoint, stopped within {site.grace:g} s"
            )
            data = {"attempt": job.attempt, "limit": job.limit, "ran": job.ran}
            events.record(s, "job.end", message, job_id=row.id, data=data)
            stopped.append((row.id, job.attempt, nodes, gpus))
    for job_id, attempt, nodes, gpus in stopped:
        inflight.submit(
            f"stopping job {job_id} at its time limit",
            partial(site.stop, nodes, job_id, attempt),
            jobs=[job_id],
            gpus=gpus,
        )
    return [job_id for job_id, *_ in stopped]
