"""The daemon's reactive pass is skipped on an idle, unchanged cluster, and only then.

Each test drives :class:`gctl.daemon.steady.Gate` over a real store (SQLite
and PostgreSQL) with the real gandiva policy deciding on a fresh snapshot,
as the daemon's pass does; the decisions are counted, not carried out.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import delete, update
from storekit import node, on_gpus, req

from gctl.core.decisions import Decision
from gctl.core.opportunistic import WithGuests
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.core.policies.las import LasPolicy
from gctl.core.policy import Policy
from gctl.daemon.apply import Applied
from gctl.daemon.steady import Gate
from gctl.services import db, jobs
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, JobRow, NodeRow
from gctl.store.snapshot import read


class Passes:
    """A reactive pass over ``store``: the policy decides on a fresh snapshot; what it decided."""

    def __init__(self, store: db.Store, policy: Policy) -> None:
        self.store = store
        self.policy = WithGuests(policy)
        self.gate = Gate(self.policy)
        self.decided: list[list[Decision]] = []

    def _pass(self) -> Applied:
        snap = read(self.store.engine, now=time.time())
        decisions = self.policy.schedule(snap.state, time.time())
        self.decided.append(decisions)
        return Applied(done=decisions)

    def tick(self, blocked: tuple[str, ...] = ()) -> bool:
        """One tick's pass through the gate: whether it ran."""
        return self.gate.run(self.store.engine, blocked, self._pass) is not None


def _end(store: db.Store, job: int) -> None:
    """Job ``job`` ended: its GPUs are free (as the daemon records an end)."""
    with transaction(store.engine, write=True) as s:
        s.execute(delete(AllocationRow).where(AllocationRow.job_id == job))
        s.execute(update(JobRow).where(JobRow.id == job).values(state="COMPLETED"))


def test_an_unchanged_idle_cluster_skips_the_pass_and_any_change_runs_it(store: db.Store) -> None:
    node(store, "a1")
    node(store, "a2")
    (a,) = jobs.submit(store, [req(1)])
    on_gpus(store, a, "a1", [0], since=100.0)
    passes = Passes(store, GandivaPolicy())
    assert passes.tick() and passes.decided == [[]]
    assert not passes.tick() and not passes.tick()
    with transaction(store.engine, write=True) as s:  # an operator drains a2
        s.execute(update(NodeRow).where(NodeRow.name == "a2").values(admin_state="drain"))
    assert passes.tick()
    assert not passes.tick()
    assert passes.tick(blocked=("a1",))  # a1 stopped answering
    assert not passes.tick(blocked=("a1",))
    assert passes.tick()  # and answers again
    with transaction(store.engine, write=True) as s:  # the job reported the job SDK
        s.execute(update(JobRow).where(JobRow.id == a).values(mechanism="freeze"))
    assert passes.tick()
    assert not passes.tick()
    assert len(passes.decided) == 5


def test_a_waiting_job_runs_every_pass_and_is_placed(store: db.Store) -> None:
    node(store, "a1")
    passes = Passes(store, GandivaPolicy())
    assert passes.tick()
    (a,) = jobs.submit(store, [req(1)])
    assert passes.tick()
    assert [d.job_id for d in passes.decided[-1]] == [str(a)]  # placed
    on_gpus(store, a, "a1", [0], since=100.0)  # as the daemon records it
    (b,) = jobs.submit(store, [req(4)])  # does not fit beside a: it waits, each pass looks again
    assert passes.tick() and passes.tick() and passes.tick()
    with transaction(store.engine, write=True) as s:  # held (scontrol hold): nobody waits
        s.execute(update(JobRow).where(JobRow.id == b).values(held=True))
    assert passes.tick()
    assert not passes.tick()


def test_a_packed_job_is_unpacked_once_its_neighbour_ends(store: db.Store) -> None:
    """What a skipped pass could miss: the unpack that a freed GPU allows."""
    node(store, "a1", gpus="2xV100-16GB")
    a, b, c = jobs.submit(store, [req(1)] * 3)
    on_gpus(store, a, "a1", [0], since=100.0)
    on_gpus(store, b, "a1", [1], since=110.0, mode="packed")
    on_gpus(store, c, "a1", [1], since=120.0, mode="packed")
    passes = Passes(store, GandivaPolicy())
    assert passes.tick() and passes.decided == [[]]  # no free GPU: the pack stays
    assert not passes.tick()
    _end(store, a)
    assert passes.tick()
    moved = passes.decided[-1]
    assert [(type(d).__name__, d.job_id) for d in moved] == [("Migrate", str(c))]  # the newer one
    assert passes.tick()  # it decided something: the next pass runs too


@pytest.mark.parametrize("how", ["suspended", "guest"])
def test_a_suspended_or_guest_job_runs_every_pass(store: db.Store, how: str) -> None:
    node(store, "a1")
    if how == "suspended":  # its turn comes back on time slicing's clock
        a, b = jobs.submit(store, [req(1)] * 2)
        on_gpus(store, a, "a1", [0], since=100.0, mode="time-sliced")
        on_gpus(store, b, "a1", [0], since=100.0, mode="time-sliced", state="SUSPENDED")
    else:  # evicted on measured samples, which the inputs do not hold
        (g,) = jobs.submit(store, [req(1, job_class="opportunistic")])
        on_gpus(store, g, "a1", [0], since=100.0, mode="opportunistic")
    passes = Passes(store, GandivaPolicy())
    assert all(passes.tick() for _ in range(3))


def test_a_policy_that_is_not_steady_runs_every_pass(store: db.Store) -> None:
    """LAS preempts on time alone (a job past its quantum on a drained node)."""
    node(store, "a1")
    passes = Passes(store, LasPolicy())
    assert not passes.gate.steady
    assert all(passes.tick() for _ in range(3))


def test_a_pass_that_failed_is_not_skipped(store: db.Store) -> None:
    node(store, "a1")
    gate = Gate(WithGuests(GandivaPolicy()))
    ran: list[int] = []

    def fails() -> Applied:
        ran.append(1)
        raise RuntimeError("store went away")

    with pytest.raises(RuntimeError):
        gate.run(store.engine, (), fails)
    assert gate.run(store.engine, (), Applied) is not None
    assert gate.run(store.engine, (), Applied) is None
    assert ran == [1]
