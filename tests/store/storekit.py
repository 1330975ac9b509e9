"""Helpers for store tests: nodes, jobs, and GPUs given to jobs as the daemon will."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select

from gctl.services import db, nodes, specs
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, GpuRow, JobRow, JobStateRow, NodeRow

FP = "SHA256:" + "A" * 43


def req(gpus: int = 1, **kw: object) -> specs.JobRequest:
    return specs.build(image="train:1", command=["python", "t.py"], gpus=gpus, **kw)  # type: ignore[arg-type]


def node(store: db.Store, name: str, gpus: str = "4xV100-16GB") -> None:
    nodes.add_node(store, name, f"{name}.lan", emulate_gpus=gpus, host_key_fingerprint=FP)


def on_gpus(
    store: db.Store,
    job: int,
    node: str,
    indices: Iterable[int],
    *,
    since: float,
    mode: str = "exclusive",
    state: str = "RUNNING",
    entered: float | None = None,
) -> None:
    """Give a job GPUs and a state as the daemon will: allocation rows plus history."""
    idx = sorted(indices)
    with transaction(store.engine, write=True) as s:
        row = s.get(JobRow, job)
        assert row is not None
        row.state = state
        row.start_time = since
        s.add(JobStateRow(job_id=job, state="RUNNING", at=since, reason="placed"))
        if state != "RUNNING":
            s.add(JobStateRow(job_id=job, state=state, at=entered or since, reason="test"))
        gpus = s.scalars(
            select(GpuRow).join(GpuRow.node).where(NodeRow.name == node, GpuRow.index.in_(idx))
        ).all()
        assert sorted(g.index for g in gpus) == idx
        for g in gpus:
            s.add(AllocationRow(job_id=job, gpu_id=g.id, mode=mode, since=since))
