"""``gctl node probe``: ask every node at once whether it answers, and what GPUs it has.

Each node is reached over its pinned SSH connection; its Docker engine must
answer too. Real nodes run gctl's GPU probe script on the host (NVML, or
``nvidia-smi`` when the host has no Python NVML) and their GPU rows are
refreshed from it; nodes with emulated GPUs keep the GPUs they were declared
with, and say so. A node that does not answer keeps its last inventory and
gets the error recorded; the others are not held up by it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from gctl.hosts import gpu_probe
from gctl.hosts.ssh import HostError, Pool
from gctl.services import events, hostops, nodes
from gctl.services.db import Store
from gctl.store.engine import transaction
from gctl.store.models import GpuRow, NodeRow, now


@dataclass(frozen=True, slots=True)
class _Answer:
    docker_version: str
    inventory: dict[str, Any] | None
    seconds: float


@dataclass(frozen=True, slots=True)
class ProbeView:
    """One node's answer to a probe."""

    node: nodes.NodeView
    responding: bool
    error: str | None
    source: str
    docker_version: str | None
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        """JSON form with stable keys."""
        return {
            **self.node.to_dict(),
            "responding": self.responding,
            "error": self.error,
            "gpu_source": self.source,
            "docker_version": self.docker_version,
            "probe_seconds": round(self.seconds, 3),
        }


def probe(
    store: Store, names: list[str] | None = None, *, pool: Pool | None = None
) -> list[ProbeView]:
    """Probe the named nodes (default: all) concurrently and record what they said."""
    answers = hostops.each_host(store, names, _ask, pool=pool)
    with transaction(store.engine, write=True) as s:
        for host, got in answers:
            _record(s, host, got)
    views = {v.name: v for v in nodes.list_nodes(store, [h.name for h, _ in answers], detail=True)}
    out = []
    for host, got in answers:
        ok = isinstance(got, _Answer)
        source = "emulated" if host.emulated else "unknown"
        if isinstance(got, _Answer) and got.inventory is not None:
            source = str(got.inventory.get("source", "unknown"))
        out.append(
            ProbeView(
                node=views[host.name],
                responding=ok,
                error=None if isinstance(got, _Answer) else str(got),
                source=source,
                docker_version=got.docker_version if isinstance(got, _Answer) else None,
                seconds=got.seconds if isinstance(got, _Answer) else 0.0,
            )
        )
    return out


def _ask(pool: Pool, host: hostops.Host) -> _Answer:
    """SSH in, check the Docker engine, and (for real GPUs) run the inventory on the host."""
    start = time.monotonic()
    engine = host.engine(pool)
    try:
        version = str(engine.info().get("ServerVersion", "?"))
    finally:
        engine.close()
    inventory = None if host.emulated else hostops.gpu_script(pool, host.target, "inventory")
    return _Answer(version, inventory, time.monotonic() - start)


def _record(s: Session, host: hostops.Host, got: _Answer | HostError) -> None:
    row = s.scalar(
        select(NodeRow).options(selectinload(NodeRow.gpus)).where(NodeRow.name == host.name)
    )
    if row is None:  # removed while we probed
        return
    if isinstance(got, HostError):
        if row.last_error is None:
            events.record(s, "node.unreachable", str(got), node=row.name)
        row.last_error = str(got)
        return
    if row.last_error is not None:
        events.record(s, "node.reachable", f"node {row.name} answers again", node=row.name)
    row.last_seen = now()
    row.last_error = None
    if got.inventory is not None and _refresh_gpus(row, got.inventory):
        row.inventory += 1
        events.record(
            s, "node.inventory", f"node {row.name}: {len(row.gpus)} GPU(s) found", node=row.name
        )


def _refresh_gpus(row: NodeRow, inventory: dict[str, Any]) -> bool:
    """Bring a real node's GPU rows in line with its inventory; whether anything changed."""
    found = {int(r["index"]): r for r in gpu_probe.gpu_records(inventory)}
    changed = False
    by_index = {g.index: g for g in row.gpus}
    for index, rec in found.items():
        gpu = by_index.get(index)
        if gpu is None:
            gpu = GpuRow(index=index, model=str(rec["model"]), memory_mb=int(rec["memory_mb"]))
            row.gpus.append(gpu)
            changed = True
        values = {
            "uuid": rec.get("uuid"),
            "model": str(rec["model"]),
            "model_name": rec.get("model_name"),
            "memory_mb": int(rec["memory_mb"]),
            "numa_node": rec.get("numa_node"),
            "cpu_affinity": rec.get("cpu_affinity"),
            "socket": int(rec.get("socket") or 0),
            "pcie_switch": int(rec.get("pcie_switch") or 0),
            "nvlink_peers": [list(p) for p in rec.get("nvlink_peers", [])],
            "emulated": False,
        }
        for key, value in values.items():
            if getattr(gpu, key) != value:
                setattr(gpu, key, value)
                changed = True
    for index, gpu in by_index.items():
        if index not in found:
            row.gpus.remove(gpu)
            changed = True
    return changed
