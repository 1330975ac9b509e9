"""How a job's run ended: completed, failed, or interrupted, judged on evidence.

A job whose current containers have all exited ended one of three ways:

- **COMPLETED** only on evidence that its work is done: exit 0 and, for a
  job that uses the job SDK, the SDK's final report (``run.finish()``, or a
  report of its last step). A job without the SDK has no other evidence
  than its exit status.
- **interrupted**, when it stopped for a cause outside it: its container
  ended before the host's last boot or as its Docker engine restarted; it
  was killed by a signal gctl did not send (``SIGTERM``, ``SIGKILL``,
  ``SIGINT``, ``SIGHUP`` exits: an engine stopping, a watchdog on a host cut
  off from the daemon); or an SDK job exited 0 before its final report (it
  checkpointed and left on a ``SIGTERM`` from the engine). The job goes back
  to the queue and restarts from its checkpoint as its next attempt. So that
  a job that keeps stopping short never loops forever, it FAILs after
  :data:`MAX_STALLS` interruptions in a row without a checkpoint past the
  last one; an interruption while gctl had it suspended (frozen for time
  slicing) does not count, since it could not have checkpointed.
- **FAILED** otherwise: a non-zero exit of its own, or an OOM kill.

A job without the SDK that catches ``SIGTERM`` and exits 0 when its engine
is stopped looks completed unless the engine's restart shows in its
container's times; use the SDK (or exit non-zero on ``SIGTERM``).
"""

from __future__ import annotations

import signal
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session

from gctl.daemon import jobfiles
from gctl.daemon.inflight import Inflight
from gctl.daemon.site import Site, job_nodes
from gctl.daemon.watch import Observation
from gctl.hosts.engine import ContainerState
from gctl.services import events
from gctl.services.jobs import set_state
from gctl.services.queue import ON_GPUS
from gctl.store.allocations import release
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, EventRow, GpuRow, JobRow, NodeRow, now
from gctl.store.snapshot import MECHANISM_CHECKPOINT, SUSPENDED_STATES

MAX_STALLS = 3
"""Interruptions in a row without a newer checkpoint after which a job FAILs."""
SIGNAL_EXITS = {
    128 + s: s.name for s in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP)
}
"""Exit statuses of a process killed by a signal that stops a job from outside."""
RESTART_MARGIN = 5.0
"""Seconds after a boot or an engine start within which an end counts as caused by it."""


@dataclass(frozen=True, slots=True)
class Ending:
    """How one run of a job ended: ``state`` COMPLETED, FAILED or PENDING (interrupted)."""

    state: str
    why: str
    exit_code: int

    @property
    def interrupted(self) -> bool:
        """Whether the job goes back to the queue to restart from its checkpoint."""
        return self.state == "PENDING"


def _epoch(stamp: str | None) -> float | None:
    if not stamp or stamp.startswith("0001-"):
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def _restart_cause(c: ContainerState, boot: float | None, engine: float | None) -> str | None:
    """Why the container ended from outside: the host rebooted or the engine restarted."""
    started, ended = _epoch(c.started_at), _epoch(c.finished_at)
    if started is None:
        return None
    for at, cause in ((boot, "the host rebooted"), (engine, "its Docker engine restarted")):
        if at is not None and started < at and (ended is None or ended <= at + RESTART_MARGIN):
            return cause
    return None


def judge(
    containers: list[ContainerState],
    report: jobfiles.Report | None,
    *,
    sdk: bool,
    boot: float | None = None,
    engine: float | None = None,
) -> Ending:
    """How a run whose ``containers`` all exited ended (module docstring).

    ``report`` is its job directory's last report, ``sdk`` whether it uses
    the job SDK, ``boot``/``engine`` when its host booted and its engine
    started. A signal exit is judged an interruption here; the caller makes
    it a failure when gctl sent that signal (``cancel --signal``).
    """
    codes = [c.exit_code or 0 for c in containers]
    code = next((c for c in codes if c), 0)
    if any(c.oom_killed for c in containers):
        return Ending("FAILED", "out of memory (OOM kill)", code)
    cause = next((w for c in containers if (w := _restart_cause(c, boot, engine))), None)
    if cause is not None:
        return Ending("PENDING", f"interrupted: {cause} (exit {code})", code)
    if code == 0:
        if sdk and not (report is not None and report.finished):
            why = "interrupted: exit 0 before the job SDK's final report (stopped from outside)"
            return Ending("PENDING", why, 0)
        return Ending("COMPLETED", "exit 0", 0)
    if code in SIGNAL_EXITS:
        why = f"interrupted: killed by {SIGNAL_EXITS[code]} that gctl did not send"
        return Ending("PENDING", why, code)
    return Ending("FAILED", f"exit {code}", code)


def settle(site: Site, latest: Mapping[str, Observation], inflight: Inflight) -> list[int]:
    """Record every job on GPUs whose current containers have all exited; their ids.

    Each of the job's nodes must have been observed with the job's container
    of its current attempt (a container missing is reconcile's concern). Jobs
    with a move pending or work in flight are left to it. The ended
    containers are removed in the background.
    """
    busy = inflight.busy_jobs
    with transaction(site.store.engine, write=False) as s:
        rows = s.execute(
            select(JobRow.id, JobRow.attempt, JobRow.mechanism, NodeRow.name)
            .join(AllocationRow, AllocationRow.job_id == JobRow.id)
            .join(GpuRow, GpuRow.id == AllocationRow.gpu_id)
            .join(NodeRow, NodeRow.id == GpuRow.node_id)
            .where(JobRow.state.in_(sorted(ON_GPUS)), JobRow.op.is_(None))
            .distinct()
        ).all()
    nodes_of: dict[int, set[str]] = defaultdict(set)
    facts: dict[int, tuple[int, str | None]] = {}
    for job_id, attempt, mechanism, node in rows:
        nodes_of[job_id].add(node)
        facts[job_id] = (attempt, mechanism)
    endings: dict[int, tuple[int, Ending, list[tuple[str, ContainerState]]]] = {}
    for job_id, names in nodes_of.items():
        if job_id in busy or any(n not in latest for n in names):
            continue
        attempt, mechanism = facts[job_id]
        found = [
            (n, c)
            for n in sorted(names)
            for c in latest[n].containers
            if c.job_id == job_id and c.attempt == attempt
        ]
        if {n for n, _ in found} != names or any(c.exit_code is None for _, c in found):
            continue
        home = latest[min(names)]
        if home.attempts.get(job_id) != attempt:
            continue  # its report of this attempt is read by the next look at its node
        report = home.reports[job_id]
        sdk = mechanism == MECHANISM_CHECKPOINT or report.uses_sdk
        ending = judge(
            [c for _, c in found], report, sdk=sdk, boot=home.boot_time, engine=home.engine_start
        )
        endings[job_id] = (attempt, ending, found)
    if not endings:
        return []
    steps = {j: latest[min(nodes_of[j])].reports[j].checkpoint_step for j in endings}
    done = _record(site, endings, steps)
    for job_id in done:
        found = endings[job_id][2]
        nodes = {n for n, _ in found}
        inflight.submit(
            f"removing job {job_id}'s ended containers",
            partial(_remove, site, found),
            jobs=[job_id],
            nodes=nodes,
        )
    return done


def _record(
    site: Site,
    endings: Mapping[int, tuple[int, Ending, list[tuple[str, ContainerState]]]],
    steps: Mapping[int, int | None],
) -> list[int]:
    done: list[int] = []
    with transaction(site.store.engine, write=True) as s:
        for job_id, (attempt, ending, _) in endings.items():
            row = s.get(JobRow, job_id)
            if row is None or row.state not in ON_GPUS or row.op is not None:
                continue
            if row.attempt != attempt:
                continue
            code = ending.exit_code
            if code in SIGNAL_EXITS and ending.interrupted and _signalled(s, job_id, attempt):
                ending = Ending("FAILED", f"exit {code} ({SIGNAL_EXITS[code]} sent by gctl)", code)
            _end(s, row, ending, steps.get(job_id))
            if row.state in ("COMPLETED", "FAILED"):
                site.mirror.drop(job_id)
            done.append(job_id)
    return done


def _signalled(s: Session, job_id: int, attempt: int) -> bool:
    """Whether gctl sent this attempt of the job a signal (``gctl cancel --signal``)."""
    sent = s.scalars(
        select(EventRow.data).where(EventRow.job_id == job_id, EventRow.kind == "job.signal")
    ).all()
    return any(isinstance(d, dict) and d.get("attempt") == attempt for d in sent)


def _end(s: Session, row: JobRow, ending: Ending, step: int | None) -> None:
    """Record one ending in the caller's transaction."""
    release(s, row.id, now())
    row.exit_code = ending.exit_code
    if not ending.interrupted:
        set_state(s, row, ending.state, ending.why)
        message = f"job {row.id} {ending.state.lower()}: {ending.why}"
        events.record(s, "job.end", message, job_id=row.id)
        return
    progressed = step is not None and (row.checkpoint_step is None or step > row.checkpoint_step)
    if progressed:
        row.stalls = 0
    elif row.state not in SUSPENDED_STATES:  # suspended (any mechanism): no stall of its own
        row.stalls += 1
    if step is not None:
        row.checkpoint_step = max(step, row.checkpoint_step or 0)
    row.attempt += 1
    row.restarts += 1
    if row.stalls >= MAX_STALLS:
        why = f"{ending.why}; {row.stalls} times in a row without a newer checkpoint"
        set_state(s, row, "FAILED", why)
        events.record(s, "job.end", f"job {row.id} failed: {why}", job_id=row.id)
        return
    why = f"{ending.why}; requeued from its checkpoint"
    set_state(s, row, "PENDING", why)
    events.record(s, "job.interrupt", f"job {row.id} {why}", job_id=row.id)


def end_now(site: Site, s: Session, row: JobRow, state: str, reason: str) -> list[NodeRow]:
    """End a job that holds GPUs, in the caller's transaction; the nodes it held GPUs on.

    Its GPUs go (kept in the allocation history), its state and reason are
    set and the daemon's copy of its checkpoint is dropped; stopping or
    killing its containers on those nodes is the caller's, in the background.
    """
    nodes = job_nodes(s, row.id)
    release(s, row.id, now())
    set_state(s, row, state, reason)
    site.mirror.drop(row.id)
    return nodes


def _remove(site: Site, found: list[tuple[str, ContainerState]]) -> None:
    """Remove ended containers (a failure is left to reconcile)."""
    names = {node for node, _ in found}
    with transaction(site.store.engine, write=False) as s:
        rows = {r.name: r for r in s.scalars(select(NodeRow).where(NodeRow.name.in_(names)))}
    for node, c in found:
        if node in rows:
            site.remove(rows[node], c)
