"""The starvation guard: a job size held below its share of the cluster gets room, by requeue.

A size's share is the part of the cluster's GPUs its unfinished jobs ask for
among everyone's; what it holds is the GPUs its jobs are on (a shared set
split evenly). The numbers in each test are worked out in its comments.
"""

from __future__ import annotations

import pytest
from corekit import gandiva, new_state, nodes_of, put, submit

from gctl.core import starvation
from gctl.core.decisions import Queue, Requeue
from gctl.core.model import JobStatus, Priority
from gctl.core.policies.gandiva import GandivaConfig, GandivaPolicy
from gctl.core.state import ClusterState, StateError

DAY = 86400.0


def test_shares_follow_what_unfinished_jobs_ask_and_what_they_hold() -> None:
    state = new_state(4, 4)
    put(state, "a", "n0", (0, 1))
    put(state, "s", "n1", (0,))
    submit(state, "t", 1, 1.0)
    gandiva().schedule(state, 1.0)  # t takes a free GPU of n1
    submit(state, "big", 4, 2.0)
    # asked: 2 (size 2) + 2 (size 1) + 4 (size 4) = 8 GPUs, on 8 GPUs
    got = starvation.shares(state)
    assert got.fair == {2: 2.0, 1: 2.0, 4: 4.0}
    assert got.held == {2: 2.0, 1: 2.0}
    assert got.room_for(4) and not got.room_for(2) and not got.above(1)
    state.finish("t", 3.0)
    assert state.backlog == {2: 2, 1: 1, 4: 4}


def _two_nodes_of_single_gpu_jobs() -> tuple[ClusterState, GandivaPolicy]:
    """Two 4-GPU nodes full of 1-GPU jobs (s0-s3 on n0, r0-r3 on n1), guard limit one day."""
    state = new_state(4, 4)
    for i in range(4):
        put(state, f"s{i}", "n0", (i,))
        put(state, f"r{i}", "n1", (i,))
    return state, gandiva(starvation_limit=DAY)


def test_a_size_below_its_share_waits_then_takes_the_least_loaded_node() -> None:
    state, policy = _two_nodes_of_single_gpu_jobs()
    submit(state, "t", 1, 0.0)
    policy.schedule(state, 0.0)
    assert nodes_of(state, "t") == {"n0"}  # t time-slices on n0, now the more loaded node
    submit(state, "big1", 4, 1.0)
    submit(state, "big2", 4, 1.0)
    # asked: 9 GPUs by 1-GPU jobs, 8 by 4-GPU jobs, on 8 GPUs:
    # size 4's share is 8 x 8 / 17 = 3.8 < 4, no room yet (big2 waits behind big1)
    assert [type(d) for d in policy.schedule(state, 10.0)] == [Queue]
    submit(state, "big3", 4, 20.0)  # now 8 x 12 / 21 = 4.6: room for one
    assert not any(isinstance(d, Requeue) for d in policy.schedule(state, 30.0))  # too early
    out = policy.schedule(state, DAY + 1.0)
    assert [d.job_id for d in out if isinstance(d, Requeue)] == ["r0", "r1", "r2", "r3"]
    assert all("emptied for job big1" in d.reason for d in out if isinstance(d, Requeue))
    # n1 now has affinity 4: the other two take turns with big1 there (Algorithm 1, step 4)
    assert nodes_of(state, "big2") == nodes_of(state, "big3") == {"n1"}
    # the displaced jobs time-slice on n0 at once, progress kept
    assert all(state.jobs[f"r{i}"].status is not JobStatus.PENDING for i in range(4))
    assert not any(isinstance(d, Requeue) for d in policy.schedule(state, 2 * DAY))


def test_a_size_whose_share_is_below_one_job_is_not_helped() -> None:
    state, policy = _two_nodes_of_single_gpu_jobs()
    submit(state, "big", 4, 0.0)  # share 8 x 4 / 12 = 2.7 GPUs
    policy.schedule(state, 0.0)
    out = policy.schedule(state, 5 * DAY)
    assert not any(isinstance(d, Requeue) for d in out)
    assert state.jobs["big"].status is JobStatus.PENDING


def test_only_sizes_above_their_share_are_displaced() -> None:
    state = new_state(4, 4)
    policy = gandiva(starvation_limit=DAY)
    put(state, "p", "n0", (0, 1))  # size 2 holds 2 GPUs
    put(state, "q0", "n0", (2,))
    put(state, "q1", "n0", (3,))
    for i in range(2, 6):
        put(state, f"q{i}", "n1", (i - 2,))
    submit(state, "p2", 2, 0.0)
    submit(state, "p3", 2, 0.0)
    for name in ("b1", "b2", "b3"):
        submit(state, name, 4, 0.0)
    # asked: 6 (size 1), 6 (size 2), 12 (size 4) = 24 on 8 GPUs: shares 2, 2 and 4.
    # Size 1 holds 6 (above), size 2 holds 2 (not above): p is never displaced.
    policy.schedule(state, 0.0)
    out = policy.schedule(state, DAY + 1.0)
    assert [d.job_id for d in out if isinstance(d, Requeue)] == ["q2", "q3", "q4", "q5"]
    assert nodes_of(state, "b1") == {"n1"}
    assert state.jobs["p"].gpus == (("n0", 0), ("n0", 1))  # taking turns with p2, not requeued


def test_higher_priority_work_is_never_displaced() -> None:
    state = new_state(4, 4, 4)
    policy = gandiva(starvation_limit=DAY)
    put(state, "h0", "n0", (0,), priority=Priority.HIGH)
    put(state, "h1", "n1", (0,), priority=Priority.HIGH)
    for i in range(1, 4):
        put(state, f"a{i}", "n0", (i,))
        put(state, f"b{i}", "n1", (i,))
    for i in range(4):
        put(state, f"c{i}", "n2", (i,))
    for name in ("big1", "big2", "big3"):
        submit(state, name, 8, 0.0)  # share 12 x 24 / 36 = 8: room for one
    policy.schedule(state, 0.0)
    out = policy.schedule(state, 3 * DAY)  # only n2 yields, and big needs two nodes
    assert not any(isinstance(d, Requeue) for d in out)
    assert state.jobs["big1"].status is JobStatus.PENDING


def test_a_job_larger_than_a_node_gets_the_least_loaded_nodes() -> None:
    state = new_state(4, 4, 4)
    policy = gandiva(starvation_limit=DAY)
    for i, node in enumerate(("n0", "n1", "n2")):
        put(state, f"s{i}", node, range(i + 1))  # loads 1, 2, 3; each its own size
    submit(state, "big1", 8, 0.0)
    submit(state, "big2", 8, 0.0)  # size 8's share: 12 x 16 / 22 = 8.7
    policy.schedule(state, DAY)
    assert nodes_of(state, "big1") == {"n0", "n1"}
    assert state.jobs["s2"].status is JobStatus.RUNNING  # n2 untouched


def test_the_guard_is_on_by_default_and_can_be_switched_off() -> None:
    assert GandivaConfig().starvation_guard is True
    state = new_state(4, 4)
    policy = gandiva(starvation_guard=False, starvation_limit=DAY)
    for i in range(4):
        put(state, f"s{i}", "n0", (i,))
    put(state, "r", "n1", (0, 1, 2))
    for name in ("big1", "big2"):
        submit(state, name, 4, 0.0)  # share 8 x 8 / 15 = 4.3: the guard would act
    policy.schedule(state, 30 * DAY)
    assert state.jobs["big1"].status is JobStatus.PENDING


def test_requeue_keeps_the_job_and_frees_its_gpus() -> None:
    state = new_state(4)
    put(state, "a", "n0", (0, 1))
    state.commit([Requeue("a", "test")], 5.0)
    js = state.jobs["a"]
    assert js.status is JobStatus.PENDING and js.gpus == () and js.since == 5.0
    assert state.total_free == 4 and state.nodes["n0"].load == 0
    with pytest.raises(StateError, match="already pending"):
        state.commit([Requeue("a", "again")], 6.0)


def test_a_requeued_job_waits_in_its_arrival_place() -> None:
    """A displaced job goes back before the jobs of its size that arrived after it."""
    state = new_state(4)
    put(state, "a", "n0", (0, 1))
    for k, job in enumerate(("b", "c")):
        submit(state, job, 2, 1.0 + k)
    state.commit([Requeue("a", "test")], 5.0)
    assert list(state.pending[(int(Priority.NORMAL), 2)]) == ["a", "b", "c"]


def test_a_job_smaller_than_a_node_takes_only_the_gpus_it_needs() -> None:
    state = new_state(8)
    policy = gandiva(starvation_limit=DAY)
    for i in range(6):
        put(state, f"s{i}", "n0", (i,))
    submit(state, "four", 4, 0.0)  # 2 GPUs free and no node of affinity 4: it cannot share
    submit(state, "four2", 4, 0.0)  # size 4's share: 8 x 8 / 14 = 4.6
    policy.schedule(state, 1.0)
    assert state.jobs["four"].status is JobStatus.PENDING
    out = policy.schedule(state, DAY + 1.0)
    assert [d.job_id for d in out if isinstance(d, Requeue)] == ["s0", "s1"]
    assert state.jobs["four"].gpus == (("n0", 0), ("n0", 1), ("n0", 6), ("n0", 7))
    # the displaced jobs time-slice with the others at once, none left waiting
    assert all(state.jobs[f"s{i}"].status is not JobStatus.PENDING for i in range(6))
    assert len(state.shared) == 2


def test_a_job_the_guard_started_is_never_displaced_for_one_of_its_size() -> None:
    state = new_state(4, 4, 4, 4)
    policy = gandiva(starvation_limit=DAY)
    for i in range(4):
        put(state, f"s{i}", f"n{i}", (0,))
    for name in ("big1", "big2", "big3"):
        submit(state, name, 8, 0.0)  # share 16 x 24 / 28 = 13.7: room for one
    policy.schedule(state, DAY)
    started = [b for b in ("big1", "big2", "big3") if state.jobs[b].status is JobStatus.RUNNING]
    assert started == ["big1"]
    policy.schedule(state, 3 * DAY)  # 8 held + 8 > 13.7: no more room for size 8
    assert state.jobs["big1"].status is JobStatus.RUNNING
    assert state.jobs["big2"].status is JobStatus.PENDING


def test_a_single_gpu_job_never_displaces_anyone() -> None:
    state = new_state(2)
    policy = gandiva(starvation_limit=DAY, max_height=1.0)
    put(state, "a", "n0", (0,))
    put(state, "b", "n0", (1,))
    submit(state, "c", 1, 0.0)
    policy.schedule(state, 0.0)
    out = policy.schedule(state, 3 * DAY)
    assert not any(isinstance(d, Requeue) for d in out)
    assert state.jobs["c"].status is JobStatus.PENDING
