"""Opportunistic jobs (TGS): guests of the cluster state, placed around policies, evicted first."""

from __future__ import annotations

import random

import pytest
from corekit import gandiva, new_state, observe, of_type, put, submit

from gctl.core.decisions import Migrate, Place, Queue, Requeue, Resume, Suspend
from gctl.core.model import JobClass, JobStatus, Priority, ShareMode
from gctl.core.opportunistic import Sharing, WithGuests
from gctl.core.policies.fifo import FifoPolicy
from gctl.core.state import ClusterState, StateError

OPP = {"job_class": JobClass.OPPORTUNISTIC}


def guest(state: ClusterState, job_id: str, gpus: int, now: float = 0.0, **kw: object) -> None:
    submit(state, job_id, gpus, now, **OPP, **kw)  # type: ignore[arg-type]


def test_a_guest_is_invisible_to_the_policy_and_takes_idle_gpus() -> None:
    state = new_state(4)
    guest(state, "g", 2)
    assert not state.pending and not state.backlog  # no policy queue sees it
    out = WithGuests(FifoPolicy()).schedule(state, 1.0)
    [place] = of_type(out, Place)
    assert place.job_id == "g" and place.mode is ShareMode.OPPORTUNISTIC
    assert state.jobs["g"].status is JobStatus.RUNNING
    assert state.total_free == 4 and not state.groups  # production still sees 4 free GPUs
    assert state.mode_of("g") is ShareMode.OPPORTUNISTIC
    assert {state.guest_on[(n, i)] for n, i in state.jobs["g"].gpus} == {"g"}


def test_guests_take_the_node_with_fewest_idle_gpus() -> None:
    state = new_state(8, 8)
    put(state, "p", "n1", range(6))
    guest(state, "g", 2)
    WithGuests(FifoPolicy()).schedule(state, 1.0)
    assert state.jobs["g"].gpus == (("n1", 6), ("n1", 7))  # n0's 8 free GPUs stay whole


def test_production_evicts_the_guest_first_in_the_same_pass() -> None:
    state = new_state(4)
    policy = WithGuests(FifoPolicy())
    guest(state, "g", 4)
    policy.schedule(state, 1.0)
    submit(state, "p", 4, 2.0)
    out = policy.schedule(state, 2.0)
    assert [type(d) for d in out] == [Requeue, Place, Queue]  # the eviction comes first
    assert out[0].job_id == "g" and "production job(s) p need its GPUs" in out[0].reason
    assert state.jobs["p"].status is JobStatus.RUNNING
    assert state.jobs["g"].status is JobStatus.PENDING and "g" in state.guest_queue
    assert not state.guest_on


def test_guests_never_change_production_decisions() -> None:
    """The same production workload and passes, with and without guests: the same production
    decisions, reasons included."""
    rng = random.Random(7)
    guests: set[str] = set()
    script = []
    for k in range(60):
        opp = rng.random() < 0.4
        if opp:
            guests.add(f"j{k}")
        script.append((f"j{k}", rng.choice((1, 1, 2, 4)), float(k), opp, rng.random() < 0.3))
    runs = []
    for with_guests in (False, True):
        state = new_state(8, 8)
        policy = WithGuests(gandiva())
        decided = []
        for job_id, gpus, at, opp, done in script:
            if with_guests or not opp:
                submit(state, job_id, gpus, at, **(OPP if opp else {}))  # type: ignore[arg-type]
            decided += policy.schedule(state, at) + policy.introspect(state, at + 0.5)
            running = [
                j
                for j, js in state.jobs.items()
                if js.status is JobStatus.RUNNING and not js.opportunistic
            ]
            if done and running:
                state.finish(sorted(running)[0], at + 0.7)
        production = [d for d in decided if d.job_id not in guests]
        runs.append([(type(d).__name__, d.job_id, d.reason) for d in production])
        for key, members in state.groups.items():  # invariant: no guest inside a group
            assert not any(state.jobs[m].opportunistic for m in members), key
    assert len(runs[0]) > 40 and runs[0] == runs[1]


def _hosted(
    min_idle: float = 0.2, util: float = 0.3, mem: int = 4000, need: int = 4000
) -> tuple[ClusterState, WithGuests]:
    state = new_state(2)
    put(state, "p0", "n0", (0,))
    put(state, "p1", "n0", (1,))
    observe(state, "p0", 0.0, util=0.9, mem=mem)
    observe(state, "p1", 0.0, util=util, mem=mem)
    guest(state, "g", 1, gpu_mem_mb=need)
    return state, WithGuests(FifoPolicy(), Sharing(min_idle=min_idle))


def test_with_no_idle_gpu_a_guest_joins_the_production_job_that_leaves_most_idle() -> None:
    state, policy = _hosted()
    [place] = of_type(policy.schedule(state, 1.0), Place)
    assert place.gpus == (("n0", 1),) and "beside production job p1" in place.reason
    assert state.host_of("g") == (("n0", 1),)
    assert state.groups[(("n0", 1),)] == ["p1"]  # the production group is unchanged


@pytest.mark.parametrize(
    ("util", "need", "why"),
    [(0.85, 4000, "utilisation"), (0.3, 13000, "memory")],
)
def test_a_guest_waits_where_production_leaves_no_room(util: float, need: int, why: str) -> None:
    state, policy = _hosted(util=util, need=need)
    out = policy.schedule(state, 1.0)
    [queued] = of_type(out, Queue)
    assert queued.job_id == "g" and "no production job leaves room" in queued.reason, why
    assert not of_type(out, Place)
    assert policy.schedule(state, 2.0) == []  # the reason is given once, not every pass


def test_colocate_off_keeps_guests_to_idle_gpus() -> None:
    state, _ = _hosted()
    out = WithGuests(FifoPolicy(), Sharing(colocate=False)).schedule(state, 1.0)
    assert not of_type(out, Place) and "no idle GPUs" in of_type(out, Queue)[0].reason


def test_production_memory_growth_evicts_the_guest_never_the_production_job() -> None:
    state, policy = _hosted()
    policy.schedule(state, 1.0)
    observe(state, "p1", 2.0, util=0.3, mem=13000)  # NVML: the production job grew
    out = policy.introspect(state, 3.0)
    [evicted] = of_type(out, Requeue)
    assert evicted.job_id == "g" and "GPU memory: production job p1 uses 13000 MB" in evicted.reason
    assert state.jobs["p1"].status is JobStatus.RUNNING
    assert not of_type(out, Suspend)


def test_a_production_job_time_slicing_onto_the_host_set_evicts_the_guest() -> None:
    state = new_state(1)
    put(state, "p1", "n0", (0,))
    observe(state, "p1", 0.0, util=0.3, mem=4000)
    guest(state, "g", 1, gpu_mem_mb=4000)
    policy = WithGuests(gandiva())
    policy.schedule(state, 1.0)
    assert state.host_of("g") == (("n0", 0),)
    submit(state, "p2", 1, 2.0)
    out = policy.schedule(state, 2.0)
    assert [(type(d), d.job_id) for d in out] == [
        (Requeue, "g"),
        (Suspend, "p1"),
        (Place, "p2"),
        (Queue, "g"),  # and it waits: no idle GPU, no production job alone
    ]
    assert state.groups[(("n0", 0),)] == ["p1", "p2"] and not state.guest_on


def test_the_guest_stays_when_its_host_finishes() -> None:
    state, policy = _hosted()
    policy.schedule(state, 1.0)
    state.finish("p1", 2.0)
    assert policy.schedule(state, 2.0) == []
    assert state.jobs["g"].status is JobStatus.RUNNING and state.host_of("g") is None


def test_guests_are_only_placed_suspended_resumed_or_requeued() -> None:
    state = new_state(4)
    guest(state, "g", 1)
    WithGuests(FifoPolicy()).schedule(state, 1.0)
    with pytest.raises(StateError, match="never moved"):
        state.apply(Migrate("g", state.jobs["g"].gpus, (("n0", 3),), "x"), 2.0)
    state.apply(Suspend("g", "operator"), 2.0)
    state.apply(Resume("g", "operator"), 3.0)
    assert state.jobs["g"].attained_at(4.0) == pytest.approx(2.0)  # ran 1-2 and 3-4


def test_node_down_requeues_its_guests_and_finish_frees_their_gpus() -> None:
    state = new_state(2, 2)
    guest(state, "a", 2)
    guest(state, "b", 2)
    WithGuests(FifoPolicy()).schedule(state, 1.0)
    assert [state.jobs[j].gpus[0][0] for j in ("a", "b")] == ["n0", "n1"]
    assert state.node_down("n0", 2.0) == ["a"]
    assert state.jobs["a"].status is JobStatus.PENDING and "a" in state.guest_queue
    state.finish("b", 3.0)
    assert not state.guest_on and not state.guests


def test_guests_go_highest_priority_then_oldest_and_a_full_size_is_not_retried() -> None:
    state = new_state(2)
    guest(state, "old", 1, 0.0)
    guest(state, "new", 1, 1.0)
    guest(state, "urgent", 1, 2.0, priority=Priority.HIGH)
    guest(state, "big", 4, 3.0)
    out = WithGuests(FifoPolicy(), Sharing(colocate=False)).schedule(state, 4.0)
    assert [d.job_id for d in of_type(out, Place)] == ["urgent", "old"]
    assert [d.job_id for d in of_type(out, Queue)] == ["new", "big"]
