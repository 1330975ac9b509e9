"""Discrete-event simulator: a virtual clock driving the scheduler core.

Arrivals and finishes call the policy's reactive ``schedule``; a periodic
tick calls ``introspect`` while the policy wants it. A policy that can say
when its next pass could decide anything (:class:`gctl.core.policy.Waking`)
is not ticked before then: the clock jumps over passes that change nothing.
The decisions come back already committed to the :class:`ClusterState`;
:meth:`Simulator._effects` is the simulator's one place that turns them into
consequences (job speeds, overhead, counters), as ``gctl/daemon/apply.py``
does for real hosts.

Progress is tracked lazily: a job's remaining work is settled only when its
speed changes, and its finish is a heap event invalidated by a version
number whenever the speed changes again.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gctl.core.decisions import MOVES, Decision, Grow, Migrate, Pack, Place, Resume, Suspend
from gctl.core.interference import Interference
from gctl.core.model import Cluster, JobStatus, Observed
from gctl.core.opportunistic import Sharing, WithGuests
from gctl.core.policy import Policy
from gctl.core.state import ClusterState, GroupKey
from gctl.sim import perf, profiles
from gctl.sim.datasets import Caches, DataModel
from gctl.sim.metrics import Counters, JobRecord, Metrics, summarize
from gctl.sim.pairs import table_interference
from gctl.sim.workload import TraceJob

_ARRIVAL, _FINISH, _TICK = 0, 1, 2
_NEW_GPUS = (Place, Migrate, Grow)
"""Decisions that may put a job on nodes lacking its datasets."""
_EPS = 1e-9


@dataclass(slots=True)
class _Run:
    """Engine-side progress of one job."""

    job: TraceJob
    profile: profiles.ModelProfile
    work_left: float
    speed: float = 0.0
    last: float = 0.0
    version: int = 0
    key: GroupKey = ()
    stale: bool = False
    resume_cost: float = 0.0
    move_cost: float = 0.0


@dataclass(frozen=True, slots=True)
class SimResult:
    """What a simulation produced."""

    policy: str
    metrics: Metrics
    rejected: tuple[str, ...]
    unfinished: tuple[str, ...]
    events: int
    wall_seconds: float
    classes: dict[str, Metrics] = field(default_factory=dict)
    """Job times by job class (production, opportunistic), when the trace has both."""
    queue: tuple[tuple[float, int], ...] = ()
    """The queue length over time: ``(time, jobs waiting)`` whenever it changed after an
    event, and once more at the end. Waiting jobs are pending production jobs (never
    placed, or requeued) and opportunistic jobs waiting for GPUs; suspended ones are not."""


@dataclass
class Simulator:
    """Replays trace jobs on a cluster under one policy."""

    cluster: Cluster
    policy: Policy
    perf_config: perf.PerfConfig = field(default_factory=perf.PerfConfig)
    tick: float = 60.0
    horizon: float | None = None
    sharing: Sharing = field(default_factory=Sharing)
    interference: Interference | None = field(default_factory=table_interference)
    """What the policy may predict interference from (the pair table by default; none when
    the performance model leaves packing's effect out)."""
    data: DataModel | None = None
    """The jobs' datasets and their copy times (:mod:`gctl.sim.datasets`); None: no datasets."""

    def run(
        self, jobs: Sequence[TraceJob], progress: Callable[[int, int], None] | None = None
    ) -> SimResult:
        """Simulate ``jobs`` to completion (or to ``horizon``) and summarise."""
        started = time.perf_counter()
        total = self.cluster.total_gpus
        self.state = ClusterState(self.cluster)
        # the pair table describes the packing effect; the plain model has none
        self.state.interference = self.interference if self.perf_config.packing else None
        self.state.work_done = self.work_done
        self.caches = Caches(self.data) if self.data is not None else None
        self.driven = WithGuests(self.policy, self.sharing)
        self.runs: dict[str, _Run] = {}
        self.counters = Counters()
        self.records: list[JobRecord] = []
        self.heap: list[tuple[float, int, int, str, int]] = []
        self.busy_groups: dict[GroupKey, int] = {}
        self.busy_guests: dict[str, int] = {}
        self.order = 0
        self.busy = 0
        self.busy_seconds = 0.0
        self.clock = 0.0
        rejected = tuple(j.spec.id for j in jobs if j.spec.gpus > total)
        accepted = [j for j in jobs if j.spec.gpus <= total]
        cfg = self.perf_config
        for j in accepted:
            model = j.spec.profile
            self.runs[j.spec.id] = _Run(
                j,
                profiles.profile_for(model),
                j.duration,
                resume_cost=perf.resume_cost(model, cfg),
                move_cost=perf.move_cost(model, cfg),
            )
            self._push(j.spec.submit_time, _ARRIVAL, j.spec.id)
        tick_at: float | None = None
        tick_version = 0
        events = 0
        done = 0
        pending = self.state.pending
        guests = self.state.guest_queue
        queue: list[tuple[float, int]] = []
        waiting = -1
        while self.heap:
            when, _, kind, job_id, version = heapq.heappop(self.heap)
            if self.horizon is not None and when > self.horizon:
                break
            if kind == _FINISH:
                run = self.runs.get(job_id)
                if run is None or run.version != version:
                    continue
            elif kind == _TICK and version != tick_version:
                continue
            self._advance(when)
            events += 1
            if kind == _ARRIVAL:
                self.state.submit(self.runs[job_id].job.spec, when)
                decisions = self.driven.schedule(self.state, when)
            elif kind == _FINISH:
                self._finish(job_id, when)
                done += 1
                if progress is not None:
                    progress(done, len(accepted))
                decisions = self.driven.schedule(self.state, when)
            else:
                tick_at = None
                decisions = self.driven.introspect(self.state, when)
            samples = self.state.samples
            self._effects(decisions, when)
            if self.state.guest_queue and self.state.samples != samples:
                # Jobs just measured may leave room for guests beside them, as on hosts.
                self._effects(self.driven.guests(self.state, when), when)
            if (now_waiting := sum(map(len, pending.values())) + len(guests)) != waiting:
                waiting = now_waiting
                queue.append((when, waiting))
            due = self._wake_at(when)
            if due is not None and (tick_at is None or due < tick_at):
                tick_version += 1
                tick_at = due
                self._push(due, _TICK, "", tick_version)
        if queue and queue[-1][0] < self.clock:
            queue.append((self.clock, waiting))
        unfinished = tuple(self.runs)
        for job_id in unfinished:
            js = self.state.jobs.get(job_id)
            spec = self.runs[job_id].job.spec
            first = self._started(job_id, js.first_run if js is not None else None)
            self.records.append(
                JobRecord(
                    job_id, spec.gpus, spec.submit_time, first, None, *self.counters.of_job(job_id)
                )
            )
        metrics = summarize(self.records, self.counters, self.busy_seconds, total)
        return SimResult(
            self.policy.name,
            metrics,
            rejected,
            unfinished,
            events,
            time.perf_counter() - started,
            self._by_class(accepted),
            tuple(queue),
        )

    def _by_class(self, jobs: Sequence[TraceJob]) -> dict[str, Metrics]:
        """Each job class's times (no counts or utilisation), when there is more than one."""
        of = {j.spec.id: j.spec.job_class.value for j in jobs}
        if len(set(of.values())) < 2:
            return {}
        split: dict[str, list[JobRecord]] = {}
        for r in self.records:
            split.setdefault(of[r.job_id], []).append(r)
        return {c: summarize(rs, Counters(), 0.0, 0) for c, rs in sorted(split.items())}

    def work_done(self, job_id: str) -> float | None:
        """The fraction of an unfinished job's work done as of the clock (None: not in the run).

        Overheads charged to the job (a resume, a move) count as work still to
        do, so a move sets the fraction back by its cost.
        """
        run = self.runs.get(job_id)
        if run is None:
            return None
        left = run.work_left - run.speed * (self.clock - run.last)
        return min(max(1.0 - left / run.job.duration, 0.0), 1.0) if run.job.duration > 0 else 0.0

    # ---- clock and events ---------------------------------------------

    def _wake_at(self, now: float) -> float | None:
        """When to tick next: a tick after ``now``, or later when the policy says so."""
        due = self.driven.wake_at(self.state, now)
        return None if due is None else max(due, now + self.tick)

    def _push(self, when: float, kind: int, job_id: str, version: int = 0) -> None:
        self.order += 1
        heapq.heappush(self.heap, (when, self.order, kind, job_id, version))

    def _reading(self, node: str) -> set[str]:
        """The datasets of the jobs holding GPUs on ``node``."""
        jobs = self.state.jobs
        return {
            d
            for run in self.runs.values()
            if (js := jobs.get(run.job.spec.id)) is not None and any(n == node for n, _ in js.gpus)
            for d in run.job.spec.datasets
        }

    def _started(self, job_id: str, first_run: float | None) -> float | None:
        """When a job first made progress: its first placement, after any copy it waited for."""
        if first_run is None or self.caches is None:
            return first_run
        return first_run + self.caches.first_wait.get(job_id, 0.0)

    def _advance(self, now: float) -> None:
        self.busy_seconds += self.busy * (now - self.clock)
        self.clock = now

    def _finish(self, job_id: str, now: float) -> None:
        run = self.runs.pop(job_id)
        js = self.state.finish(job_id, now)
        spec = run.job.spec
        self.records.append(
            JobRecord(
                job_id,
                spec.gpus,
                spec.submit_time,
                self._started(job_id, js.first_run),
                now,
                *self.counters.of_job(job_id),
            )
        )
        self._refresh({run.key: None}, {job_id: None}, now)

    # ---- the one place decisions take effect --------------------------

    def _effects(self, decisions: list[Decision], now: float) -> None:
        """Charge overheads, count decisions, and re-time every job they touched."""
        touched: dict[str, None] = {}
        keys: dict[GroupKey, None] = {}
        for d in decisions:
            self.counters.count(d)
            run = self.runs[d.job_id]
            gpus = self.state.jobs[d.job_id].gpus
            self._settle(run, now)
            kind = type(d)
            if kind is Resume:
                run.work_left += run.resume_cost
            elif isinstance(d, Suspend) and d.checkpoint:
                # Its resume is a restart from the checkpoint: a move's cost, not a thaw's.
                run.work_left += max(run.move_cost - run.resume_cost, 0.0)
            elif kind in MOVES or (kind is Pack and run.key != gpus):
                run.work_left += run.move_cost
            if self.caches is not None and kind in _NEW_GPUS and run.job.spec.datasets:
                caches = self.caches
                run.work_left += caches.copy(
                    d.job_id, run.job.spec.datasets, gpus, now, self._reading
                )
                if caches.model.affinity:
                    for node in dict.fromkeys(n for n, _ in gpus):
                        self.state.cached[node] = caches.names(node)
            run.stale = True
            touched[d.job_id] = None
            keys[run.key] = keys[gpus] = None
            run.key = gpus
        self._refresh(keys, touched, now)

    def _refresh(self, keys: dict[GroupKey, None], touched: dict[str, None], now: float) -> None:
        """Recount busy GPUs of the changed GPU sets ``keys`` and re-time the jobs on them.

        Every job on them is re-timed, with the ``touched`` jobs: a job's
        speed depends on who else runs on its GPUs, and a time-slice turn
        may hand a runner a new pack partner. A guest's GPUs count as busy
        where no running production group holds them.
        """
        state = self.state
        groups: dict[GroupKey, None] = {}
        for key in keys:
            if key:
                groups[key] = None
                if state.guest_on:
                    groups.update(dict.fromkeys(state.groups_over(key)))
                    touched.update(dict.fromkeys(state.guests_over(key)))
        for key in groups:
            self.busy -= self.busy_groups.pop(key, 0)
            members = state.groups.get(key, ())
            running = [m for m in members if state.jobs[m].status is JobStatus.RUNNING]
            if running:
                self.busy_groups[key] = len(key)
                self.busy += len(key)
                if len(running) > 1:
                    self.counters.packed.update(dict.fromkeys(running))
            touched.update(dict.fromkeys(members))
        guests = self.busy_guests or state.guests
        for job_id in touched:
            if guests and (job_id in self.busy_guests or job_id in state.guests):
                self.busy -= self.busy_guests.pop(job_id, 0)
                js = state.jobs.get(job_id)
                if (
                    js is not None
                    and js.status is JobStatus.RUNNING
                    and not any(self._running(k) for k in state.groups_over(js.gpus))
                ):
                    self.busy_guests[job_id] = len(js.gpus)
                    self.busy += len(js.gpus)
            if job_id in self.runs:
                self._retime(job_id, now)

    def _running(self, key: GroupKey) -> bool:
        """Whether a job of the group on ``key`` runs."""
        jobs = self.state.jobs
        return any(jobs[m].status is JobStatus.RUNNING for m in self.state.groups.get(key, ()))

    def _settle(self, run: _Run, now: float) -> None:
        run.work_left -= run.speed * (now - run.last)
        run.last = now

    def _retime(self, job_id: str, now: float) -> None:
        """Recompute a job's speed; re-plan its finish unless nothing about it changed."""
        run = self.runs[job_id]
        js = self.state.jobs[job_id]
        speed = perf.speed(self.state, js, run.profile, self.perf_config)
        if speed == run.speed and not run.stale:
            return
        self._settle(run, now)
        run.stale = False
        run.speed = speed
        run.version += 1
        if speed > 0:
            seen = js.observed
            packed = js.packed_at
            if seen is None or seen.progress_rate != speed or (packed and seen.at < packed):
                prof = run.profile
                # its share of the GPU's time: busier on a slower GPU, less when it runs
                # slower for other reasons (a partner, locality)
                r = perf.type_speed(self.state, js, self.perf_config)
                util = min(perf.busy_util(prof.gpu_util, r) * speed / r, 1.0)
                self.state.observe(job_id, Observed(now, util, prof.gpu_mem_mb, speed))
            finish = now + max(run.work_left, 0.0) / run.speed
            self._push(finish + _EPS, _FINISH, job_id, run.version)
