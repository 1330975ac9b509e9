"""Snapshot <-> core model, read side: the store's cluster as a core :class:`ClusterState`.

On each pass the daemon reads the store into the scheduler's working model,
lets the policy decide, and writes the decisions back. :func:`load` is the
first step: it rebuilds, through the core's public API, the state the
simulator would hold for the same cluster and jobs, plus the row ids the
write side needs.

How the store maps to the core
------------------------------
Nodes
    Every node, by name, with its GPUs in index order: ``model`` is the GPU
    type, ``socket``, ``pcie_switch`` and ``nvlink_peers`` (``[[peer,
    links]]``) the topology. ``admin_state`` ``drain`` closes the node with
    ``ClusterState.drain(name, by=DRAIN_BY)``: its jobs stay, it takes no new
    work. ``down`` takes it out with ``ClusterState.node_down``, the core's
    event for a node gone: its jobs go back to the queue (listed in
    :attr:`Snapshot.requeued`, for the daemon to stop and requeue, as
    ``gctl node down`` promises) and it takes no placement until it is back.
    A node whose GPU indexes are not ``0..n-1`` cannot be modelled and is
    left out (a problem is reported). Heartbeats (``last_seen``) are not
    looked at.
Jobs
    Job ids are the JobRow ids as strings (:func:`core_job_id`): the core's
    ids are ``str``. Finished jobs (``COMPLETED``, ``FAILED``, ``CANCELLED``,
    ``TIMEOUT``) are absent. ``PENDING``, ``REQUEUED`` and ``PREEMPTED``
    jobs wait in the queue unless held (held ones, ``REQUEUE_HOLD`` among
    them, are absent, and so are jobs whose failed start is backed off until
    their ``retry_at``); their waiting time counts from when they last
    entered that state. ``RUNNING`` and ``COMPLETING`` jobs run,
    ``SUSPENDED`` and ``STOPPED`` ones are suspended, on exactly the GPUs
    their allocation rows name; one that holds no GPU and is not held waits
    in the queue (:attr:`Snapshot.stranded`). Jobs enter the core in
    arrival order (submit time, then id), which orders the queue as the
    simulator does (priority first, then arrival).
Sharing
    The core has no per-job mode: jobs on one exact GPU set form a group,
    exclusive when alone, packed when all of them run, time-sliced when some
    wait. Jobs join their groups in the order they got their GPUs (oldest
    allocation first), which is the round-robin order and decides a node's
    affinity. A store mode that disagrees with the mode the core derives is
    reported as a problem.
Profiles and history
    The store keeps no progress (work done) field and the core needs none:
    the latest profile sample (utilisation, memory, progress rate) becomes
    the job's ``observed`` sample; its solo rate is the latest sample taken
    before its current pack (any latest sample when it is not packed).
    ``first_run`` is the job's ``start_time``; ``since`` and
    ``last_resumed`` come from the job's state history and allocation times;
    ``packed_at`` is when the last member of a pack got its GPUs or resumed
    (a time-sliced pair taking its turn together), ``resized_at`` when a
    resized elastic job got its current ones; the job's stored ``reason`` is
    kept, so a job already told it is queued is not told again. Attained
    service (GPU time had, which least-attained-service policies rank by)
    is the job's GPUs times the time it spent in ``RUNNING`` or
    ``COMPLETING`` by its state history, its current stretch counted by the
    core from ``last_resumed``. A starvation promotion
    (:attr:`JobState.service_base`) is not stored: it lasts until the
    promoted job next runs.

Rows that cannot be modelled (a running job with no GPUs, GPUs claimed by
two different sets, an unknown priority...) are left out and described in
:attr:`Snapshot.problems`; a pass never fails on one bad row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from gctl.core.decisions import Place, Suspend
from gctl.core.interference import job_kind
from gctl.core.model import (
    GPU,
    Cluster,
    GpuRef,
    JobClass,
    JobSpec,
    JobStatus,
    Node,
    Observed,
    Priority,
    ShareMode,
)
from gctl.core.state import ClusterState, GroupKey
from gctl.gcpause import gc_paused
from gctl.store.gpurows import GpuRows, GpuValues
from gctl.store.models import (
    AllocationRow,
    JobRow,
    JobStateRow,
    NodeRow,
    ProfileRow,
)
from gctl.store.usage import RUNNING_STATES, run_times

DRAIN_BY = "admin"
"""Who holds the core drain of a node the operator drained (``gctl node drain``)."""

FINISHED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})
"""Store states of jobs that are over: absent from the snapshot."""
QUEUED_STATES = frozenset({"PENDING", "REQUEUED", "PREEMPTED"})
"""Store states of jobs waiting to (re)start: queued unless held."""
HELD_STATES = frozenset({"REQUEUE_HOLD"})
"""Store states of jobs that wait for a release: never queued."""
SUSPENDED_STATES = frozenset({"SUSPENDED", "STOPPED"})
"""Store states of jobs that keep their GPUs without making progress."""


_PRIORITIES = {"low": Priority.LOW, "normal": Priority.NORMAL, "high": Priority.HIGH}
_CLASSES = {c.value: c for c in JobClass}
_LOADED_REASON = "loaded from the store"
MECHANISM_CHECKPOINT = "checkpoint"
"""``JobRow.mechanism`` of a job that checkpoints when asked (it uses the job SDK)."""
MECHANISM_FREEZE = "freeze"
"""``JobRow.mechanism`` of a job that can only be frozen in place (docker pause)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The store's cluster as the core sees it, and the ids to write decisions back.

    ``state`` is the core model (mutable: the policy commits its decisions
    to it). ``node_ids`` maps a core node name to its NodeRow id, ``gpu_ids``
    a ``(node name, GPU index)`` to its GpuRow id, and ``job_ids`` a core job
    id to its JobRow id. ``requeued`` lists jobs the store still has on GPUs
    of ``down`` nodes, which the core has put back in the queue; ``stranded``
    the JobRow ids of jobs the store has suspended on no GPU at all (not
    held), which the core has waiting in the queue, for the daemon to record
    as requeued; ``problems`` describes every row left out and why.
    """

    state: ClusterState
    at: float
    node_ids: Mapping[str, int]
    gpu_ids: Mapping[GpuRef, int]
    job_ids: Mapping[str, int]
    requeued: tuple[str, ...] = ()
    stranded: tuple[int, ...] = ()
    problems: tuple[str, ...] = ()
    held: Mapping[str, tuple[GpuRef, ...]] = field(default_factory=dict)
    """The GPUs each job held as read, before any decision on it."""


CoreGpus = GpuRows[tuple[tuple[int, GPU], ...]]
"""Each node's GPUs as the core sees them, with their rows' ids, kept from load to load."""


def core_gpus() -> CoreGpus:
    """A fresh keeper of the nodes' GPUs for :func:`load` (the daemon keeps one)."""
    return GpuRows(_core_gpus)


def _core_gpus(rows: tuple[GpuValues, ...]) -> tuple[tuple[int, GPU], ...]:
    """A node's GPUs from their rows' values, each with its row id."""
    out = []
    for g in rows:
        nvlink = tuple((int(p[0]), int(p[1])) for p in g.nvlink_peers or ())
        out.append((g.id, GPU(g.index, g.model, g.memory_mb, g.socket, g.pcie_switch, nvlink)))
    return tuple(out)


def core_job_id(row_id: int) -> str:
    """The core's id of the job stored as JobRow ``row_id``."""
    return str(row_id)


def read(engine: Engine, *, now: float, gpus: CoreGpus | None = None) -> Snapshot:
    """Load a snapshot in a read-only transaction of its own that sees one consistent store.

    PostgreSQL gets ``REPEATABLE READ`` (its default, ``READ COMMITTED``,
    would let a commit land between two of :func:`load`'s queries); a
    SQLite read transaction sees one snapshot already. ``gpus``: see :func:`load`.
    """
    bind = engine
    if engine.dialect.name == "postgresql":
        bind = engine.execution_options(isolation_level="REPEATABLE READ")
    with Session(bind) as session, session.begin():
        return load(session, now=now, gpus=gpus)


def load(session: Session, *, now: float, gpus: CoreGpus | None = None) -> Snapshot:
    """Build the core state of the store's nodes and unfinished jobs (module docstring).

    ``now`` is the pass's time (store epoch seconds): the time of the core's
    node-down event and the fallback for times the store lacks. Run it in
    one transaction that sees a consistent store (:func:`read` does).
    ``gpus`` keeps the nodes' GPUs from load to load (the daemon's); without
    it every GPU row is read.
    """
    with gc_paused():
        return _Loader(session, now, gpus if gpus is not None else core_gpus()).run()


@dataclass(slots=True)
class _Job:
    """One unfinished job row and what the loader learns about it."""

    row_id: int
    state: str
    spec: JobSpec
    start_time: float | None
    reason: str | None
    gpus: list[GpuRef]
    modes: set[str]
    first_alloc: float
    last_alloc: float


def _mode(stored: set[str]) -> ShareMode:
    """The store's mode of a job's GPUs when it gives one the core knows (else exclusive).

    Only informative: the core derives a job's mode from who shares its GPUs.
    """
    if len(stored) == 1:
        try:
            return ShareMode(next(iter(stored)))
        except ValueError:
            pass
    return ShareMode.EXCLUSIVE


class _Loader:
    """One :func:`load`: reads the rows, then replays them into a fresh ClusterState."""

    def __init__(self, session: Session, now: float, gpus: CoreGpus) -> None:
        self.session = session
        self.now = now
        self.gpus = gpus
        self.problems: list[str] = []
        self.stranded: list[int] = []

    def run(self) -> Snapshot:
        """Read every row needed, then build the state: nodes, jobs, placements, admin states."""
        node_ids, gpu_ids, cluster, admin = self._nodes()
        state = ClusterState(cluster)
        jobs = self._jobs(gpu_ids)
        entered, ran = self._history()
        self._submit(state, jobs, entered)
        placed = self._place(state, jobs, entered)
        self._restore(state, jobs, placed)
        self._attained(state, jobs, ran)
        requeued: list[str] = []
        for name, admin_state in admin.items():
            if admin_state == "drain":
                state.drain(name, DRAIN_BY)
            elif admin_state == "down":
                for job_id in state.node_down(name, self.now):
                    state.jobs[job_id].reason = f"requeued: node {name} is down"
                    requeued.append(job_id)
            elif admin_state != "up":
                self.problems.append(
                    f"node {name}: unknown admin state {admin_state!r}; taken as up"
                )
        self._observe(state)
        held = {j: js.gpus for j, js in state.jobs.items() if js.gpus}
        return Snapshot(
            state=state,
            at=self.now,
            node_ids=node_ids,
            gpu_ids={ref: gid for gid, ref in gpu_ids.items()},
            job_ids={
                core_job_id(j.row_id): j.row_id for j in jobs if core_job_id(j.row_id) in state.jobs
            },
            requeued=tuple(requeued),
            stranded=tuple(self.stranded),
            problems=tuple(self.problems),
            held=held,
        )

    # ---- reading -------------------------------------------------------

    def _nodes(
        self,
    ) -> tuple[dict[str, int], dict[int, GpuRef], Cluster, dict[str, str]]:
        """Nodes by name with their GPUs; GpuRow id -> GPU ref; admin state per node."""
        conn = self.session.connection()
        nodes = sorted(  # by name in code point order, the same on every backend
            conn.execute(
                select(
                    NodeRow.id,
                    NodeRow.name,
                    NodeRow.admin_state,
                    NodeRow.created_at,
                    NodeRow.inventory,
                )
            ).all(),
            key=lambda n: n[1],
        )
        gpus_of = self.gpus.read(conn, {n[0]: (n[3], n[4]) for n in nodes})
        node_ids: dict[str, int] = {}
        gpu_ids: dict[int, GpuRef] = {}
        admin: dict[str, str] = {}
        out: list[Node] = []
        for node_id, name, admin_state, _, _ in nodes:
            gpus = gpus_of[node_id]
            indexes = [g.index for _, g in gpus]
            if indexes != list(range(len(gpus))):
                self.problems.append(
                    f"node {name}: GPU indexes {indexes} are not 0..{len(gpus) - 1}; left out"
                )
                continue
            node_ids[name] = node_id
            admin[name] = admin_state
            out.append(Node(name, tuple(g for _, g in gpus)))
            for gid, g in gpus:
                gpu_ids[gid] = (name, g.index)
        return node_ids, gpu_ids, Cluster(tuple(out)), admin

    def _jobs(self, gpu_ids: dict[int, GpuRef]) -> list[_Job]:
        """Unfinished, unheld jobs in arrival order, each with its allocations."""
        conn = self.session.connection()
        rows = conn.execute(
            select(
                JobRow.id,
                JobRow.state,
                JobRow.held,
                JobRow.gpus,
                JobRow.priority,
                JobRow.job_class,
                JobRow.elastic_min,
                JobRow.elastic_max,
                JobRow.gpu_mem_mb,
                JobRow.datasets,
                JobRow.profile,
                JobRow.name,
                JobRow.user,
                JobRow.submit_time,
                JobRow.start_time,
                JobRow.reason,
                JobRow.mechanism,
                JobRow.retry_at,
                JobRow.image,
                JobRow.command,
            )
            .where(JobRow.state.not_in(sorted(FINISHED_STATES)))
            .order_by(JobRow.submit_time, JobRow.id)
        ).all()
        allocs: dict[int, list[tuple[int, str, float]]] = {}
        for job_id, gpu_id, mode, since in conn.execute(
            select(
                AllocationRow.job_id, AllocationRow.gpu_id, AllocationRow.mode, AllocationRow.since
            )
        ):
            allocs.setdefault(job_id, []).append((gpu_id, mode, since))
        out: list[_Job] = []
        for row in rows:
            job = self._job(row, allocs.pop(row[0], []), gpu_ids)
            if job is not None:
                out.append(job)
        for job_id in sorted(allocs):
            self.problems.append(
                f"job {job_id}: finished but still has allocation rows; they are ignored"
            )
        return out

    def _job(
        self, row: Any, allocs: list[tuple[int, str, float]], gpu_ids: dict[int, GpuRef]
    ) -> _Job | None:
        """One job row as a :class:`_Job`, or None (with a problem unless simply held)."""
        (row_id, st, held, gpus, prio, cls, lo, hi, mem, datasets, profile, name, user) = row[:13]
        submit_time, start_time, reason, mechanism, retry_at, image, command = row[13:]
        on_gpus = st in RUNNING_STATES or st in SUSPENDED_STATES
        if st in SUSPENDED_STATES and not allocs and not held:
            # Frozen on no GPU (a start that failed after its freeze was recorded, say):
            # nothing of it runs or holds anything, so it waits as a queued job.
            self.stranded.append(row_id)
            st, on_gpus = "PENDING", False
        if not on_gpus:
            waits = held or (retry_at is not None and retry_at > self.now)  # a start backed off
            if st in HELD_STATES or (st in QUEUED_STATES and waits):
                if allocs:
                    self.problems.append(f"job {row_id}: {st} (held) but holds GPUs; left out")
                return None
            if st not in QUEUED_STATES:
                self.problems.append(f"job {row_id}: unknown state {st!r}; left out")
                return None
            if allocs:
                self.problems.append(f"job {row_id}: {st} but holds GPUs; left out")
                return None
        elif not allocs:
            if held:  # suspended by an operator at a checkpoint: its GPUs were given back
                return None
            self.problems.append(f"job {row_id}: {st} but holds no GPUs; left out")
            return None
        priority = _PRIORITIES.get(prio)
        if priority is None:
            self.problems.append(f"job {row_id}: unknown priority {prio!r}; left out")
            return None
        job_class = _CLASSES.get(cls)
        if job_class is None:
            self.problems.append(f"job {row_id}: unknown class {cls!r}; left out")
            return None
        try:
            spec = JobSpec(
                core_job_id(row_id),
                gpus,
                submit_time=submit_time,
                priority=priority,
                job_class=job_class,
                elastic_min=lo,
                elastic_max=hi,
                gpu_mem_mb=mem,
                datasets=tuple(str(d).partition(":")[0] for d in datasets) if datasets else (),
                profile=job_kind(profile, image, command),
                name=name,
                user=user,
                # Unknown for a job that never ran: assumed, so that it may take turns with
                # jobs that only fit its GPUs' memory checkpointed; its first run tells.
                can_checkpoint=mechanism == MECHANISM_CHECKPOINT
                or (mechanism is None and not on_gpus),
            )
        except ValueError as exc:
            self.problems.append(f"job {row_id}: {exc}; left out")
            return None
        refs: list[GpuRef] = []
        for gpu_id, _, _ in allocs:
            ref = gpu_ids.get(gpu_id)
            if ref is None:
                self.problems.append(f"job {row_id}: holds a GPU of a node left out; left out")
                return None
            refs.append(ref)
        times = [since for _, _, since in allocs]
        return _Job(
            row_id,
            st,
            spec,
            start_time,
            reason,
            sorted(refs),
            {mode for _, mode, _ in allocs},
            min(times, default=submit_time),
            max(times, default=submit_time),
        )

    def _history(self) -> tuple[dict[tuple[int, str], float], dict[int, float]]:
        """The state history of the unfinished jobs, read once.

        Returns when each job last entered each state it passed through, and
        the seconds each spent in its closed running stretches (a stretch
        still open is counted by the core from ``last_resumed``).
        """
        rows = (
            self.session.connection()
            .execute(
                select(JobStateRow.job_id, JobStateRow.state, JobStateRow.at)
                .join(JobRow, JobRow.id == JobStateRow.job_id)
                .where(JobRow.state.not_in(sorted(FINISHED_STATES)))
                .order_by(JobStateRow.job_id, JobStateRow.at, JobStateRow.id)
            )
            .all()
        )
        # Rows come in time order: the last one of a state is when the job last entered it.
        entered = {(job_id, st): at for job_id, st, at in rows}
        return entered, run_times(rows)

    # ---- replaying -----------------------------------------------------

    def _submit(
        self, state: ClusterState, jobs: list[_Job], entered: dict[tuple[int, str], float]
    ) -> None:
        """Submit every job in arrival order; queued ones wait from when they were queued."""
        for job in jobs:
            since = job.spec.submit_time
            if job.state in QUEUED_STATES:
                since = max(
                    (entered.get((job.row_id, s), since) for s in QUEUED_STATES), default=since
                )
            state.submit(job.spec, since)

    def _place(
        self, state: ClusterState, jobs: list[_Job], entered: dict[tuple[int, str], float]
    ) -> list[_Job]:
        """Put jobs on their GPUs, oldest allocation first, then suspend the suspended ones."""
        on_gpus = [j for j in jobs if j.gpus]
        on_gpus.sort(key=lambda j: (j.first_alloc, state.jobs[core_job_id(j.row_id)].seq))
        placed: list[_Job] = []
        for job in on_gpus:
            job_id = core_job_id(job.row_id)
            key: GroupKey = tuple(job.gpus)
            why = self._unplaceable(state, key)
            if why is not None:
                self.problems.append(f"job {job.row_id}: {why}; left out")
                state.finish(job_id, self.now)
                continue
            ran = max(entered.get((job.row_id, s), job.last_alloc) for s in RUNNING_STATES)
            ran = max(ran, job.last_alloc)
            state.apply(Place(job_id, key, _mode(job.modes), _LOADED_REASON), ran)
            placed.append(job)
        for job in placed:
            if job.state in SUSPENDED_STATES:
                js = state.jobs[core_job_id(job.row_id)]
                stopped = max(
                    (entered.get((job.row_id, s), js.since) for s in SUSPENDED_STATES),
                    default=js.since,
                )
                state.apply(Suspend(js.id, _LOADED_REASON), max(stopped, js.since))
        state.dirty.clear()
        for key, members in state.groups.items():
            # A set whose runner finished since the last pass: the core hands the turn on.
            if not any(state.jobs[m].status is JobStatus.RUNNING for m in members):
                state.dirty[key] = None
        return placed

    @staticmethod
    def _unplaceable(state: ClusterState, key: GroupKey) -> str | None:
        """Why ``key`` cannot be taken as a whole or joined as an existing group (None: it can)."""
        if key in state.groups:
            return None
        for node, index in key:
            ns = state.nodes.get(node)
            if ns is None or index >= ns.size:
                return f"holds unknown GPU {node}:{index}"
            if ns.group_of[index] is not None:
                return f"GPU {node}:{index} is also held with a different GPU set"
        return None

    def _restore(self, state: ClusterState, jobs: list[_Job], placed: list[_Job]) -> None:
        """Set the history fields no decision sets: reasons, first run, pack and resize times.

        The core has no API to restore these; they are plain public fields of
        :class:`JobState` that none of its indexes depend on.
        """
        for job in jobs:
            js = state.jobs.get(core_job_id(job.row_id))
            if js is not None:
                js.reason = job.reason or ""
                if job.start_time is not None:  # kept through requeues, as in the core
                    js.first_run = job.start_time
        for job in placed:
            js = state.jobs[core_job_id(job.row_id)]
            if js.spec.elastic and js.held != js.spec.gpus:
                js.resized_at = job.last_alloc
            mode = state.mode_of(js.id)
            if mode is ShareMode.PACKED:
                # The pack began when its last member got its GPUs or resumed (a turn
                # taken packed): samples from before were taken with the GPUs to itself.
                js.packed_at = max(m.last_resumed for m in state.member_jobs(js.gpus))
            stored = ", ".join(sorted(job.modes))
            if job.modes != {mode.value}:
                self.problems.append(
                    f"job {job.row_id}: stored mode {stored} but the core has it {mode.value}"
                )

    @staticmethod
    def _attained(state: ClusterState, jobs: list[_Job], ran: dict[int, float]) -> None:
        """Set each job's attained service: its GPUs times its closed running stretches."""
        for job in jobs:
            js = state.jobs.get(core_job_id(job.row_id))
            if js is not None and job.row_id in ran:
                js.attained = job.spec.gpus * ran[job.row_id]

    def _observe(self, state: ClusterState) -> None:
        """Give each job its latest profile sample and the rate it made running alone."""
        if not state.jobs:
            return
        ranked = (
            select(
                ProfileRow.job_id,
                ProfileRow.at,
                ProfileRow.gpu_util,
                ProfileRow.memory_mb,
                ProfileRow.progress_rate,
                ProfileRow.since,
                func.row_number()
                .over(
                    partition_by=ProfileRow.job_id,
                    order_by=(ProfileRow.at.desc(), ProfileRow.id.desc()),
                )
                .label("rank"),
            )
            .join(JobRow, JobRow.id == ProfileRow.job_id)
            .where(JobRow.state.not_in(sorted(FINISHED_STATES)))
            .subquery()
        )
        conn = self.session.connection()
        rows = conn.execute(
            select(
                ranked.c.job_id,
                ranked.c.at,
                ranked.c.gpu_util,
                ranked.c.memory_mb,
                ranked.c.progress_rate,
                ranked.c.since,
            ).where(ranked.c.rank == 1)
        ).all()
        for row_id, at, util, mem, rate, since in rows:
            js = state.jobs.get(core_job_id(row_id))
            if js is None:
                continue
            state.observe(js.id, Observed(at, util, mem, rate, since))
            js.solo_rate = rate
            if js.packed_at is not None and at >= js.packed_at:
                js.solo_rate = conn.execute(
                    select(ProfileRow.progress_rate)
                    .where(ProfileRow.job_id == row_id, ProfileRow.at < js.packed_at)
                    .order_by(ProfileRow.at.desc(), ProfileRow.id.desc())
                    .limit(1)
                ).scalar()
