"""Helpers for store tests: nodes, jobs, and GPUs given to jobs as the daemon will."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import insert, select

from gctl.services import db, nodes, specs
from gctl.sim.cluster_spec import node_gpus
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
    mechanism: str | None = "checkpoint",
) -> None:
    """Give a job GPUs and a state as the daemon will: allocation rows plus history.

    ``mechanism`` is what the daemon learnt of the job: ``checkpoint`` (it uses
    the job SDK, so it may be moved), ``freeze`` or None (never moved).
    """
    idx = sorted(indices)
    with transaction(store.engine, write=True) as s:
        row = s.get(JobRow, job)
        assert row is not None
        row.state = state
        row.mechanism = mechanism
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


def bulk_nodes(store: db.Store, count: int, topology: str = "pcie") -> list[int]:
    """``count`` nodes of 8 GPUs inserted in bulk; GpuRow ids in (node, GPU index) order."""
    gpus = node_gpus(8, topology=topology)
    with transaction(store.engine, write=True) as s:
        ids = list(
            s.scalars(
                insert(NodeRow).returning(NodeRow.id, sort_by_parameter_order=True),
                [{"name": f"n{i:05d}", "host": f"host{i}"} for i in range(count)],
            )
        )
        return list(
            s.scalars(
                insert(GpuRow).returning(GpuRow.id, sort_by_parameter_order=True),
                [
                    {
                        "node_id": node_id,
                        "index": g.index,
                        "model": g.type,
                        "memory_mb": g.memory_mb,
                        "socket": g.socket,
                        "pcie_switch": g.pcie_switch,
                        "nvlink_peers": [list(p) for p in g.nvlink],
                    }
                    for node_id in ids
                    for g in gpus
                ],
            )
        )
