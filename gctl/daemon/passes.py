"""The daemon's passes: see what exited, measure progress, read the store, decide, act.

The same core policy as ``gctl sim`` decides; only the clock and
:mod:`gctl.daemon.apply` differ from the simulator.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable

from sqlalchemy import delete, select

from gctl.core.decisions import Decision, Requeue
from gctl.core.policy import Policy
from gctl.daemon import jobfiles
from gctl.daemon.apply import Applied, Applier
from gctl.daemon.site import Site
from gctl.gcpause import gc_paused
from gctl.hosts.engine import ContainerState
from gctl.hosts.ssh import HostError, fan_out
from gctl.services import events, hostops
from gctl.services.jobs import set_state
from gctl.services.queue import ON_GPUS
from gctl.services.telemetry import NodeSample
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, GpuRow, JobRow, NodeRow, ProfileRow
from gctl.store.snapshot import MECHANISM_CHECKPOINT, Snapshot, read

Observe = Callable[[str, float], None]
"""Called with a decision kind and the seconds it took to carry out."""


def _allocated_nodes(site: Site) -> dict[str, NodeRow]:
    with transaction(site.store.engine, write=False) as s:
        rows = s.scalars(
            select(NodeRow)
            .join(GpuRow, GpuRow.node_id == NodeRow.id)
            .join(AllocationRow, AllocationRow.gpu_id == GpuRow.id)
            .distinct()
        ).all()
    return {r.name: r for r in rows}


def finish_exited(site: Site) -> list[int]:
    """Record jobs whose current containers have all exited: COMPLETED on 0, else FAILED.

    Their GPUs are freed and the containers removed. Nodes that do not answer
    are skipped (their jobs are judged when they answer again, or by the
    node-down handling); jobs in the middle of a move are the move's.
    """
    nodes = _allocated_nodes(site)
    seen = fan_out(
        [hostops.target(r) for r in nodes.values()], lambda t: site.engine(nodes[t.node]).owned()
    )
    by_job: dict[int, list[tuple[str, ContainerState]]] = defaultdict(list)
    for node, got in seen.items():
        for c in [] if isinstance(got, HostError) else got:
            if c.job_id is not None:
                by_job[c.job_id].append((node, c))
    finished = _record_ends(site, by_job)
    # The ended containers go; a removal that fails is found again by reconcile.
    for job_id in finished:
        for node, c in by_job[job_id]:
            with contextlib.suppress(HostError):
                site.engine(nodes[node]).remove(c.id)
        site.mirror.drop(job_id)
    return finished


def _record_ends(site: Site, by_job: dict[int, list[tuple[str, ContainerState]]]) -> list[int]:
    """Store the end of every job on GPUs whose current containers have all exited."""
    finished: list[int] = []
    with transaction(site.store.engine, write=True) as s:
        for job_id, found in by_job.items():
            row = s.get(JobRow, job_id)
            if row is None or row.state not in ON_GPUS or row.op is not None:
                continue
            containers = [c for _, c in found if c.attempt == row.attempt]
            if not containers or any(c.exit_code is None for c in containers):
                continue
            codes = [c.exit_code for c in containers]
            oom = any(c.oom_killed for c in containers)
            ok = all(code == 0 for code in codes)
            row.exit_code = next((c for c in codes if c), 0)
            why = (
                "exit 0" if ok else ("out of memory (OOM kill)" if oom else f"exit {row.exit_code}")
            )
            set_state(s, row, "COMPLETED" if ok else "FAILED", why)
            s.execute(delete(AllocationRow).where(AllocationRow.job_id == job_id))
            events.record(s, "job.end", f"job {job_id} {row.state.lower()}: {why}", job_id=job_id)
            finished.append(job_id)
    return finished


def profile(site: Site, samples: list[NodeSample], at: float) -> None:
    """Record a profile sample of every running job; learn which jobs can checkpoint.

    Progress comes from the job SDK's report in the job directory on the
    job's first node; utilisation and memory from the node's GPU sample. A
    job whose report shows the SDK is marked as checkpointable, and its
    newest checkpoint is copied into the daemon's mirror. A job that does
    not use the SDK reports nothing, so its GPU utilisation stands in for
    its progress rate (:func:`progress_rate`).
    """
    jobs_on: dict[int, tuple[float, int]] = {}
    for sample in samples:
        for j in sample.jobs:
            util, mem = jobs_on.get(j.job_id, (0.0, 0))
            jobs_on[j.job_id] = (
                max(util, (j.util_percent or 0.0) / 100),
                mem + (j.memory_mb or 0),
            )
    with transaction(site.store.engine, write=False) as s:
        rows = s.execute(
            select(JobRow.id, NodeRow, JobRow.mechanism)
            .join(AllocationRow, AllocationRow.job_id == JobRow.id)
            .join(GpuRow, GpuRow.id == AllocationRow.gpu_id)
            .join(NodeRow, NodeRow.id == GpuRow.node_id)
            .where(JobRow.state == "RUNNING", JobRow.op.is_(None))
            .order_by(JobRow.id, NodeRow.name)
        ).all()
    first: dict[int, NodeRow] = {}
    mechanism: dict[int, str | None] = {}
    for job_id, node, mech in rows:
        first.setdefault(job_id, node)
        mechanism[job_id] = mech
    per_node: dict[str, list[int]] = defaultdict(list)
    nodes: dict[str, NodeRow] = {}
    for job_id, node in first.items():
        per_node[node.name].append(job_id)
        nodes[node.name] = node

    def read_node(name: str) -> dict[str, jobfiles.Report]:
        node = nodes[name]
        dirs = [hostops.job_dir(node, j) for j in per_node[name]]
        return jobfiles.read_reports(site.pool, hostops.target(node), dirs)

    got = fan_out([hostops.target(n) for n in nodes.values()], lambda t: read_node(t.node))
    reports: dict[int, jobfiles.Report] = {}
    for name, answer in got.items():
        if isinstance(answer, HostError):
            continue
        for job_id in per_node[name]:
            reports[job_id] = answer[hostops.job_dir(nodes[name], job_id)]
    with transaction(site.store.engine, write=True) as s:
        for job_id, report in reports.items():
            util, mem = jobs_on.get(job_id, (0.0, 0))
            s.add(
                ProfileRow(
                    job_id=job_id,
                    at=at,
                    gpu_util=util,
                    memory_mb=mem,
                    progress_rate=progress_rate(report, util, mechanism[job_id]),
                )
            )
            if report.uses_sdk and mechanism[job_id] != MECHANISM_CHECKPOINT:
                row = s.get(JobRow, job_id)
                assert row is not None
                row.mechanism = MECHANISM_CHECKPOINT
    for job_id, report in reports.items():
        kept = site.mirror.checkpoint_time(job_id)
        if report.checkpoint_time is not None and (kept is None or kept < report.checkpoint_time):
            with contextlib.suppress(HostError):
                site.save(first[job_id], job_id)


def progress_rate(report: jobfiles.Report, util: float, mechanism: str | None) -> float:
    """A job's progress rate: mini-batches per second from the SDK, else estimated.

    Without the SDK (never seen for this job, whose ``mechanism`` is not
    checkpoint) the estimate is the job's share of GPU utilisation (0..1 per
    GPU): the core only ever compares a job's rate with its own rate at
    another time, so any measure that rises and falls with its throughput
    serves. ``gctl show job`` marks such a job's progress as estimated.
    """
    if not report.uses_sdk and mechanism != MECHANISM_CHECKPOINT:
        return util
    rate = (report.progress or {}).get("rate")
    return float(rate) if isinstance(rate, int | float) else 0.0


def decide_and_apply(
    site: Site, snap: Snapshot, decisions: list[Decision], observe: Observe
) -> Applied:
    """Carry out a policy's decisions on ``snap`` and record the sharing modes they leave."""
    applier = Applier(site, snap, observe)
    applied = applier.apply(decisions)
    applier.sync_modes()
    return applied


def reactive_pass(site: Site, policy: Policy, now: float, observe: Observe) -> Applied:
    """Finish what exited, requeue jobs of down nodes, then let the policy place and queue.

    The cyclic garbage collector waits from the store read to the last
    record: the pass builds the cluster state and a decision per job, all
    acyclic and gone by its end, and a collection during it walks them all.
    """
    finish_exited(site)
    with gc_paused():
        snap = read(site.store.engine, now=now)
        requeued: list[Decision] = [
            Requeue(j, "its node is down; requeued from its last checkpoint") for j in snap.requeued
        ]
        return decide_and_apply(site, snap, requeued + policy.schedule(snap.state, now), observe)


def introspective_pass(site: Site, policy: Policy, now: float, observe: Observe) -> Applied:
    """The policy's periodic pass: time slicing, packing, migration, defragmentation, resizing."""
    snap = read(site.store.engine, now=now)
    if not policy.wants_introspection(snap.state):
        return Applied()
    return decide_and_apply(site, snap, policy.introspect(snap.state, now), observe)
