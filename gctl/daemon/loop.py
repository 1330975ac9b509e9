"""``gctl daemon``: the reactive and introspective loops over the store and the hosts.

Every tick (default 1 s) the daemon renews its lease, takes in what its
observations of the nodes found (:mod:`gctl.daemon.watch`: heartbeats,
progress, containers that ended), records the jobs that ended
(:mod:`gctl.daemon.ends`), reconciles nodes that came back, carries out
operator intents and runs the policy's reactive pass, so an exit or a node
change is acted on within about a second (a steady policy's pass is skipped
while nobody waits and nothing it acts on changed: :mod:`gctl.daemon.steady`).
The tick never waits on a host: observations and any host work that may
take long run on threads of their own (:mod:`gctl.daemon.inflight`), a
node that does not answer within its deadline is taken out of every
decision at once and marked down after the node timeout, so one hung host
delays nothing else. Between ticks the
daemon watches the store for new jobs and intents (:data:`WAKE_POLL`) and
starts the next tick when one arrives, once it has rested as long as the
last tick computed. On their own periods it
reconciles every node with the store (30 s) and runs the policy's
introspective pass (60 s): time slicing, packing, migration,
defragmentation, grow and shrink; each waits a few ticks for a tick with
room for it (:mod:`gctl.daemon.room`).

The daemon holds the store's lease, and every write it makes checks it
(:mod:`gctl.daemon.lease`): a daemon that lost it stops with a message and
writes nothing more. It checks the store itself at start and every
:data:`HEALTH_EVERY` seconds (by default) (:mod:`gctl.store.health`): a SQLite file
deleted, replaced or corrupted under it stops it with the reason, its jobs
left running. Stopping the daemon (SIGTERM, SIGINT) finishes the
current step, tells the hosts' watchdogs to stand down and gives the lease
back; jobs keep running on their hosts while no daemon runs, and the next
daemon adopts them. A daemon that dies without that (kill -9) is replaced
by the next one within the node timeout, or the watchdogs stop the jobs as
on a host cut off from it, and they restart from their checkpoints.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from gctl.config import site_policy
from gctl.core.opportunistic import Sharing, WithGuests
from gctl.core.policy import Policy
from gctl.core.tgs import RateControl
from gctl.daemon import (
    DAEMON_USER,
    dcgm,
    ends,
    gpumem,
    intents,
    lease,
    output,
    passes,
    steady,
    timelimits,
)
from gctl.daemon.batching import Balancer, BatchOptions
from gctl.daemon.gpumem import MemoryGuard
from gctl.daemon.health import Heartbeat
from gctl.daemon.inflight import Inflight, Work
from gctl.daemon.jobfiles import mirror_dir
from gctl.daemon.metrics import DaemonMetrics
from gctl.daemon.output import OutputOptions
from gctl.daemon.reconcile import reconcile
from gctl.daemon.room import Room
from gctl.daemon.site import DEFAULT_GRACE, Site
from gctl.daemon.throttles import Pair, Throttles
from gctl.daemon.watch import JobHere, Watch
from gctl.hosts.engine import container_name
from gctl.hosts.ssh import Pool
from gctl.services import events, hostops
from gctl.services.db import Store
from gctl.services.queue import ON_GPUS
from gctl.store.engine import acting_as, transaction
from gctl.store.health import StoreBroken, StoreHealth
from gctl.store.models import AllocationRow, GpuRow, IntentRow, JobRow, NodeRow, now

log = logging.getLogger("gctl.daemon")

FIRST_PRUNE = 60.0
"""Seconds after start before the first prune: a daemon restarted often still prunes."""
PRUNE_EVERY = 3600.0
"""Seconds between two passes forgetting what is past its retention (kept output, events)."""
CACHES_WAIT = 10.0
"""Seconds after start that decisions may wait for the first read of the nodes' dataset caches."""

Held = tuple[int, int, str, str, str, Any, int]
"""A job on GPUs, per GPU: id, attempt, node, class, state, operation, GPU id."""
Arrivals = tuple[int | None, int | None]
"""The newest job id and intent id in the store."""

SLOW_TICK_LOG_EVERY = 60.0
"""Seconds between two log lines about slow ticks (the metrics count every tick)."""

WAKE_POLL = 0.05
"""Seconds between looks at the store for new jobs and intents while waiting for a tick."""
STAND_DOWN_WITHIN = 5.0
"""Seconds a stopping daemon gives the watchdogs' standdown."""
HEALTH_EVERY = 10.0
"""Seconds between checks that the store is still the one opened, and sound."""


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """How often the daemon does what (seconds), and where it keeps its own files."""

    tick: float = 1.0
    introspect_every: float = 60.0
    heartbeat_every: float = 5.0
    reconcile_every: float = 30.0
    node_timeout: float = 60.0
    grace: float = DEFAULT_GRACE
    lease: float = lease.DEFAULT_LEASE
    state_dir: Path | None = None
    dcgm_dir: str | None = None
    answer_within: float | None = None
    """Seconds an observation of a node may take before the node is not responding."""
    health_every: float = HEALTH_EVERY
    """Seconds between checks that the store is still the one opened, and sound."""
    control_every: float = 1.0
    """Seconds between two rate-control steps of an opportunistic job beside a production job."""
    gpu_mem_grace: float = gpumem.DEFAULT_GRACE
    """Seconds a job may stay above its GPU memory limit before it is stopped."""
    colocate: bool = True
    """Whether opportunistic jobs may run beside production jobs, throttled (else idle only)."""
    rate_control: RateControl | None = field(default_factory=lambda: RateControl(confirm=2))
    """The TGS controller's options for opportunistic jobs beside production jobs; None runs
    them unthrottled (only to measure what the control is worth). A measured rate is noisy
    (a guest's piece of GPU work may or may not fall in a production job's window), so a miss
    is confirmed by a second sample."""
    batching: BatchOptions = field(default_factory=BatchOptions)
    output: OutputOptions = field(default_factory=OutputOptions)
    """How much of each removed job container's output is kept, on its node and in the store."""
    """Bounds of a data-parallel job's batch profile, and the least gain worth a new split."""

    def __post_init__(self) -> None:
        """Reject periods no loop can keep."""
        periods = ("tick", "introspect_every", "heartbeat_every", "reconcile_every", "lease")
        if not math.isfinite(self.gpu_mem_grace) or self.gpu_mem_grace < 0:
            raise ValueError("--gpu-mem-grace must be a number from 0")
        for name in (*periods, "node_timeout", "grace", "health_every", "control_every"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be a number above 0")
        if self.node_timeout < self.heartbeat_every:
            raise ValueError("--node-timeout must be at least --heartbeat-every")
        if self.lease < 2 * self.tick:
            raise ValueError("--lease must be at least twice --tick")

    @property
    def mirror_dir(self) -> Path:
        """Where the daemon keeps its copy of each job's checkpoint (a folder per store)."""
        return mirror_dir(self.state_dir)

    @property
    def deadline(self) -> float:
        """:attr:`answer_within`, or its default: 3 s (more for a slow tick), within the timeout."""
        if self.answer_within is not None:
            return self.answer_within
        return min(self.node_timeout, max(3.0, 2 * self.tick))


class Daemon:
    """One daemon over one store: call :meth:`run` until ``stop`` is set."""

    def __init__(
        self, store: Store, policy: Policy, config: DaemonConfig, metrics: DaemonMetrics
    ) -> None:
        self.store = store
        self.policy = WithGuests(policy, Sharing(colocate=config.colocate))
        self.config = config
        self.metrics = metrics
        self.epoch: int | None = None

    def run(
        self,
        stop: threading.Event,
        on_ready: Callable[[], None] | None = None,
        *,
        standby: bool = False,
        waiting: Callable[[str], None] | None = None,
    ) -> None:
        """Hold the lease and loop; returns when ``stop`` is set (lease given back).

        With ``standby`` it first waits for the lease to be free (``waiting``
        is told why it is not). Raises :class:`gctl.daemon.lease.Fenced` when
        another daemon takes the store over.
        """
        cfg = self.config
        if standby:
            epoch = lease.wait_for(self.store, stop, lease=cfg.lease, waiting=waiting)
            if epoch is None:
                return
        else:
            epoch = lease.acquire(self.store, lease=cfg.lease)
        self.epoch = epoch
        fenced = lease.fenced(self.store, epoch, lease=cfg.lease)
        store = dataclasses.replace(fenced, engine=acting_as(fenced.engine, DAEMON_USER))
        health = StoreHealth(store)
        try:
            health.check()
        except StoreBroken:
            lease.release(self.store, epoch)
            raise
        pool = Pool()
        inflight = Inflight()
        site = Site(
            store,
            pool,
            cfg.mirror_dir,
            cfg.grace,
            epoch=epoch,
            policy=site_policy(),
            output=cfg.output,
        )
        watch = Watch(
            site,
            inflight,
            heartbeat_every=cfg.heartbeat_every,
            answer_within=cfg.deadline,
            lease_timeout=cfg.node_timeout,
            control_every=cfg.control_every,
        )
        loop = _Loop(self, site, watch, inflight)
        slow = _SlowTicks(max(1.0, 2 * cfg.tick))
        checked = time.monotonic()
        try:
            if on_ready is not None:
                on_ready()
            while not stop.is_set():
                started = time.monotonic()
                if started - checked >= cfg.health_every:
                    checked = started
                    health.check()
                try:
                    renewed = lease.renew(store, epoch)
                except SQLAlchemyError:
                    health.check()  # a store gone bad says so; else the error stands
                    raise
                if not renewed:
                    lease.check_held(store, epoch)
                seen = _arrivals(store)
                cpu = time.thread_time()
                loop.tick()
                took = time.monotonic() - started
                self.metrics.ticked(took)
                slow.note(took, loop.steps)
                rest = time.thread_time() - cpu
                _wait(store, stop, started + cfg.tick, seen, inflight, rest=rest)
            loop.stand_down()
        except StoreBroken:
            loop.stand_down()  # the jobs keep running; a daemon on a sound store takes them on
            raise
        finally:
            watch.close()
            inflight.close()
            site.close()
            pool.close()
            try:
                lease.release(self.store, epoch)
            except SQLAlchemyError as exc:  # the store may be what stopped the daemon
                log.warning("could not give the lease back: %s", exc)


class _Loop:
    """The steps of one daemon's ticks, and when the periodic ones are due."""

    def __init__(self, daemon: Daemon, site: Site, watch: Watch, inflight: Inflight) -> None:
        self.daemon = daemon
        self.cfg = daemon.config
        self.site = site
        self.watch = watch
        self.inflight = inflight
        self.heartbeat = Heartbeat(self.cfg.node_timeout, self.cfg.deadline)
        at = self.started = now()
        self.due = {
            "reconcile": at + self.cfg.reconcile_every,
            "introspect": at + self.cfg.introspect_every,
            "dcgm": at,
            "prune": at + FIRST_PRUNE,
        }
        self._dcgm: Work | None = None
        self._learning: Work | None = None
        self._nodes: dict[str, NodeRow] = {}
        self._reader = hostops.NodeReader()
        lease_s = max(5.0, 5 * self.cfg.control_every)
        control = self.cfg.rate_control
        self.throttles = Throttles(control, lease=lease_s) if control is not None else None
        self.balancer = Balancer(self.cfg.batching)
        self.guard = MemoryGuard(self.cfg.gpu_mem_grace)
        self.steps = _Steps()
        self.gate = steady.Gate(daemon.policy)
        self.room = Room(self.cfg.tick)

    def tick(self) -> None:
        """One tick: take in observations and finished work, reconcile, decide, act."""
        self.steps = _Steps()
        try:
            self._tick(now(), time.monotonic())
        finally:
            self.room.note(self.steps.took)

    def _tick(self, at: float, began: float) -> None:
        """The steps of :meth:`tick`, begun at ``at`` (store time) and ``began`` (monotonic)."""
        cfg, site, watch = self.cfg, self.site, self.watch
        nodes, gpus, jobs = self._nodes_and_jobs()
        self._nodes = nodes
        watch.look(nodes, gpus, jobs, self.throttles, self.guard.nodes())
        self.steps.took["look"] = time.monotonic() - began
        seen = watch.collect()
        over = self.guard.check(seen)
        if over:
            self.steps.run("gpu-mem", lambda: gpumem.stop(site, over, self.inflight))
        throttles = self.throttles
        if throttles is not None:
            throttles.feed(seen)
            self.steps.run("throttle", lambda: throttles.record(site.store))
            self.daemon.metrics.throttled(throttles.gauges())
        overdue = watch.overdue()
        self.steps.run("heartbeat", lambda: self.heartbeat.record(site, seen, overdue, at))
        if any(o.full and o.error is None for o in seen):
            self.steps.run("profile", lambda: passes.record_profiles(site, seen, watch.samples))
        self.steps.run("ends", lambda: ends.settle(site, watch.latest, self.inflight))
        self.steps.run("time-limits", self._time_limits)
        self.inflight.collect()
        if self._due("reconcile", cfg.reconcile_every, at, began, "reactive"):
            self.steps.run("reconcile", lambda: reconcile(site, watch, self.inflight))
            self._learn_caches()
        elif watch.unreconciled:
            self.steps.run(
                "reconcile-nodes",
                lambda: reconcile(site, watch, self.inflight, watch.unreconciled),
            )
        self.steps.run("intents", lambda: intents.carry_out(site, self.inflight))
        decided = self.daemon.metrics.decided
        if watch.settling or self._reading_caches(at):  # the first looks come first
            return
        until = self.room.waits_until(began)
        self.steps.run("reactive", lambda: self._react(until))
        if self._due("introspect", cfg.introspect_every, at, began, "balance"):
            self.steps.run(
                "introspect",
                lambda: passes.introspective_pass(
                    site,
                    self.daemon.policy,
                    now(),
                    decided,
                    self.inflight,
                    watch.blocked,
                    until=until,
                ),
            )
            self.steps.run("balance", self._balance)
        if at >= self.due["prune"]:
            self.due["prune"] = at + PRUNE_EVERY
            self._prune(at)
        idle = self._dcgm is None or self._dcgm.future.done()
        if cfg.dcgm_dir and at >= self.due["dcgm"] and idle:
            self.due["dcgm"] = at + cfg.heartbeat_every
            directory = str(cfg.dcgm_dir)
            self._dcgm = self.inflight.submit(
                "dcgm job mapping", lambda: dcgm.sync(site.store, site.pool, directory)
            )

    def _due(self, name: str, period: float, at: float, began: float, *after: str) -> bool:
        """Whether the periodic step ``name`` runs in this tick; if it does, when it is due next.

        It runs once due and the tick has room for it and the steps ``after``
        it (:class:`gctl.daemon.room.Room`).
        """
        spent = time.monotonic() - began
        if not self.room.allows(at - self.due[name], period, spent, name, *after):
            return False
        self.due[name] = at + period
        return True

    def _react(self, until: float) -> None:
        """The reactive pass, unless nobody waits and nothing changed (:mod:`.steady`).

        It stops waiting for its host actions at ``until`` (monotonic).
        """
        site, blocked, metrics = self.site, self.watch.blocked, self.daemon.metrics
        applied = self.gate.run(
            site.store.engine,
            blocked,
            lambda: passes.reactive_pass(
                site,
                self.daemon.policy,
                now(),
                metrics.decided,
                self.inflight,
                blocked,
                until=until,
            ),
        )
        if applied is None:
            metrics.skipped()

    def _reading_caches(self, at: float) -> bool:
        """Whether decisions wait for the first read of the nodes' caches (at most CACHES_WAIT s).

        Without it a daemon just started would place by dataset affinity
        knowing no copy, and fill from the source what a node already holds.
        """
        if self._learning is None:
            self._learn_caches()
        first = self._learning
        return first is not None and not first.future.done() and at < self.started + CACHES_WAIT

    def _learn_caches(self) -> None:
        """Read the dataset caches of nodes not read yet, in the background, one read at a time."""
        fills = self.site.fills
        todo = [
            n
            for name, n in self._nodes.items()
            if name not in fills.learned and n.last_error is None
        ]
        if todo and (self._learning is None or self._learning.future.done()):
            self._learning = self.inflight.submit(
                "reading the nodes' dataset caches", partial(fills.learn, todo)
            )

    def _prune(self, at: float) -> None:
        """Forget what is past its retention: old jobs' kept output, and old events."""
        site, keep = self.site, self.cfg.output.keep_days
        if keep > 0:
            self.inflight.submit(
                "forgetting old jobs' kept output",
                partial(output.prune, site.pool, site.store, site.store_id, at - keep * 86400),
            )
        days = site.policy.events_keep_days
        if days > 0:
            self.steps.run(
                "prune-events", lambda: events.prune_before(site.store, at - days * 86400)
            )

    def _time_limits(self) -> None:
        """Stop the running jobs past their ``--time`` (:mod:`gctl.daemon.timelimits`)."""
        due = timelimits.expired(self.site.store, now(), self.inflight.busy_jobs)
        if due:
            timelimits.stop(self.site, due, self.inflight)

    def _balance(self) -> None:
        """Profile and split the batches of data-parallel jobs (:mod:`gctl.daemon.batching`)."""
        reports = {
            job_id: (o.attempts[job_id], report)
            for o in self.watch.latest.values()
            for job_id, report in o.reports.items()
            if job_id in o.attempts
        }
        predict = self.site.learned.interference(self.site.store.engine)
        writes = self.balancer.decide(self.site, reports, predict)
        self.balancer.send(self.site, self.inflight, writes)

    def _nodes_and_jobs(
        self,
    ) -> tuple[dict[str, NodeRow], hostops.NodeGpus, dict[str, list[JobHere]]]:
        """Every node and its GPUs, and the jobs holding GPUs on each; the pairs updated."""
        with transaction(self.site.store.engine, write=False) as s:
            nodes, node_gpus = self._reader.read(s)
            held: list[Held] = [
                (r[0], r[1], r[2], r[3], r[4], r[5], r[6])
                for r in s.execute(
                    select(
                        JobRow.id,
                        JobRow.attempt,
                        NodeRow.name,
                        JobRow.job_class,
                        JobRow.state,
                        JobRow.op,
                        AllocationRow.gpu_id,
                    )
                    .join(AllocationRow, AllocationRow.job_id == JobRow.id)
                    .join(GpuRow, GpuRow.id == AllocationRow.gpu_id)
                    .join(NodeRow, NodeRow.id == GpuRow.node_id)
                    .where(JobRow.state.in_(sorted(ON_GPUS)))
                )
            ]
        home: dict[int, str] = {}
        gpus: dict[int, set[int]] = defaultdict(set)
        for job_id, _, node, _, _, _, gpu in held:
            home[job_id] = min(node, home.get(job_id, node))
            gpus[job_id].add(gpu)
        jobs: dict[str, list[JobHere]] = defaultdict(list)
        for job_id, attempt, node in dict.fromkeys((j, a, n) for j, a, n, *_ in held):
            jobs[node].append(JobHere(job_id, attempt, home[job_id] == node))
        if self.throttles is not None:
            self.throttles.update(self._pairs(nodes, held, home, gpus))
        return nodes, node_gpus, jobs

    def _pairs(
        self,
        nodes: dict[str, NodeRow],
        held: Sequence[Held],
        home: dict[int, str],
        gpus: dict[int, set[int]],
    ) -> list[Pair]:
        """Opportunistic jobs running on exactly the GPUs of one production job running alone."""
        running = {
            j: (a, cls) for j, a, _, cls, st, op, _ in held if st == "RUNNING" and op is None
        }
        holders: dict[int, list[int]] = defaultdict(list)
        for job_id, *_, gpu in held:
            holders[gpu].append(job_id)
        sid = self.site.store_id
        out: list[Pair] = []
        for guest, (attempt, cls) in running.items():
            if cls != "opportunistic":
                continue
            others = {j for g in gpus[guest] for j in holders[g] if j != guest}
            if len(others) != 1:
                continue
            host = next(iter(others))
            if host not in running or gpus[host] != gpus[guest]:
                continue
            node = nodes[home[guest]]
            tdir = f"{hostops.store_dir(node, sid)}/throttles/{guest}"
            name = container_name(sid, guest, attempt, node.name)
            out.append(Pair(guest, attempt, host, node.name, name, tdir))
        return out

    def stand_down(self) -> None:
        """Tell the answering nodes' watchdogs that the daemon stops on purpose (best effort).

        The nodes are those the last tick read: the store may be what failed.
        Each is told through its running agent (one line on the open
        channel), not a new agent per node: at a thousand nodes, a process
        started on each host would not all be done within
        :data:`STAND_DOWN_WITHIN`. The looks stop first: a heartbeat after
        the stand-down would renew the lease as the daemon's.
        """
        self.watch.close()
        site = self.site
        for row in self._nodes.values():
            if row.name in self.watch.not_responding:
                continue
            request = {"dir": hostops.agent_dir(row, site.store_id)}
            self.inflight.submit(
                f"standdown on {row.name}",
                partial(
                    site.agents.ask,
                    hostops.target(row),
                    "standdown",
                    request,
                    STAND_DOWN_WITHIN,
                ),
            )
        self.inflight.wait(STAND_DOWN_WITHIN)


def _arrivals(store: Store) -> Arrivals:
    """The newest job and intent ids: they change when work arrives from outside.

    The daemon itself never adds a job or an intent, so its own writes do
    not wake it.
    """
    with transaction(store.engine, write=False) as s:
        newest = s.execute(
            select(
                select(func.max(JobRow.id)).scalar_subquery(),
                select(func.max(IntentRow.id)).scalar_subquery(),
            )
        ).one()
    return newest[0], newest[1]


def _wait(
    store: Store,
    stop: threading.Event,
    until: float,
    seen: Arrivals,
    inflight: Inflight,
    rest: float = 0.0,
) -> None:
    """Sleep until ``until`` (monotonic), ``stop``, or a new job or intent in the store.

    Host work that ends meanwhile is collected (:meth:`Inflight.collect`):
    a container start that outlasted its pass is recorded as it ends, not
    at the next tick.

    A new job or intent ends the wait only after ``rest`` seconds (the CPU
    time the last tick took): a stream of submissions, each waking a tick,
    still leaves the daemon's other threads, its looks at the nodes, at
    least half of the interpreter. At 1,000 nodes a tick computes for a
    few hundred milliseconds; at 5 submissions a second, ticks back to back
    starved the heartbeats. A tick's waits (for container starts) cost no
    rest, so a small site's submissions still start at once.
    """
    calm = time.monotonic() + rest
    while (left := until - time.monotonic()) > 0:
        if stop.wait(min(left, WAKE_POLL)):
            return
        inflight.collect()
        if time.monotonic() < calm:
            continue
        try:
            if _arrivals(store) != seen:
                return
        except SQLAlchemyError:  # the store is away: the tick reports it
            return


class _Steps:
    """One tick's steps: each run so that its failure is logged and the loop goes on.

    Losing the lease is not a step's failure: it stops the daemon. How long
    each step took is kept, for the log line of a slow tick.
    """

    def __init__(self) -> None:
        """No step run yet."""
        self.took: dict[str, float] = defaultdict(float)

    def run(self, name: str, step: Callable[[], object]) -> None:
        """Run one step; a failure is logged and the loop goes on (the next tick retries)."""
        began = time.monotonic()
        try:
            step()
        except lease.Fenced:
            raise
        except OperationalError as exc:
            # The store went away or ended the session (a PostgreSQL timeout, a restart): the
            # next tick's lease renewal tells whether the daemon may go on; no traceback helps.
            said = str(exc.orig).strip().splitlines()
            log.warning(
                "%s step failed: store: %s", name, said[0] if said else type(exc.orig).__name__
            )
        except Exception:  # the loop must outlive any one step; the traceback goes to the log
            log.exception("%s step failed", name)
        finally:
            self.took[name] += time.monotonic() - began

    def slowest(self, count: int = 3) -> str:
        """The ``count`` steps that took longest, as ``reactive 2.10s, ends 0.40s``."""
        ranked = sorted(self.took.items(), key=lambda kv: -kv[1])[:count]
        return ", ".join(f"{name} {seconds:.2f}s" for name, seconds in ranked)


class _SlowTicks:
    """Logs ticks longer than ``limit`` seconds with their slowest steps, once a minute at most."""

    def __init__(self, limit: float) -> None:
        """None seen yet."""
        self.limit = limit
        self.count = 0
        self.quiet_until = 0.0

    def note(self, took: float, steps: _Steps) -> None:
        """Count a tick of ``took`` seconds; log it when slow and the last line is old enough."""
        if took <= self.limit:
            return
        self.count += 1
        mono = time.monotonic()
        if mono < self.quiet_until:
            return
        log.warning(
            "slow tick: %.2fs (%d over %gs since the last such line); slowest steps: %s",
            took,
            self.count,
            self.limit,
            steps.slowest(),
        )
        self.count, self.quiet_until = 0, mono + SLOW_TICK_LOG_EVERY
