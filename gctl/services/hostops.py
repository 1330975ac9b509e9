"""Reaching stored nodes: SSH targets, Docker engines and the GPU script, from the store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Row, select
from sqlalchemy.orm import Session, make_transient_to_detached

from gctl.config import DEFAULT_WORK_DIR, node_cache_dir
from gctl.hosts import gpu_probe
from gctl.hosts.engine import Engine
from gctl.hosts.ssh import HostError, Pool, Target, fan_out
from gctl.services.db import Store
from gctl.services.nodes import DEFAULT_SSH_PORT, named_rows
from gctl.store.engine import transaction
from gctl.store.gpurows import GpuRows, GpuValues
from gctl.store.identity import store_id
from gctl.store.models import GpuRow, NodeRow

T = TypeVar("T")

_SCRIPT = Path(gpu_probe.__file__).read_bytes()
"""The GPU probe's own source, sent to the host's ``python3 -``."""
_NOT_FOUND = 127
"""The shell's exit status for a command it cannot find."""


def target(row: NodeRow) -> Target:
    """How to reach a stored node over SSH, with its confirmed host key."""
    return Target(
        node=row.name,
        host=row.host,
        # 22 is also what a node gets when --port was not given: let ~/.ssh/config decide then.
        port=row.port if row.port != DEFAULT_SSH_PORT else None,
        user=row.ssh_user,
        key_path=row.key_path,
        fingerprint=row.host_key_fingerprint,
    )


@dataclass(frozen=True, slots=True)
class HostGpu:
    """A GPU as the store records it."""

    index: int
    model: str
    memory_mb: int


@dataclass(frozen=True, slots=True)
class Host:
    """What work on a node's host needs from the store, read before the host is contacted."""

    target: Target
    docker_host: str | None
    emulated: bool
    gpus: tuple[HostGpu, ...]
    store_id: str

    @property
    def name(self) -> str:
        """The node's name."""
        return self.target.node

    def engine(self, pool: Pool) -> Engine:
        """The host's Docker engine over the pool's connection (this store's containers)."""
        return Engine(pool, self.target, self.store_id, docker_host=self.docker_host)


def each_host(
    store: Store,
    names: list[str] | None,
    call: Callable[[Pool, Host], T],
    *,
    pool: Pool | None = None,
) -> list[tuple[Host, T | HostError]]:
    """``call`` on the named nodes' hosts (default: all) at once; each host's answer or error.

    The store is read first and released before any host is contacted. A
    pool of one's own is made (and closed) when none is given.
    """
    with transaction(store.engine, write=False) as s:
        sid = store_id(s.connection())
        hosts = {r.name: host(r, sid, gpus_of(r)) for r in named_rows(s, names)}
    ssh = pool or Pool()
    try:
        got = fan_out([h.target for h in hosts.values()], lambda t: call(ssh, hosts[t.node]))
    finally:
        if pool is None:
            ssh.close()
    return [(h, got[name]) for name, h in hosts.items()]


def host(row: NodeRow, sid: str, gpus: tuple[HostGpu, ...]) -> Host:
    """What work on ``row``'s host with ``gpus`` needs, for the store of id ``sid``."""
    return Host(target(row), row.docker_host, row.emulated, gpus, sid)


def gpus_of(row: NodeRow) -> tuple[HostGpu, ...]:
    """The GPUs of ``row`` (its GPU rows loaded)."""
    return tuple(HostGpu(g.index, g.model, g.memory_mb) for g in row.gpus)


NodeGpus = dict[str, tuple[HostGpu, ...]]
"""Each node's GPUs by node name, in index order."""


def read_nodes(s: Session) -> tuple[dict[str, NodeRow], NodeGpus]:
    """Every node (its rows without GPU objects), and each node's GPUs as plain values."""
    return NodeReader().read(s)


class NodeReader:
    """Reads every node and its GPUs, again and again: the daemon's read at each tick.

    Loading NodeRow objects costs 10 ms a read at 1,000 nodes x 8 GPUs
    (GpuRow objects 150 ms). The reader reads plain column values and
    builds a row only where it is new or changed since its last read; the
    others are the same objects as then. A node's GPUs are read again only
    when its inventory changed (:mod:`gctl.store.gpurows`). The rows are
    detached, as rows loaded in a closed session are: their GPU objects are
    not loaded and reading them raises.
    """

    def __init__(self) -> None:
        """Nothing read yet."""
        self._rows: dict[int, tuple[Row[Any], NodeRow]] = {}
        self._gpus = GpuRows(_host_gpus)

    def read(self, s: Session) -> tuple[dict[str, NodeRow], NodeGpus]:
        """Every node by name, and each node's GPUs (``s``: any session, read only)."""
        conn = s.connection()
        rows: dict[int, tuple[Row[Any], NodeRow]] = {}
        for values in conn.execute(select(*NodeRow.__table__.columns)).all():
            old = self._rows.get(values.id)
            if old is None or old[0] != values:
                row = NodeRow(**values._asdict())
                make_transient_to_detached(row)
                old = (values, row)
            rows[values.id] = old
        self._rows = rows
        keys = {node_id: (v.created_at, v.inventory) for node_id, (v, _) in rows.items()}
        gpus = self._gpus.read(conn, keys)
        return (
            {row.name: row for _, row in rows.values()},
            {row.name: gpus[node_id] for node_id, (_, row) in rows.items()},
        )


def _host_gpus(raw: tuple[GpuValues, ...]) -> tuple[HostGpu, ...]:
    """A node's GPUs from their rows' values."""
    return tuple(HostGpu(g.index, g.model, g.memory_mb) for g in raw)


def engine(pool: Pool, row: NodeRow, sid: str) -> Engine:
    """A stored node's Docker engine, over the pool's connection to it (store ``sid``'s view)."""
    return Engine(pool, target(row), sid, docker_host=row.docker_host)


def work_dir(row: NodeRow) -> str:
    """The node's gctl work directory on its host."""
    return row.work_dir or DEFAULT_WORK_DIR


def cache_dir(row: NodeRow) -> str:
    """The node's dataset cache directory on its host (:mod:`gctl.services.datacache`)."""
    return node_cache_dir(row.work_dir, row.cache_dir)


def store_dir(row: NodeRow, sid: str) -> str:
    """The store's tree on a node's host (see :mod:`gctl.hosts.agent`)."""
    return f"{work_dir(row)}/stores/{sid}"


def agent_dir(row: NodeRow, sid: str) -> str:
    """Where the store's watchdog keeps its lease, lock and log on the host."""
    return f"{store_dir(row, sid)}/agent"


def job_base(row: NodeRow, sid: str, job_id: int) -> str:
    """The directory holding a job's attempt directories on a node's host."""
    return f"{store_dir(row, sid)}/jobs/{job_id}"


def job_dir(row: NodeRow, sid: str, job_id: int, attempt: int) -> str:
    """One attempt's job directory on a node's host (progress and checkpoints, at ``/gctl``)."""
    return f"{job_base(row, sid, job_id)}/a{attempt}"


def docker_argv(row: NodeRow) -> list[str]:
    """The ``docker`` command line that reaches the node's engine on its host."""
    return ["docker", *(["-H", row.docker_host] if row.docker_host else [])]


def emulated_gpu_dir(row: NodeRow) -> str | None:
    """The node's emulated-GPU directory on its host (:mod:`gctl.hosts.emulated`), if emulated."""
    return f"{work_dir(row)}/emulated-gpus" if row.emulated else None


def gpu_script(pool: Pool, target: Target, mode: str) -> dict[str, Any]:
    """The host's GPU ``inventory`` or ``telemetry``.

    gctl's probe script runs under the host's ``python3`` (NVML there, else
    ``nvidia-smi``); a host without Python gets ``nvidia-smi`` run over SSH and
    parsed here.
    """
    res = pool.run(target, ["python3", "-", mode], stdin=_SCRIPT)
    if res.rc == _NOT_FOUND:
        remote = {"inventory": gpu_probe.inventory, "telemetry": gpu_probe.telemetry}[mode]
        return remote(False, lambda argv: _output(pool, target, argv), None)
    if res.rc != 0:
        raise HostError(target.node, f"GPU {mode} failed: {res.stderr.decode().strip()[-200:]}")
    return res.json_object(target.node, f"GPU {mode}")


def _output(pool: Pool, target: Target, argv: list[str]) -> str:
    """A command's output on the host, failing the way a local run would for the probe."""
    res = pool.run(target, argv)
    if res.rc == _NOT_FOUND:
        raise FileNotFoundError(argv[0])
    if res.rc != 0:
        raise OSError(f"{argv[0]} exited {res.rc}")
    return res.text


def numa_mems(gpus: list[GpuRow]) -> str | None:
    """The NUMA nodes of these GPUs (memory near them), or None when any is unknown."""
    if not gpus or any(g.numa_node is None for g in gpus):
        return None
    return gpu_probe.format_cpulist(g.numa_node for g in gpus if g.numa_node is not None)


def cpuset(gpus: list[GpuRow]) -> str | None:
    """The CPUs near these GPUs (their NUMA nodes' CPUs), or None when any is unknown."""
    cpus: set[int] = set()
    for gpu in gpus:
        near = gpu_probe.parse_cpulist(gpu.cpu_affinity) if gpu.cpu_affinity else None
        if not near:
            return None
        cpus.update(near)
    return gpu_probe.format_cpulist(cpus) if cpus else None
