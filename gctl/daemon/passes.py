"""The daemon's passes: record measured progress, read the store, decide, act.

The same core policy as ``gctl sim`` decides; only the clock and
:mod:`gctl.daemon.apply` differ from the simulator.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection, Mapping

from sqlalchemy import select, update

from gctl.config import SitePolicy
from gctl.core.decisions import Decision, Place, Requeue
from gctl.core.model import GpuRef, JobStatus, ShareMode
from gctl.core.policy import Policy
from gctl.core.state import ClusterState
from gctl.daemon import jobfiles
from gctl.daemon.apply import Applied, Applier
from gctl.daemon.inflight import Inflight
from gctl.daemon.interference import record_coruns
from gctl.daemon.site import Site
from gctl.daemon.watch import Observation
from gctl.gcpause import gc_paused
from gctl.services import events
from gctl.services.jobs import set_state
from gctl.services.telemetry import NodeSample
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, JobRow, ProfileRow
from gctl.store.snapshot import (
    MECHANISM_CHECKPOINT,
    SUSPENDED_STATES,
    Snapshot,
    core_job_id,
    read,
)

Observe = Callable[[str, float], None]
"""Called with a decision kind and the seconds it took to carry out."""
log = logging.getLogger("gctl.daemon")
BLOCKED_BY = "gctl-daemon:unreachable"
"""Who holds the core drain of a node that is not answering or not reconciled yet."""
STARTING = "starting"
"""The reason of a job the pass sees on its GPUs while its start is under way."""


def record_profiles(site: Site, seen: list[Observation], samples: Mapping[str, NodeSample]) -> None:
    """Record a profile sample of every job running on the nodes just fully observed.

    Progress comes from the job SDK's report in the job directory on the
    job's first node; utilisation and memory from the GPU samples of all its
    nodes (the latest of each). A job whose report shows the SDK is marked
    as checkpointable. A job that does not use the SDK reports nothing, so
    its GPU utilisation stands in for its progress rate (:func:`progress_rate`).
    A rate measured over a window of steps is dated from the window's start
    (``since``): one begun before the job was frozen, or before a partner
    joined its GPUs, does not measure how it runs now.
    """
    reports = {(j, o.attempts[j]): (r, o) for o in seen if o.full for j, r in o.reports.items()}
    if not reports:
        return
    jobs_on: dict[int, tuple[float, int]] = {}
    for sample in samples.values():
        for j in sample.jobs:
            util, mem = jobs_on.get(j.job_id, (0.0, 0))
            jobs_on[j.job_id] = (
                max(util, (j.util_percent or 0.0) / 100),
                mem + (j.memory_mb or 0),
            )
    at = max(o.began for o in seen)
    with transaction(site.store.engine, write=True) as s:
        rows = s.execute(
            select(JobRow.id, JobRow.attempt, JobRow.mechanism).where(
                JobRow.id.in_(sorted({j for j, _ in reports})),
                JobRow.state == "RUNNING",
                JobRow.op.is_(None),
            )
        ).all()
        for job_id, attempt, mechanism in rows:
            found = reports.get((job_id, attempt))
            if found is None:  # read from an attempt that is over
                continue
            report, look = found
            done = report.done
            if done is not None:
                site.done[job_id] = done
            util, mem = jobs_on.get(job_id, (0.0, 0))
            rate = progress_rate(report, util, mechanism)
            if rate is not None:
                row_at = ProfileRow(job_id=job_id, at=at, gpu_util=util, memory_mb=mem)
                row_at.progress_rate = rate
                window = report.rate_since
                row_at.since = None if window is None else look.store_time(window)
                s.add(row_at)
            if report.uses_sdk and mechanism != MECHANISM_CHECKPOINT:
                row = s.get(JobRow, job_id)
                assert row is not None
                row.mechanism = MECHANISM_CHECKPOINT
            if report.checkpoint_step is not None:
                s.execute(
                    update(JobRow)
                    .where(JobRow.id == job_id)
                    .values(checkpoint_step=report.checkpoint_step)
                )


def progress_rate(report: jobfiles.Report, util: float, mechanism: str | None) -> float | None:
    """A job's progress rate: mini-batches per second from the SDK, else estimated.

    Without the SDK (never seen for this job, whose ``mechanism`` is not
    checkpoint) the estimate is the job's share of GPU utilisation (0..1 per
    GPU): the core only ever compares a job's rate with its own rate at
    another time, so any measure that rises and falls with its throughput
    serves. ``gctl show job`` marks such a job's progress as estimated. An
    SDK job that has not reported a rate yet (no step since it started) has
    no rate: None, not 0, which would read as a job that makes no progress.
    """
    if not report.uses_sdk and mechanism != MECHANISM_CHECKPOINT:
        return util
    rate = (report.progress or {}).get("rate")
    return float(rate) if isinstance(rate, int | float) else None


def decide_and_apply(
    site: Site,
    snap: Snapshot,
    decisions: list[Decision],
    observe: Observe,
    inflight: Inflight,
    blocked: Collection[str],
    until: float | None = None,
) -> Applied:
    """Carry out a policy's decisions on ``snap`` and record the sharing modes they leave.

    ``until`` is when the tick needs the pass to stop waiting for hosts (:class:`Applier`).
    """
    applier = Applier(site, snap, observe, inflight, blocked, until=until)
    applied = applier.apply(decisions)
    applier.sync_modes()
    return applied


def _read(
    site: Site, now: float, blocked: Collection[str], starting: Mapping[int, tuple[GpuRef, ...]]
) -> tuple[Snapshot, dict[int, str]]:
    """The store as the core sees it, with ``blocked`` nodes closed to new work.

    Jobs being started (``starting``: row ids, with their GPUs) are on those
    GPUs already (:func:`_on_their_way`). Waiting jobs of users at their
    limit of GPUs at once (Slurm's per-user QOS limit) are left out of the
    pass; with them, why they wait.
    """
    snap = read(site.store.engine, now=now, gpus=site.gpus)
    _on_their_way(snap.state, starting, now)
    if snap.stranded:
        _requeue_stranded(site, snap.stranded)
    snap.state.interference = site.learned.interference(site.store.engine)
    snap.state.cached = site.fills.cached()
    rows = snap.job_ids
    site.done = {row: f for row, f in site.done.items() if core_job_id(row) in rows}
    done = site.done
    snap.state.work_done = lambda job: done.get(rows[job]) if job in rows else None
    for name in blocked:
        if name in snap.state.nodes:
            snap.state.drain(name, BLOCKED_BY)
    return snap, _over_limits(snap, site.policy, now)


def _on_their_way(
    state: ClusterState, starting: Mapping[int, tuple[GpuRef, ...]], now: float
) -> None:
    """Put each job whose start is under way on its GPUs, as the store will have it.

    The store records a start once it is done; until then the job looks
    queued and its GPUs free. Seen so, the job was decided again, and its
    GPUs given to other jobs; all those decisions then waited for a later
    pass (the job and GPUs busy), pass after pass. At 1,000 hosts with 10
    frozen, while starts were slow, most of a pass's placements waited so.

    A start on a node marked down since (it hangs until the engine's
    timeout) is left out: the state has no room on such a node, and the
    job's decisions wait (busy) until the start ends.
    """
    nodes = state.nodes
    for row, gpus in starting.items():
        js = state.jobs.get(core_job_id(row))
        if js is None or js.status is not JobStatus.PENDING:
            continue
        if all(
            n in nodes and nodes[n].up and i < nodes[n].size and nodes[n].group_of[i] is None
            for n, i in gpus
        ):
            state.apply(Place(js.id, gpus, ShareMode.EXCLUSIVE, STARTING), now)


def _requeue_stranded(site: Site, stranded: Collection[int]) -> None:
    """Record as requeued the jobs suspended on no GPU, which the snapshot has queued.

    No decision leaves a job so; a fault between two host actions might,
    and such a job would otherwise never run again. Each is logged.
    """
    with transaction(site.store.engine, write=True) as s:
        holding = select(AllocationRow.job_id).where(AllocationRow.job_id.in_(stranded))
        on_gpus = set(s.scalars(holding))
        for row in s.scalars(select(JobRow).where(JobRow.id.in_(sorted(stranded)))):
            if row.state not in SUSPENDED_STATES or row.held or row.id in on_gpus:
                continue  # changed since the snapshot
            why = f"requeued: it was suspended on no GPU ({row.reason})"
            set_state(s, row, "PENDING", why)
            events.record(s, "job.requeue", f"job {row.id} {why}", job_id=row.id)
            log.warning("job %d %s", row.id, why)


def _over_limits(snap: Snapshot, policy: SitePolicy, now: float) -> dict[int, str]:
    """Leave out the waiting jobs that would take a user past ``max_gpus``; why, by row id."""
    state = snap.state
    held: Counter[str] = Counter()
    for js in state.jobs.values():
        held[js.spec.user] += len(js.gpus)
    out: dict[int, str] = {}
    for js in sorted(state.jobs.values(), key=lambda j: j.seq):
        if js.gpus or js.status is not JobStatus.PENDING:
            continue
        most = policy.limits_for(js.spec.user).max_gpus
        if not most:
            continue
        if held[js.spec.user] + js.spec.gpus > most:
            state.finish(js.id, now)
            why = f"user {js.spec.user} at the limit of {most} GPUs at once (QOSMaxGRESPerUser)"
            out[snap.job_ids[js.id]] = why
        else:
            held[js.spec.user] += js.spec.gpus
    return out


def _limited(site: Site, waiting: dict[int, str]) -> None:
    """Record why jobs over their user's limit wait (only where the reason changes)."""
    if not waiting:
        return
    with transaction(site.store.engine, write=True) as s:
        for row in s.scalars(select(JobRow).where(JobRow.id.in_(sorted(waiting)))):
            if row.reason != waiting[row.id] and row.state == "PENDING":
                row.reason = waiting[row.id]


def reactive_pass(
    site: Site,
    policy: Policy,
    now: float,
    observe: Observe,
    inflight: Inflight,
    blocked: Collection[str] = (),
    *,
    until: float | None = None,
) -> Applied:
    """Requeue jobs of down nodes, then let the policy place and queue.

    ``blocked`` nodes (not answering, or not reconciled yet) take no new
    work and no decision acts on them; ``until`` is when the tick needs the
    pass to stop waiting for hosts (:class:`Applier`). The cyclic garbage collector waits
    from the store read to the last record: the pass builds the cluster
    state and a decision per job, all acyclic and gone by its end, and a
    collection during it walks them all.
    """
    with gc_paused():
        snap, waiting = _read(site, now, blocked, inflight.starting())
        _limited(site, waiting)
        requeued: list[Decision] = [
            Requeue(j, "its node is down; requeued from its last checkpoint") for j in snap.requeued
        ]
        decisions = requeued + policy.schedule(snap.state, now)
        return decide_and_apply(site, snap, decisions, observe, inflight, blocked, until)


def introspective_pass(
    site: Site,
    policy: Policy,
    now: float,
    observe: Observe,
    inflight: Inflight,
    blocked: Collection[str] = (),
    *,
    until: float | None = None,
) -> Applied:
    """The policy's periodic pass: time slicing, packing, migration, defragmentation, resizing.

    First the slow-downs of measured packs are recorded (interference learned online).
    ``blocked`` and ``until`` are as for :func:`reactive_pass`.
    """
    snap, _ = _read(site, now, blocked, inflight.starting())
    record_coruns(site.store.engine, snap, now)
    if not policy.wants_introspection(snap.state):
        return Applied()
    decisions = policy.introspect(snap.state, now)
    return decide_and_apply(site, snap, decisions, observe, inflight, blocked, until)
