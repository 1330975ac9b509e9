"""What the daemon acts through: the store, the SSH pool, the checkpoint mirror, engines.

:class:`Site` starts and stops a job's containers on the nodes it spans and
moves its job directory, for the modules that carry out decisions
(:mod:`gctl.daemon.apply`, :mod:`gctl.daemon.moves`) and reconcile.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, func, select, update
from sqlalchemy.orm import Session

from gctl.config import SitePolicy
from gctl.core.model import GpuRef
from gctl.daemon import jobfiles, output
from gctl.daemon.datafill import Fills
from gctl.daemon.interference import Learned
from gctl.daemon.jobfiles import Mirror
from gctl.daemon.output import OutputOptions
from gctl.hosts.agent_link import AgentLinks
from gctl.hosts.engine import ContainerSpec, ContainerState, Engine
from gctl.hosts.mounts import Mount
from gctl.hosts.ssh import HostError, Pool, Target
from gctl.services import access, hostops
from gctl.services.db import Store
from gctl.store.identity import store_id
from gctl.store.models import AllocationRow, GpuRow, JobRow, NodeRow
from gctl.store.snapshot import core_gpus

DEFAULT_GRACE = 30.0
"""Seconds a job has to checkpoint and exit after SIGTERM before it is killed."""


@dataclass
class Stopped:
    """What stopping a job's containers found: exit codes, and nodes that did not answer."""

    exit_codes: list[int] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Every container answered and exited 0."""
        return not self.unreachable and all(c == 0 for c in self.exit_codes)


@dataclass(frozen=True, slots=True)
class Launch:
    """What starting a job's current attempt needs from its row (the JobRow fields of that name).

    ``command``, ``env`` and ``mounts`` are the stored JSON values as read.
    """

    id: int
    attempt: int
    user: str
    uid: int | None
    gid: int | None
    image: str
    command: list[Any]
    env: dict[str, Any]
    mounts: list[Any]
    gpu_mem_mb: int | None
    datasets: list[Any]

    @classmethod
    def of(cls, row: JobRow) -> Launch:
        """The launch record of a loaded row, as it stands (its attempt included)."""
        return cls(*(getattr(row, f.name) for f in fields(cls)))


_LAUNCH_COLUMNS = tuple(getattr(JobRow, f.name) for f in fields(Launch))


def launches(s: Session, ids: Collection[int]) -> dict[int, Launch]:
    """The launch records of the jobs ``ids`` still in the store, by id (one query, no ORM)."""
    if not ids:
        return {}
    query = select(*_LAUNCH_COLUMNS).where(JobRow.id.in_(ids))
    return {r[0]: Launch(*r) for r in s.connection().execute(query)}


class Site:
    """The store, the hosts and the checkpoint mirror, as one daemon sees them.

    ``store_id`` names the store on the hosts (container labels, job
    directories); ``epoch`` is the daemon's lease epoch, written on the
    containers it starts. The mirror is the store's own.
    """

    def __init__(
        self,
        store: Store,
        pool: Pool,
        mirror_root: Path,
        grace: float = DEFAULT_GRACE,
        *,
        epoch: int = 0,
        policy: SitePolicy | None = None,
        output: OutputOptions | None = None,
    ):
        self.store = store
        self.pool = pool
        self.policy = policy or SitePolicy()
        self.store_id = store_id(store.engine)
        self.mirror = Mirror(mirror_root / self.store_id)
        self.grace = grace
        self.epoch = epoch
        self.output = output or OutputOptions()
        """How much of each removed container's output is kept (:mod:`gctl.daemon.output`)."""
        self.learned = Learned()
        """Interference predicted from the co-runs measured so far."""
        self.done: dict[int, float] = {}
        """Each running job's fraction of work done by its job SDK's latest report (step/steps),
        by job row id, for policies that estimate remaining work."""
        self.fills = Fills(store, pool)
        """Dataset copies made sure of on the nodes (:mod:`gctl.daemon.datafill`)."""
        self.gpus = core_gpus()
        """The nodes' GPUs, kept from one pass's snapshot to the next (the tick's thread only)."""
        self.agents = AgentLinks(pool, jobfiles.agent_argv("serve"))
        """Each node's long-running host agent, which answers the observations."""
        self._engines: dict[str, tuple[tuple[Target, str | None], Engine]] = {}
        self._engines_lock = threading.Lock()

    def engine(self, row: NodeRow) -> Engine:
        """The node's engine, kept from pass to pass (its open channels save a dial per call).

        A new one replaces it when the node's address or engine changed.
        """
        key = (hostops.target(row), row.docker_host)
        with self._engines_lock:  # launches run in parallel threads
            known = self._engines.get(row.name)
            if known is not None and known[0] == key:
                return known[1]
            if known is not None:
                known[1].close()
            engine = hostops.engine(self.pool, row, self.store_id)
            self._engines[row.name] = (key, engine)
            return engine

    def close(self) -> None:
        """Close the engines' channels and end the host agents (the pool's connections stay)."""
        for _, engine in self._engines.values():
            engine.close()
        self._engines.clear()
        self.agents.close()

    def start(self, s: Session, job: Launch, refs: Iterable[GpuRef]) -> None:
        """Start the job's current attempt on ``refs``, reading their nodes in ``s``.

        See :meth:`launch`, which this calls once the node rows are read.
        """
        refs = list(refs)
        names = {name for name, _ in refs}
        query = select(NodeRow).where(NodeRow.name.in_(names))
        self.launch(job, refs, {n.name: n for n in s.scalars(query)})

    def launch(self, job: Launch, refs: Iterable[GpuRef], nodes: Mapping[str, NodeRow]) -> None:
        """Start the job's current attempt on ``refs``: one container per node, GPUs pinned.

        ``nodes`` are the node rows, with their GPUs loaded, by name; the
        store is touched only in short transactions of its own (a job's
        datasets read, their copies recorded: :mod:`gctl.daemon.datafill`),
        so launches on different nodes may run in parallel threads. Each node
        gets the attempt's own job directory, seeded from the job's newest
        earlier attempt there; when the mirror's copy holds a newer
        checkpoint than that, the mirror's goes in instead. A new job starts
        with an empty directory, and its datasets in the node's cache.

        The site's rules are checked again first (the store may have been
        written without gctl): a job that may not run as asked raises a
        permanent HostError, and is held.
        """
        mounts = tuple(Mount(**m) for m in job.mounts)
        try:
            access.check_mounts(mounts, self.policy)
            user = access.container_user(job.user, job.uid, job.gid, self.policy)
        except access.Forbidden as exc:
            raise HostError("-", f"refused: {exc}", permanent=True) from None
        by_node: dict[str, list[int]] = defaultdict(list)
        for name, index in refs:
            by_node[name].append(index)
        for name, indices in by_node.items():
            node = nodes.get(name)
            if node is None:
                raise HostError(name, "node removed from the store")
            gpus = sorted((g for g in node.gpus if g.index in indices), key=lambda g: g.index)
            self.prepare(node, job.id, job.attempt, user)
            data = self.fills.prepare(node, job.id, [str(d) for d in job.datasets])
            self.engine(node).start(
                ContainerSpec(
                    job_id=job.id,
                    attempt=job.attempt,
                    node=name,
                    store_id=self.store_id,
                    epoch=self.epoch,
                    image=job.image,
                    command=tuple(job.command),
                    gpu_indices=tuple(sorted(indices)),
                    gpu_uuids=tuple(g.uuid or f"GPU-{name}-{g.index}" for g in gpus),
                    gpu_models=tuple(g.model for g in gpus),
                    job_dir=hostops.job_dir(node, self.store_id, job.id, job.attempt),
                    emulated=node.emulated,
                    env=dict(job.env),
                    mounts=mounts + data.mounts,
                    datasets=data.keys,
                    cpuset=hostops.cpuset(gpus),
                    cpuset_mems=hostops.numa_mems(gpus),
                    gpu_mem_mb=job.gpu_mem_mb,
                    emulated_dir=hostops.emulated_gpu_dir(node),
                    user=user,
                    network=self.policy.network,
                    pids_limit=self.policy.pids_limit,
                    memory_limit_mb=self.policy.memory_limit_mb,
                )
            )

    def prepare(self, node: NodeRow, job_id: int, attempt: int, owner: str | None = None) -> None:
        """Make the attempt's job directory on ``node``, ``owner``'s, with the newest checkpoint."""
        target = hostops.target(node)
        base = hostops.job_base(node, self.store_id, job_id)
        shared = [d for d in [hostops.emulated_gpu_dir(node)] if d]
        timeout = self.pool.command_timeout
        here = jobfiles.prepare(self.agents, target, base, attempt, owner, shared, timeout=timeout)
        kept = self.mirror.checkpoint_time(job_id) if attempt > 0 else None
        if kept is not None and (here is None or here < kept):
            data = self.mirror.load(job_id)
            if data is not None:
                job_dir = hostops.job_dir(node, self.store_id, job_id, attempt)
                jobfiles.unpack(self.pool, target, job_dir, data)

    def job_dir(self, node: NodeRow, job_id: int, attempt: int) -> str:
        """The attempt's job directory on ``node``."""
        return hostops.job_dir(node, self.store_id, job_id, attempt)

    def save(self, node: NodeRow, job_id: int, attempt: int) -> tuple[bytes, jobfiles.Report]:
        """Copy an attempt's job directory from ``node`` into the mirror; the tar, its report."""
        target = hostops.target(node)
        job_dir = self.job_dir(node, job_id, attempt)
        data = jobfiles.pack(self.pool, target, job_dir)
        report = jobfiles.read_reports(self.pool, target, [job_dir])[job_dir]
        self.mirror.save(job_id, attempt, data, report.checkpoint_time)
        return data, report

    def containers(self, node: NodeRow, job_id: int, attempt: int | None) -> list[ContainerState]:
        """The job's containers on ``node`` (of one attempt, or of all when None)."""
        found = self.engine(node).owned(job_id)
        return [c for c in found if attempt is None or c.attempt == attempt]

    def stop(self, nodes: Iterable[NodeRow], job_id: int, attempt: int | None) -> Stopped:
        """Ask the job's containers to checkpoint and exit (SIGTERM, then KILL after the grace).

        A frozen container is thawed first so it can hear the signal. Ended
        containers are removed. A node that does not answer is reported.
        """
        out = Stopped()
        for node in nodes:
            try:
                engine = self.engine(node)
                for c in self.containers(node, job_id, attempt):
                    if c.paused:
                        engine.unpause(c.id)
                    if c.running:
                        engine.stop(c.id, grace=int(self.grace))
                    ended = engine.state(c.id)
                    out.exit_codes.append(ended.exit_code if ended.exit_code is not None else -1)
                    self.remove(node, ended)
            except HostError:
                out.unreachable.append(node.name)
        return out

    def kill(self, nodes: Iterable[NodeRow], job_id: int) -> list[str]:
        """Kill and remove every container of the job; nodes that did not answer."""
        missed: list[str] = []
        for node in nodes:
            try:
                engine = self.engine(node)
                for c in engine.owned(job_id):
                    if c.paused:
                        engine.unpause(c.id)
                    if c.running:
                        engine.stop(c.id, grace=0)  # killed; its output is read once it ended
                    self.remove(node, c)
            except HostError:
                missed.append(node.name)
        return missed

    def remove(self, node: NodeRow, c: ContainerState) -> None:
        """Remove one of the store's containers from ``node``, keeping its output first.

        Forced: a container still running is killed. Its output is saved
        on the node and its tail in the store (:func:`gctl.daemon.output.keep`).
        """
        output.keep(self.pool, self.store, self.store_id, node, c, self.output)
        self.engine(node).remove(c.id)


def job_nodes(s: Session, job_id: int) -> list[NodeRow]:
    """The nodes a job holds GPUs on, in GPU order."""
    rows = s.scalars(
        select(NodeRow)
        .join(GpuRow, GpuRow.node_id == NodeRow.id)
        .join(AllocationRow, AllocationRow.gpu_id == GpuRow.id)
        .where(AllocationRow.job_id == job_id)
        .order_by(NodeRow.name)
        .distinct()
    ).all()
    return list(rows)


def job_gpus(s: Session, job_id: int) -> list[GpuRef]:
    """The ``(node, index)`` GPUs a job holds, sorted."""
    rows = s.execute(
        select(NodeRow.name, GpuRow.index)
        .join(GpuRow, GpuRow.node_id == NodeRow.id)
        .join(AllocationRow, AllocationRow.gpu_id == GpuRow.id)
        .where(AllocationRow.job_id == job_id)
    ).all()
    return sorted((name, index) for name, index in rows)


def share_gpus(conn: Connection, gpu_ids: Collection[int], mode: str) -> None:
    """Give every allocation on ``gpu_ids`` the sharing ``mode`` a job placed there brings.

    Written with that placement, in its transaction: otherwise, until the
    pass records every job's mode at its end, the store would show a GPU
    held twice by one holder still marked exclusive (a daemon killed in
    between would leave it so until its next pass). A placement meant
    ``exclusive`` that finds others on its GPUs after all (its pass's
    placements are recorded as they finish, in any order) marks them all
    time-sliced; the pass's end records the mode the core has for them.
    """
    if not gpu_ids:
        return
    ids = sorted(gpu_ids)
    if mode != "exclusive":
        conn.execute(
            update(AllocationRow)
            .where(AllocationRow.gpu_id.in_(ids), AllocationRow.mode != mode)
            .values(mode=mode)
        )
        return
    shared = (
        select(AllocationRow.gpu_id)
        .where(AllocationRow.gpu_id.in_(ids))
        .group_by(AllocationRow.gpu_id)
        .having(func.count() > 1)
    )
    conn.execute(
        update(AllocationRow)
        .where(AllocationRow.gpu_id.in_(shared), AllocationRow.mode == "exclusive")
        .values(mode="time-sliced")
    )
