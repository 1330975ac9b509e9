"""The starvation guard: a job needing whole nodes gets them after waiting, by requeue."""

from __future__ import annotations

import pytest
from corekit import gandiva, new_state, nodes_of, put, submit

from gctl.core.decisions import Queue, Requeue
from gctl.core.model import JobStatus, Priority
from gctl.core.state import StateError

DAY = 86400.0


def test_whole_node_job_waits_then_takes_the_least_loaded_node() -> None:
    state = new_state(4, 4)
    policy = gandiva(starvation_guard=True, starvation_limit=DAY)
    put(state, "a", "n0", (0, 1))
    put(state, "b", "n0", (2, 3))
    for i in range(4):
        put(state, f"s{i}", "n1", (i,))
    submit(state, "t", 1, 0.0)
    policy.schedule(state, 0.0)  # t time-slices on n1, which is now the more loaded node
    submit(state, "big", 4, 1.0)
    assert [type(d) for d in policy.schedule(state, 10.0)] == [Queue]
    assert state.jobs["big"].status is JobStatus.PENDING
    out = policy.schedule(state, DAY + 1.0)
    assert [d.job_id for d in out if isinstance(d, Requeue)] == ["a", "b"]
    assert all("emptied for job big" in d.reason for d in out if isinstance(d, Requeue))
    assert nodes_of(state, "big") == {"n0"} and state.jobs["big"].status is JobStatus.RUNNING
    # nowhere to share for 2-GPU jobs now: they wait in the queue, progress kept
    assert state.jobs["a"].status is state.jobs["b"].status is JobStatus.PENDING
    assert all(state.jobs[f"s{i}"].status is not JobStatus.PENDING for i in range(4))


def test_a_job_that_can_time_slice_is_not_a_starvation_case() -> None:
    state = new_state(4)
    policy = gandiva(starvation_guard=True, starvation_limit=DAY, max_height=1.0)
    put(state, "a", "n0", (0, 1, 2, 3))  # affinity 4: a 4-GPU job may time-slice here
    submit(state, "x", 4, 0.0)
    policy.schedule(state, 0.0)
    out = policy.schedule(state, 2 * DAY)
    assert not any(isinstance(d, Requeue) for d in out)


def test_higher_priority_work_is_never_displaced() -> None:
    state = new_state(4, 4)
    policy = gandiva(starvation_guard=True, starvation_limit=DAY)
    put(state, "h0", "n0", (0,), priority=Priority.HIGH)
    put(state, "h1", "n1", (0,), priority=Priority.HIGH)
    submit(state, "big", 8, 0.0)
    out = policy.schedule(state, 3 * DAY)
    assert not any(isinstance(d, Requeue) for d in out)
    assert state.jobs["big"].status is JobStatus.PENDING


def test_a_job_larger_than_a_node_gets_several_nodes() -> None:
    state = new_state(4, 4, 4)
    policy = gandiva(starvation_guard=True, starvation_limit=DAY)
    for i, node in enumerate(("n0", "n1", "n2")):
        put(state, f"s{i}", node, range(i + 1))  # loads 1, 2, 3
    submit(state, "big", 8, 0.0)
    policy.schedule(state, DAY)
    assert nodes_of(state, "big") == {"n0", "n1"}
    assert state.jobs["s2"].status is JobStatus.RUNNING  # n2 untouched


def test_guard_is_off_by_default_and_then_the_job_keeps_waiting() -> None:
    state = new_state(4)
    policy = gandiva()
    put(state, "a", "n0", (0,))
    submit(state, "big", 4, 0.0)
    policy.schedule(state, 30 * DAY)
    assert state.jobs["big"].status is JobStatus.PENDING


def test_requeue_keeps_the_job_and_frees_its_gpus() -> None:
    state = new_state(4)
    put(state, "a", "n0", (0, 1))
    state.commit([Requeue("a", "test")], 5.0)
    js = state.jobs["a"]
    assert js.status is JobStatus.PENDING and js.gpus == () and js.since == 5.0
    assert state.total_free == 4 and state.nodes["n0"].load == 0
    with pytest.raises(StateError, match="already pending"):
        state.commit([Requeue("a", "again")], 6.0)


def test_a_job_smaller_than_a_node_takes_only_the_gpus_it_needs() -> None:
    state = new_state(8)
    policy = gandiva(starvation_guard=True, starvation_limit=DAY)
    for i in range(6):
        put(state, f"s{i}", "n0", (i,))
    submit(state, "four", 4, 0.0)  # 2 GPUs free and no node of affinity 4: it cannot share
    policy.schedule(state, 1.0)
    assert state.jobs["four"].status is JobStatus.PENDING
    out = policy.schedule(state, DAY + 1.0)
    assert [d.job_id for d in out if isinstance(d, Requeue)] == ["s0", "s1"]
    assert state.jobs["four"].gpus == (("n0", 0), ("n0", 1), ("n0", 6), ("n0", 7))
    # the displaced jobs time-slice with the others at once, none left waiting
    assert all(state.jobs[f"s{i}"].status is not JobStatus.PENDING for i in range(6))
    assert len(state.shared) == 2


def test_a_job_the_guard_started_is_never_displaced_for_one_of_its_size() -> None:
    state = new_state(4, 4, 4)
    policy = gandiva(starvation_guard=True, starvation_limit=DAY)
    submit(state, "big1", 8, 0.0)
    policy.schedule(state, 0.0)
    assert nodes_of(state, "big1") == {"n0", "n1"}
    put(state, "s", "n2", (0,))
    submit(state, "big2", 8, 1.0)
    policy.schedule(state, 3 * DAY)
    assert state.jobs["big1"].status is JobStatus.RUNNING
    assert state.jobs["big2"].status is JobStatus.PENDING  # only n2 holds smaller jobs


def test_a_single_gpu_job_never_displaces_anyone() -> None:
    state = new_state(2)
    policy = gandiva(starvation_guard=True, starvation_limit=DAY, max_height=1.0)
    put(state, "a", "n0", (0,))
    put(state, "b", "n0", (1,))
    submit(state, "c", 1, 0.0)
    policy.schedule(state, 0.0)
    out = policy.schedule(state, 3 * DAY)
    assert not any(isinstance(d, Requeue) for d in out)
    assert state.jobs["c"].status is JobStatus.PENDING
