"""The site's finished jobs as a workload for the simulator (``gctl sim train --from-store``)."""

from __future__ import annotations

import time

from sqlalchemy import Engine, select

from gctl.core.model import Cluster, JobSpec, Priority
from gctl.sim.workload import TraceJob
from gctl.store.engine import transaction
from gctl.store.models import JobRow, JobStateRow
from gctl.store.snapshot import read
from gctl.store.usage import run_times


def history_workload(engine: Engine) -> tuple[Cluster, list[TraceJob]]:
    """The store's nodes, and its completed production jobs as trace jobs.

    A job's duration is the time it spent running by its state history (on
    the GPUs it held: an elastic job resized on the way counts at the size
    it asked for); submit times are shifted so the first job arrives at 0.
    Jobs that never ran are left out.
    """
    snap = read(engine, now=time.time())
    cluster = Cluster(tuple(ns.node for ns in snap.state.nodes.values()))
    with transaction(engine, write=False) as s:
        rows = s.execute(
            select(JobRow)
            .where(JobRow.state == "COMPLETED", JobRow.job_class == "production")
            .order_by(JobRow.submit_time, JobRow.id)
        ).scalars()
        jobs = {row.id: row for row in rows}
        states = s.execute(
            select(JobStateRow.job_id, JobStateRow.state, JobStateRow.at)
            .where(JobStateRow.job_id.in_(list(jobs)))
            .order_by(JobStateRow.job_id, JobStateRow.at, JobStateRow.id)
        ).all()
        ran = run_times((j, st, at) for j, st, at in states)
        out: list[TraceJob] = []
        base: float | None = None
        for row in jobs.values():
            duration = ran.get(row.id, 0.0)
            if duration <= 0:
                continue
            base = row.submit_time if base is None else base
            spec = JobSpec(
                id=str(row.id),
                gpus=row.gpus,
                submit_time=row.submit_time - base,
                priority=Priority.__members__.get(row.priority.upper(), Priority.NORMAL),
                elastic_min=row.elastic_min,
                elastic_max=row.elastic_max,
                profile=row.profile,
                name=row.name,
                user=row.user,
            )
            out.append(TraceJob(spec, duration))
    return cluster, out
