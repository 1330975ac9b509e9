"""``gctl node top``: GPU use per GPU and per job, sampled on request on every node at once.

Real GPUs are read on the host (NVML, else ``nvidia-smi``) and each GPU
process is tied to its job through the container it runs in. A GPU shared by
several jobs has its utilisation split evenly among the jobs running on it
(NVML gives no per-process utilisation on most GPUs); memory is per process.

Emulated GPUs have no figures of their own (:mod:`gctl.hosts.emulated`):
each unpaused job on one keeps it as busy as its ``GCTL_EMULATED_UTIL``
declares (default 100 %), a GPU's utilisation is the sum of those, capped
at 100 %, and when they add up to more each job gets its declared share of
the 100 %. A job uses on each of its GPUs the memory its
``GCTL_EMULATED_GPU_MEM`` declares, else what it asked for (``--gpu-mem``);
a GPU's memory is the sum over its jobs, paused ones included since a
frozen job keeps its memory. Every such figure is marked emulated.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from gctl.hosts.engine import ContainerState
from gctl.hosts.ssh import Pool
from gctl.services import hostops
from gctl.services.db import Store
from gctl.services.hostops import Host


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU's use at the moment it was sampled."""

    index: int
    model: str
    util_percent: float | None
    memory_used_mb: int | None
    memory_total_mb: int
    jobs: tuple[int, ...]
    emulated: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the fields, by name."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class JobSample:
    """One job container's GPU use on a node."""

    job_id: int
    container: str
    status: str
    gpus: tuple[int, ...]
    util_percent: float | None
    memory_mb: int | None
    emulated: bool
    memory_peak_mb: int | None = None
    """The most it uses on any one of its GPUs (what ``--gpu-mem`` limits)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the fields, by name."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class NodeSample:
    """A node's GPUs and jobs, or why it could not be sampled."""

    node: str
    error: str | None
    source: str
    gpus: tuple[GpuSample, ...]
    jobs: tuple[JobSample, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON form with stable keys."""
        return {
            "node": self.node,
            "responding": self.error is None,
            "error": self.error,
            "source": self.source,
            "gpus": [g.to_dict() for g in self.gpus],
            "jobs": [j.to_dict() for j in self.jobs],
        }


def sample(
    store: Store, names: list[str] | None = None, *, pool: Pool | None = None
) -> list[NodeSample]:
    """Sample the named nodes (default: all) concurrently."""
    return [
        got if isinstance(got, NodeSample) else NodeSample(host.name, str(got), "-", (), ())
        for host, got in hostops.each_host(store, names, _one, pool=pool)
    ]


def _one(pool: Pool, host: Host) -> NodeSample:
    engine = host.engine(pool)
    try:
        containers = engine.owned()
    finally:
        engine.close()
    return sample_of(pool, host, containers)


def sample_of(pool: Pool, host: Host, containers: list[ContainerState]) -> NodeSample:
    """The node's GPU use, tied to the store's job ``containers`` on it (ended ones skipped)."""
    running = [c for c in containers if c.running and c.job_id is not None]
    if host.emulated:
        return attribute_emulated(host, running)
    return attribute_measured(host, running, hostops.gpu_script(pool, host.target, "telemetry"))


def _on_gpu(containers: list[ContainerState]) -> dict[int, list[ContainerState]]:
    out: dict[int, list[ContainerState]] = defaultdict(list)
    for c in containers:
        for index in c.gpu_indices:
            out[index].append(c)
    return out


def _job_util(
    c: ContainerState,
    busy: dict[int, list[ContainerState]],
    util: Callable[[int], float | None],
    weight: Callable[[ContainerState], float] = lambda _: 1.0,
) -> float | None:
    """A job's utilisation: over its GPUs, each GPU's figure split among its unpaused jobs.

    The split is by ``weight`` (even by default).
    """
    if c.paused:
        return 0.0
    parts = []
    for index in c.gpu_indices:
        value = util(index)
        if value is None or not busy.get(index):
            return None
        total = sum(weight(o) for o in busy[index])
        parts.append(value * weight(c) / total if total > 0 else 0.0)
    return round(sum(parts) / len(parts), 1) if parts else None


def _declared(c: ContainerState) -> float:
    return c.emulated_util


def attribute_emulated(node: Host, containers: list[ContainerState]) -> NodeSample:
    """Figures for emulated GPUs, derived from the job containers on them."""
    on_gpu = _on_gpu(containers)
    busy = _on_gpu([c for c in containers if not c.paused])
    asked = {
        c.id: c.gpu_mem_limit_mb if c.emulated_gpu_mem_mb is None else c.emulated_gpu_mem_mb
        for c in containers
    }
    util = {i: min(100.0, sum(_declared(c) for c in on)) for i, on in busy.items()}
    gpus = tuple(
        GpuSample(
            index=g.index,
            model=g.model,
            util_percent=util.get(g.index, 0.0),
            memory_used_mb=sum(asked[c.id] or 0 for c in on_gpu.get(g.index, [])),
            memory_total_mb=g.memory_mb,
            jobs=tuple(sorted(c.job_id for c in on_gpu.get(g.index, []) if c.job_id)),
            emulated=True,
        )
        for g in node.gpus
    )
    jobs = tuple(
        JobSample(
            job_id=c.job_id or 0,
            container=c.name,
            status=c.status,
            gpus=c.gpu_indices,
            util_percent=_job_util(c, busy, lambda i: util.get(i, 0.0), _declared),
            memory_mb=_total(asked[c.id], len(c.gpu_indices)),
            emulated=True,
            memory_peak_mb=asked[c.id],
        )
        for c in containers
    )
    return NodeSample(node.name, None, "emulated", gpus, jobs)


def _total(per_gpu: int | None, gpus: int) -> int | None:
    return None if per_gpu is None else per_gpu * gpus


def attribute_measured(
    node: Host, containers: list[ContainerState], doc: dict[str, Any]
) -> NodeSample:
    """A host's measured telemetry (``gpu_probe.telemetry``) with its use tied to jobs."""
    by_index = {int(g["index"]): g for g in doc.get("gpus", [])}
    on_gpu = _on_gpu(containers)
    busy = _on_gpu([c for c in containers if not c.paused])
    memory: dict[str, int] = defaultdict(int)
    per_gpu: dict[tuple[str, str], int] = defaultdict(int)
    for proc in doc.get("processes", []):
        cid = proc.get("container_id")
        if cid and proc.get("used_memory_mb") is not None:
            memory[str(cid)] += int(proc["used_memory_mb"])
            per_gpu[str(cid), str(proc.get("gpu_uuid"))] += int(proc["used_memory_mb"])
    peak: dict[str, int] = {}
    for (cid, _), used in per_gpu.items():
        peak[cid] = max(peak.get(cid, 0), used)
    models = {g.index: g.model for g in node.gpus}
    gpus = tuple(
        GpuSample(
            index=index,
            model=models.get(index, "?"),
            util_percent=g.get("util_percent"),
            memory_used_mb=g.get("memory_used_mb"),
            memory_total_mb=int(g.get("memory_total_mb") or 0),
            jobs=tuple(sorted(c.job_id for c in on_gpu.get(index, []) if c.job_id)),
            emulated=False,
        )
        for index, g in sorted(by_index.items())
    )
    jobs = tuple(
        JobSample(
            job_id=c.job_id or 0,
            container=c.name,
            status=c.status,
            gpus=c.gpu_indices,
            util_percent=_job_util(
                c, busy, lambda i: by_index[i].get("util_percent") if i in by_index else None
            ),
            memory_mb=memory.get(c.id),
            emulated=False,
            memory_peak_mb=peak.get(c.id),
        )
        for c in containers
    )
    return NodeSample(node.name, None, str(doc.get("source")), gpus, jobs)
