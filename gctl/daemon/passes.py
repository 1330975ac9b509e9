"""One scheduling pass of the daemon: see what exited, read the store, decide, act.

The same core policy as ``gctl sim`` decides; only the clock and
:mod:`gctl.daemon.apply` differ from the simulator.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

from sqlalchemy import delete, select

from gctl.core.policy import Policy
from gctl.daemon.apply import Applied, Applier
from gctl.hosts.engine import ContainerState
from gctl.hosts.ssh import HostError, Pool, fan_out
from gctl.services import events, hostops
from gctl.services.db import Store
from gctl.services.jobs import ON_GPUS, set_state
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, GpuRow, JobRow, NodeRow
from gctl.store.snapshot import read


def finish_exited(store: Store, pool: Pool) -> list[int]:
    """Record jobs whose containers have all exited: COMPLETED on 0, else FAILED; GPUs freed.

    Nodes that do not answer are skipped (their jobs are judged when they
    answer again, or by the node-down handling).
    """
    with transaction(store.engine, write=False) as s:
        rows = s.scalars(
            select(NodeRow)
            .join(GpuRow, GpuRow.node_id == NodeRow.id)
            .join(AllocationRow, AllocationRow.gpu_id == GpuRow.id)
            .distinct()
        ).all()
        engines = {r.name: hostops.engine(pool, r) for r in rows}

    try:
        seen = fan_out([e.target for e in engines.values()], lambda t: engines[t.node].owned())
        by_job: dict[int, list[tuple[str, ContainerState]]] = defaultdict(list)
        for node, got in seen.items():
            for c in [] if isinstance(got, HostError) else got:
                if c.job_id is not None:
                    by_job[c.job_id].append((node, c))
        finished = _record_ends(store, by_job)
        # The ended containers go; a removal that fails is found and retried next pass.
        for job_id in finished:
            for node, c in by_job[job_id]:
                with contextlib.suppress(HostError):
                    engines[node].remove(c.id)
    finally:
        for e in engines.values():
            e.close()
    return finished


def _record_ends(store: Store, by_job: dict[int, list[tuple[str, ContainerState]]]) -> list[int]:
    """Store the end of every job on GPUs whose containers have all exited; their ids."""
    finished: list[int] = []
    with transaction(store.engine, write=True) as s:
        for job_id, containers in by_job.items():
            row = s.get(JobRow, job_id)
            if row is None or row.state not in ON_GPUS:
                continue
            if any(c.exit_code is None for _, c in containers):
                continue
            codes = [c.exit_code for _, c in containers]
            oom = any(c.oom_killed for _, c in containers)
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


def reactive_pass(store: Store, pool: Pool, policy: Policy, now: float) -> Applied:
    """Finish what exited, then let the policy place and queue, and carry its decisions out."""
    finish_exited(store, pool)
    snap = read(store.engine, now=now)
    decisions = policy.schedule(snap.state, now)
    applier = Applier(store, pool, snap)
    try:
        applied = applier.apply(decisions)
        applier.sync_modes()
    finally:
        applier.close()
    return applied
