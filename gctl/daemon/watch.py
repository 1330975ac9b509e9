"""Watching the nodes off the daemon's tick: observations, deadlines, and who is not answering.

An *observation* of a node lists the store's containers on it (every tick
for a node with jobs, so an exit is seen within about a second) and, every
heartbeat, also samples its GPUs, renews its watchdog's lease and reads the
progress reports of the jobs whose directory it holds; a job that ended
gets its report read, and its directory copied into the daemon's mirror
when it stopped before its end, at once. A look is one request to the
node's long-running host agent (:mod:`gctl.hosts.agent_link`), which lists
the containers through the engine's unix socket before it reads the
reports, so a report read for an exit seen is the job's last; where the
engine has no such socket, the engine's API over SSH lists them and the
reports of the jobs that ended are read again after it. Observations run
on threads of their own, at most one per node at a time; the tick only
collects those that ended. An observation that has not answered within
its deadline, counted from when a thread began it, marks the node *not
responding* right away, whatever the SSH timeouts, and the node stays so
until an observation answers again. A node whose looks keep failing is
looked at less and less often: the wait doubles from the heartbeat period
up to :data:`MAX_RETRY`.

:data:`OBSERVERS` threads take the looks due, heartbeats (which renew the
watchdogs' leases) before the light looks at nodes with jobs, the longest
due first. A heartbeat is started when it is due by a thread of the
watch's own, not at the daemon's next tick, which under load at a
thousand nodes can come seconds later; and each node's heartbeats are
planned a period apart less how late they lately began (in a queue behind
other looks), so the time between two stays within the period.

A look still running after :data:`STUCK_AFTER` seconds (a host that
hangs, until its SSH timeout) keeps its thread but gives its place to a
new one (:mod:`gctl.daemon.deadline_pool`), so hosts that hang, up to
:data:`THREADS` less :data:`OBSERVERS` at once, never hold up the looks at
the others, nor the leases of their watchdogs. (Not at the deadline: under
load, looks slower than that are many, and a thread for each would only
share the same CPU among more of them.)

A node that was not responding, or that the daemon has just started
watching, is *unreconciled*: no decision may act on it until reconcile has
compared it with the store on a trustworthy observation (one taken while no
action of the daemon's ran there), so a host that comes back gets its stale
containers stopped before it gets any new work.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from gctl.daemon import jobfiles
from gctl.daemon.deadline_pool import DeadlinePool, Task
from gctl.daemon.inflight import Inflight
from gctl.daemon.site import Site
from gctl.hosts.engine import ContainerState, listed_states, owned_labels
from gctl.hosts.ssh import HostError
from gctl.services import hostops, telemetry
from gctl.services.telemetry import NodeSample
from gctl.store.models import NodeRow, now

log = logging.getLogger("gctl.daemon")

if TYPE_CHECKING:
    from gctl.daemon.throttles import Throttles

OBSERVERS = 32
"""Threads observing nodes at once, not counting those of stuck looks (:data:`STUCK_AFTER`)."""
THREADS = 128
"""Threads observing nodes at most, those of stuck looks (hosts that hang) included."""
STUCK_AFTER = 10.0
"""Seconds after which a look still running is taken as stuck, and its thread's place given."""
MAX_RETRY = 30.0
"""Longest wait between two looks at a node that keeps failing them (the back-off's cap)."""
MAX_LATE = 0.2
"""Most share of the period by which heartbeats are planned early (:meth:`Watch._plan`)."""


@dataclass(frozen=True, slots=True)
class JobHere:
    """A job holding GPUs of a node, as an observation of that node needs it."""

    job_id: int
    attempt: int
    home: bool
    """Whether this node holds the job directory that counts (the job's first node)."""


@dataclass(frozen=True, slots=True)
class _Given:
    """What the watch's last :meth:`Watch.look` was given: the nodes, and which are fast."""

    nodes: Mapping[str, NodeRow]
    gpus: hostops.NodeGpus
    jobs: Mapping[str, list[JobHere]]
    fast: Collection[str]
    """Nodes whose full looks the daemon's tick starts (rate control, GPU memory limit)."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What one look at a node found, or why it could not look.

    ``began`` is the store time it began, ``seq`` the node's action count
    then (:meth:`gctl.daemon.inflight.Inflight.seq`). ``reports`` are the
    job reports read, by job id, each of the attempt ``attempts`` names (the
    job's current one when the look began); ``boot_time`` and
    ``engine_start`` are when the host booted and its Docker engine started
    (when known); ``throttled`` is, by throttle directory, since when (the
    host's clock) each throttle set by this look has had its beta;
    ``read_at`` the host's clock when the reports were read, which dates
    their host-clock times against ``began`` (:meth:`store_time`).
    """

    node: str
    began: float
    seq: int
    full: bool
    error: str | None = None
    containers: tuple[ContainerState, ...] = ()
    sample: NodeSample | None = None
    reports: Mapping[int, jobfiles.Report] = field(default_factory=dict)
    attempts: Mapping[int, int] = field(default_factory=dict)
    boot_time: float | None = None
    engine_start: float | None = None
    throttled: Mapping[str, float] = field(default_factory=dict)
    read_at: float | None = None

    def store_time(self, host_time: float) -> float | None:
        """A host-clock time of this look's reports as a store time; None when not dated.

        Only a difference of the host's own times is used, so the host's
        clock may be off from the daemon's. The answer is early by the look's
        latency: a report's window then seems to begin earlier than it did.
        """
        if self.read_at is None:
            return None
        return self.began - max(self.read_at - host_time, 0.0)


def observe(
    site: Site,
    row: NodeRow,
    jobs: list[JobHere],
    *,
    full: bool,
    lease_timeout: float,
    seq: int,
    gpus: tuple[hostops.HostGpu, ...],
    throttles: list[dict[str, Any]] | None = None,
) -> Observation:
    """Look at one node with ``gpus`` (module docstring); a failure is the observation's ``error``.

    The look's time is when it begins here, on the thread that runs it, not
    when it was due. A full look also hands the node's agent ``throttles``,
    the throttle settings of its opportunistic jobs (:mod:`gctl.daemon.throttles`).
    """
    began = now()
    try:
        target = hostops.target(row)
        home = {j.job_id: site.job_dir(row, j.job_id, j.attempt) for j in jobs if j.home}
        docker = hostops.docker_argv(row)
        # One round trip: the agent lists the containers, then reads every report.
        request: dict[str, Any] = {
            "docker": docker,
            "dirs": list(home.values()),
            "containers": {"labels": owned_labels(site.store_id, row.name)},
        }
        if full:
            request["lease"] = {
                "dir": hostops.agent_dir(row, site.store_id),
                "store": site.store_id,
                "node": row.name,
                "timeout": lease_timeout,
                "docker": docker,
            }
            if throttles:
                request["throttles"] = throttles
        got = site.agents.ask(target, "observe", request, site.pool.command_timeout)
        listing = got.get("containers")
        if isinstance(listing, dict):
            containers = listed_states(listing["list"], listing["inspect"])
        else:  # no unix socket there: the engine's API over SSH, then the reports read anew
            containers = site.engine(row).owned()
        current = {j.job_id: j for j in jobs}
        ended = {
            c.job_id
            for c in containers
            if c.job_id in current
            and c.exit_code is not None
            and c.attempt == current[c.job_id].attempt
            and current[c.job_id].home
        }
        asked = [j for j in jobs if j.home and (full or j.job_id in ended)]
        dirs = {j.job_id: home[j.job_id] for j in asked}
        summaries, read_at = got.get("reports") or {}, got.get("read_at")
        if not isinstance(listing, dict) and dirs:  # read before that listing: read again
            again = {"docker": docker, "dirs": list(dirs.values())}
            reread = site.agents.ask(target, "observe", again, site.pool.command_timeout)
            summaries, read_at = reread.get("reports") or {}, reread.get("read_at")
        reports = {j: jobfiles.report_of(summaries.get(d) or {}) for j, d in dirs.items()}
        boot, engine = _float(got.get("boot_time")), _float(got.get("engine_start"))
        throttled: dict[str, float] = {}
        for tdir, answer in (got.get("throttles") or {}).items():
            since = _float(answer.get("since")) if isinstance(answer, dict) else None
            if since is not None:
                throttled[str(tdir)] = since
        for job in asked:
            report = reports.get(job.job_id)
            if report is not None and _worth_saving(site, job, report, job.job_id in ended):
                _keep_copy(site, row, job)
        sample = None
        if full:
            host = hostops.host(row, site.store_id, gpus)
            sample = telemetry.sample_of(site.pool, host, list(containers))
        attempts = {j.job_id: j.attempt for j in asked}
        return Observation(
            row.name,
            began,
            seq,
            full,
            None,
            tuple(containers),
            sample,
            reports,
            attempts,
            boot,
            engine,
            throttled,
            _float(read_at),
        )
    except HostError as exc:
        why = str(exc).partition(": ")[2] or str(exc)  # without the node's name
        return Observation(row.name, began, seq, full, error=why)


def _keep_copy(site: Site, row: NodeRow, job: JobHere) -> None:
    """Copy the job's directory into the mirror; a local failure is logged, the look goes on.

    The node answered, so a full disk or an unwritable mirror here is no
    reason to call it down, nor to stop the daemon: the job then restarts
    from the copy kept before, or from its own directory on this node.
    """
    try:
        site.save(row, job.job_id, job.attempt)
    except OSError as exc:
        log.warning(
            "job %d: could not copy attempt %d into the mirror: %s", job.job_id, job.attempt, exc
        )


def _worth_saving(site: Site, job: JobHere, report: jobfiles.Report, ended: bool) -> bool:
    """Whether the mirror should get the job directory now: a newer checkpoint, or an early end."""
    if ended and not report.finished:
        return True  # interrupted: it restarts from here, perhaps on another node
    kept = site.mirror.checkpoint_time(job.job_id)
    return report.checkpoint_time is not None and (kept is None or kept < report.checkpoint_time)


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


class Watch:
    """Observations of every node, scheduled and collected without ever blocking the tick.

    ``heartbeat_every`` is how often a node gets a full observation,
    ``answer_within`` the deadline of any observation, ``lease_timeout`` the
    watchdogs' (the daemon's node timeout), ``control_every`` how often a
    node whose opportunistic jobs are under rate control gets one,
    ``stuck_after`` when a look gives its thread's place to another.
    """

    def __init__(
        self,
        site: Site,
        inflight: Inflight,
        *,
        heartbeat_every: float,
        answer_within: float,
        lease_timeout: float,
        control_every: float = 1.0,
        stuck_after: float = STUCK_AFTER,
    ) -> None:
        self.site = site
        self.stuck_after = stuck_after
        self.control_every = control_every
        self._last_full: dict[str, float] = {}
        self.inflight = inflight
        self.heartbeat_every = heartbeat_every
        self.answer_within = answer_within
        self.lease_timeout = lease_timeout
        self.latest: dict[str, Observation] = {}
        self.samples: dict[str, NodeSample] = {}
        """Each node's latest GPU sample (full observations only take one)."""
        self.not_responding: set[str] = inflight.not_responding  # the work in flight reads it
        self.unreconciled: set[str] = set()
        self._known: set[str] = set()
        self._running: dict[str, Task[Observation]] = {}
        self._light: set[str] = set()
        """Nodes whose running look is a light one (no heartbeat)."""
        self._next_full: dict[str, float] = {}
        self._plans: list[tuple[float, str]] = []
        """A heap of (monotonic time, node): when heartbeats were planned (stale ones skipped)."""
        self._due: dict[Task[Observation], float] = {}
        """When each running full look was due (0 for a node's first)."""
        self._finished: list[tuple[str, Task[Observation]]] = []
        """Looks that ended, taken off ``_running`` for a new one before :meth:`collect` came."""
        self._late_now = self._late_before = 0.0
        self._late_since = time.monotonic()
        self._given = _Given({}, {}, {}, set())
        self._closed = False
        self._lock = threading.Condition()
        """Held by :meth:`look`, :meth:`collect`, :meth:`overdue` and the heartbeat thread."""
        self._failures: dict[str, int] = {}
        self._since = time.monotonic()
        self._never_seen: set[str] | None = None
        self._pool = DeadlinePool(OBSERVERS, THREADS, "gctl-watch")
        self._beats = threading.Thread(target=self._beat, name="gctl-heartbeats", daemon=True)
        self._beats.start()

    @property
    def blocked(self) -> set[str]:
        """Nodes no decision may act on now: not answering, or not reconciled yet."""
        return self.not_responding | self.unreconciled

    @property
    def settling(self) -> bool:
        """Whether the daemon has just started and some node has not been looked at yet.

        Placing meanwhile would put every waiting job on the first nodes that
        answer; a node that does not answer within the deadline stops the wait.
        """
        if self._never_seen is None:
            return True
        self._never_seen -= set(self.latest) | self.not_responding
        return bool(self._never_seen) and time.monotonic() - self._since < self.answer_within

    def look(
        self,
        nodes: Mapping[str, NodeRow],
        gpus: hostops.NodeGpus,
        jobs: Mapping[str, list[JobHere]],
        throttles: Throttles | None = None,
        urgent: Collection[str] = (),
    ) -> None:
        """Start an observation of every node that is due one and has none running.

        ``nodes`` and their ``gpus`` are :func:`~gctl.services.hostops.read_nodes`'s.

        Nodes with opportunistic jobs under rate control get a full look every
        ``control_every`` seconds, carrying their throttle settings; so do the
        ``urgent`` nodes (a job above its GPU memory limit), without them.
        Between two calls, the heartbeats of the other nodes start when due,
        on a thread of the watch's own, with what this call was given.
        """
        controlled = throttles.fast() if throttles is not None else set()
        fast = controlled | set(urgent)
        with self._lock:
            mono = time.monotonic()
            if self._never_seen is None:
                self._never_seen = set(nodes)
            for name in nodes.keys() - self._known:
                self.unreconciled.add(name)  # first seen: reconciled before any work
            self._known = set(nodes)
            for name in list(self.latest):
                if name not in nodes:  # removed from the store
                    self.latest.pop(name)
                    self.site.agents.forget(name)
                    self.samples.pop(name, None)
                    self.not_responding.discard(name)
                    self.unreconciled.discard(name)
            self._given = _Given(nodes, gpus, jobs, fast)
            for name, row in nodes.items():
                settings = None
                if throttles is not None and name in controlled:
                    settings = partial(throttles.requests, name, hostops.docker_argv(row))
                self._start(name, mono, settings)
            self._lock.notify()

    def _start(
        self,
        name: str,
        mono: float,
        settings: Callable[[], list[dict[str, Any]]] | None = None,
        *,
        beat: bool = False,
    ) -> None:
        """Start a look at node ``name`` if one is due and none runs (under the lock).

        ``settings`` gives the throttle settings a full look carries (nodes
        under rate control). The tick starts no look at a node whose last
        one it has not collected yet, so that reconcile, between two of its
        looks, may trust the last; a heartbeat due (``beat``) starts anyway.
        """
        given = self._given
        row = given.nodes[name]
        running = self._running.get(name)
        if beat and running is not None and running.future.done():  # kept for collect
            self._finished.append((name, running))
            del self._running[name]
            self._light.discard(name)
            running = None
        if running is not None and (name not in self._light or running.began is not None):
            return
        due = self._next_full.get(name, 0.0)
        full = mono >= due
        if name in given.fast and name not in self._failures:
            full = full or mono >= self._last_full.get(name, 0.0) + self.control_every
        if running is not None and not (full and running.future.cancel()):
            return  # a light look still queued gives its place to a heartbeat only
        here = given.jobs.get(name, [])
        if not full and (not here or name in self._failures):
            return
        if not full:
            self._light.add(name)
        else:
            self._light.discard(name)
            self._last_full[name] = mono
            self._plan(name, mono, due)
        task = self._running[name] = self._pool.submit(
            (not full, due),
            partial(
                observe,
                self.site,
                row,
                here,
                full=full,
                lease_timeout=self.lease_timeout,
                seq=self.inflight.seq(name),
                gpus=given.gpus.get(name, ()),
                throttles=settings() if full and settings is not None else None,
            ),
        )
        if full:
            self._due[task] = due

    def _plan(self, name: str, mono: float, due: float) -> None:
        """When the node's next heartbeat is due, a full look at it starting now.

        A node that answers is due again a period after this look was due
        (not after it started, which is later; but after it started when it
        came early or very late), less the latest lateness of
        the heartbeats (:meth:`_late_by`), so that the time between two of
        its heartbeats stays within the period. One whose looks keep failing
        waits twice as long each time, up to :data:`MAX_RETRY`.
        """
        failed = self._failures.get(name, 0)
        if failed:
            at = mono + min(MAX_RETRY, self.heartbeat_every * 2 ** max(0, failed - 1))
        else:
            period = self.heartbeat_every - self._late_by(mono)
            on_time = 0.0 <= mono - due < period / 2  # not early, as rate control's looks are
            at = due + period if on_time else mono + period
        self._next_full[name] = at
        heapq.heappush(self._plans, (at, name))

    def _late_by(self, mono: float) -> float:
        """How late the heartbeats began lately (the most over one or two periods), capped."""
        if mono - self._late_since >= self.heartbeat_every:
            self._late_before, self._late_now, self._late_since = self._late_now, 0.0, mono
        return min(MAX_LATE * self.heartbeat_every, max(self._late_now, self._late_before))

    def _beat(self) -> None:
        """The heartbeat thread: start each node's heartbeat when due, between two :meth:`look`."""
        with self._lock:
            while not self._closed:
                mono = time.monotonic()
                plans = self._plans
                while plans and plans[0][0] <= mono:
                    at, name = heapq.heappop(plans)
                    given = self._given
                    planned = self._next_full.get(name) == at
                    if planned and name in given.nodes and name not in given.fast:
                        self._start(name, mono, beat=True)
                self._lock.wait(plans[0][0] - mono if plans else None)

    def collect(self) -> list[Observation]:
        """The observations that ended since the last call (the node's latest is kept)."""
        out: list[Observation] = []
        with self._lock:
            ended, self._finished = self._finished, []
            for name, running in list(self._running.items()):
                if running.future.done():
                    del self._running[name]
                    self._light.discard(name)
                    ended.append((name, running))
            for name, running in ended:
                got = running.future.result()
                out.append(got)
                self._ended(name, running, got)
        return out

    def _ended(self, name: str, running: Task[Observation], got: Observation) -> None:
        """Take in a look that ended: the node's state, and how late a heartbeat began."""
        due = self._due.pop(running, 0.0)
        if got.full and due > 0.0 and running.began is not None:
            self._late_now = max(self._late_now, running.began - due)
        if got.error is None:
            self._failures.pop(name, None)
            if name in self.not_responding:
                self.not_responding.discard(name)
                self.unreconciled.add(name)  # back: reconciled before new work
            self.latest[name] = got
            if got.sample is not None:
                self.samples[name] = got.sample
        else:
            self.not_responding.add(name)
            self._failures[name] = self._failures.get(name, 0) + 1

    def overdue(self) -> dict[str, float]:
        """Nodes whose running observation is past its deadline, with how long it has run."""
        mono = time.monotonic()
        late: dict[str, float] = {}
        stuck = max(self.answer_within, self.stuck_after)
        with self._lock:
            for name, task in self._running.items():
                seconds = task.late(mono, self.answer_within)
                if seconds is not None:
                    late[name] = seconds
                    if seconds > stuck:
                        self._pool.release(task)
        self.not_responding.update(late)
        return late

    def trusted(self, name: str) -> Observation | None:
        """The node's latest observation, when reconcile may act on it.

        It must have answered, be the node's newest (none running), and have
        begun after the daemon's last action on the node, none of which may
        still run.
        """
        got = self.latest.get(name)
        if got is None or name in self._running or name in self.not_responding:
            return None
        if any(n == name for n, _ in self._finished):  # a newer one, not collected yet
            return None
        if self.inflight.seq(name) != got.seq or name in self.inflight.busy_nodes:
            return None
        return got

    def close(self) -> None:
        """Stop observing; looks still running end on their own (their SSH timeouts)."""
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._beats.join()
        self._pool.close()
