"""When a tick may skip its reactive pass: nobody waits and nothing it reads has changed.

A reactive pass reads the whole store into a fresh cluster state and runs
the policy over it: at 1,000 nodes x 8 GPUs that is tens of milliseconds
of the main thread every tick, most of an idle daemon's CPU, though an
idle cluster gives it nothing to decide. For a steady policy
(:class:`gctl.core.policy.Steady`) the daemon first reads the few columns
such a pass can act on (:func:`read`): each node's admin state and GPU
count, each held GPU's job (state, operation, class, priority, how it
can be stopped) and mode, the blocked nodes, and whether any job waits.
While nobody waits and these equal those of the last pass, which decided
nothing, the pass is skipped (:class:`Gate`). Any change, or any waiting
job, runs it as before.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from gctl.core.model import JobClass
from gctl.core.policy import Policy, Steady
from gctl.daemon.apply import Applied
from gctl.services.queue import ON_GPUS
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, GpuRow, JobRow, NodeRow
from gctl.store.snapshot import QUEUED_STATES, SUSPENDED_STATES

Inputs = tuple[tuple[Any, ...], ...]
"""What a steady reactive pass acts on: the nodes, the jobs on GPUs and the blocked nodes."""


def read(s: Session, blocked: Collection[str]) -> Inputs | None:
    """What a steady reactive pass acts on, or None when a job waits (the pass must run).

    A guest (opportunistic) job counts as waiting: its evictions follow
    measured samples, which these inputs do not hold.
    """
    waiting = s.execute(
        select(JobRow.id)
        .where(JobRow.state.in_(sorted(QUEUED_STATES)), JobRow.held.is_(False))
        .limit(1)
    ).first()
    if waiting is not None:
        return None
    held: list[tuple[Any, ...]] = []
    for row in s.execute(
        select(
            JobRow.id,
            JobRow.attempt,
            JobRow.state,
            JobRow.job_class,
            JobRow.priority,
            JobRow.mechanism,
            JobRow.held,
            JobRow.elastic_min,
            JobRow.elastic_max,
            AllocationRow.gpu_id,
            AllocationRow.mode,
            JobRow.op,
        )
        .join(AllocationRow, AllocationRow.job_id == JobRow.id)
        .where(JobRow.state.in_(sorted(ON_GPUS)))
        .order_by(JobRow.id, AllocationRow.gpu_id)
    ):
        if row.state in SUSPENDED_STATES or row.job_class == JobClass.OPPORTUNISTIC:
            return None
        held.append(tuple(row))
    gpus = dict(s.execute(select(GpuRow.node_id, func.count()).group_by(GpuRow.node_id)).all())
    nodes = tuple(
        (name, state, gpus.get(node_id, 0))
        for node_id, name, state in s.execute(
            select(NodeRow.id, NodeRow.name, NodeRow.admin_state).order_by(NodeRow.id)
        )
    )
    return nodes, tuple(held), tuple(sorted(blocked))


class Gate:
    """Runs each tick's reactive pass unless it may be skipped; one per daemon run.

    ``policy`` is the policy the daemon runs: a policy that is not steady
    has every pass run.
    """

    def __init__(self, policy: Policy) -> None:
        """No pass run yet: the first is due."""
        self.steady = isinstance(policy, Steady) and policy.steady()
        self._quiet: Inputs | None = None

    def run(
        self, engine: Engine, blocked: Collection[str], reactive: Callable[[], Applied]
    ) -> Applied | None:
        """Run ``reactive`` (the pass) unless it may be skipped; what it did (None: skipped).

        The inputs are read before the pass reads the store: whatever
        changes in between is seen as a change by the next tick.
        """
        inputs: Inputs | None = None
        if self.steady:
            with transaction(engine, write=False) as s:
                inputs = read(s, blocked)
            if inputs is not None and inputs == self._quiet:
                return None
        self._quiet = None  # a pass that fails is not quiet
        applied = reactive()
        if not (applied.done or applied.failed or applied.deferred):
            self._quiet = inputs
        return applied
