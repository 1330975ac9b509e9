"""Ending a job's hold on its GPUs, with a record of it kept for accounting.

``allocations`` lists the GPUs a job holds now; ``allocation_history``
every interval it held one before (node and GPU by name and index, the GPU
model, the mode, from ``since`` until ``until``). Whatever takes GPUs from
a job goes through :func:`release`, and a job that keeps its GPUs but
starts a new interval on them (a time-slice suspend by checkpoint, which
restarts ``since``) through :func:`close`, so no interval is lost. Both run
in the caller's transaction, one INSERT ... SELECT and one statement more,
whatever the number of GPUs.
"""

from __future__ import annotations

from sqlalchemy import Double, Insert, delete, insert, literal, select, update
from sqlalchemy.orm import Session

from gctl.store.models import AllocationHistoryRow, AllocationRow, GpuRow, NodeRow


def _record(job_id: int, at: float) -> Insert:
    """The INSERT of the job's current allocations into the history, as held until ``at``.

    An interval of no length (given back as soon as taken) is not kept.
    """
    held = (
        select(
            AllocationRow.job_id,
            NodeRow.name,
            GpuRow.index,
            GpuRow.model,
            AllocationRow.mode,
            AllocationRow.since,
            literal(at, Double[float]()),
        )
        .join(GpuRow, GpuRow.id == AllocationRow.gpu_id)
        .join(NodeRow, NodeRow.id == GpuRow.node_id)
        .where(AllocationRow.job_id == job_id, AllocationRow.since < at)
    )
    columns = ["job_id", "node", "gpu_index", "gpu_model", "mode", "since", "until"]
    return insert(AllocationHistoryRow).from_select(columns, held)


def release(s: Session, job_id: int, at: float) -> None:
    """Take every GPU from the job at ``at``, keeping each interval it held one in the history."""
    s.execute(_record(job_id, at))
    s.execute(delete(AllocationRow).where(AllocationRow.job_id == job_id))


def close(s: Session, job_id: int, at: float) -> None:
    """End the job's current intervals on its GPUs at ``at`` and start new ones, GPUs kept."""
    s.execute(_record(job_id, at))
    s.execute(update(AllocationRow).where(AllocationRow.job_id == job_id).values(since=at))
