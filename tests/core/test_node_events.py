"""Node failures and returns: jobs go back to the queue, the node is unseen until it is back."""

from __future__ import annotations

import pytest
from corekit import gandiva, new_state, nodes_of, put, submit

from gctl.core.model import JobStatus
from gctl.core.state import StateError


def test_node_down_requeues_every_job_on_it_and_never_places_there() -> None:
    state = new_state(4, 4)
    policy = gandiva()
    put(state, "a", "n0", (0, 1))
    put(state, "b", "n0", (2, 3))
    put(state, "c", "n1", (0, 1, 2))
    submit(state, "s", 2, 1.0)
    policy.schedule(state, 1.0)  # time-slices with a or b on n0
    assert nodes_of(state, "s") == {"n0"}
    requeued = state.node_down("n0", 5.0)
    assert sorted(requeued) == ["a", "b", "s"]
    for job in requeued:
        assert state.jobs[job].status is JobStatus.PENDING and state.jobs[job].gpus == ()
        assert state.jobs[job].since == 5.0
    assert state.total_free == 1  # n0's GPUs no longer count
    policy.schedule(state, 5.0)
    assert all(state.jobs[j].status is JobStatus.PENDING for j in requeued)  # 2 GPUs nowhere
    assert state.nodes["n0"].load == 0
    state.finish("c", 6.0)
    policy.schedule(state, 6.0)
    assert {n for j in requeued for n in nodes_of(state, j)} == {"n1"}


def test_node_up_returns_the_node_to_placement() -> None:
    state = new_state(4)
    policy = gandiva()
    state.node_down("n0", 0.0)
    submit(state, "x", 2, 1.0)
    policy.schedule(state, 1.0)
    assert state.jobs["x"].status is JobStatus.PENDING
    state.node_up("n0")
    assert state.total_free == 4
    policy.schedule(state, 2.0)
    assert nodes_of(state, "x") == {"n0"}


def test_down_and_up_are_idempotent_and_unknown_nodes_are_refused() -> None:
    state = new_state(4)
    assert state.node_down("n0", 0.0) == []
    assert state.node_down("n0", 1.0) == []
    assert state.total_free == 0
    state.node_up("n0")
    state.node_up("n0")
    assert state.total_free == 4
    with pytest.raises(StateError, match="unknown node 'n9'"):
        state.node_down("n9", 0.0)


def test_drained_node_keeps_its_jobs_but_takes_no_new_work() -> None:
    state = new_state(4, 4)
    policy = gandiva()
    put(state, "a", "n0", (0, 1))
    state.drain("n0", "operator")
    assert state.total_free == 4  # n0's two free GPUs no longer count
    assert state.jobs["a"].status is JobStatus.RUNNING
    submit(state, "x", 2, 1.0)
    submit(state, "y", 2, 1.0)
    submit(state, "z", 2, 1.0)
    policy.schedule(state, 1.0)
    assert nodes_of(state, "x") == nodes_of(state, "y") == {"n1"}
    assert "n0" not in nodes_of(state, "z")  # time-sliced on n1 or queued, never on n0
    state.finish("a", 2.0)  # its GPUs free up but stay closed
    policy.schedule(state, 2.0)
    assert state.nodes["n0"].load == 0 and state.total_free == 0


def test_a_node_reopens_only_when_every_holder_undrains_it() -> None:
    state = new_state(4)
    state.drain("n0", "operator")
    state.drain("n0", "maintenance")
    state.undrain("n0", "operator")
    assert not state.nodes["n0"].open and state.total_free == 0
    state.node_down("n0", 0.0)
    state.undrain("n0", "maintenance")
    assert not state.nodes["n0"].open  # still down
    state.node_up("n0")
    assert state.nodes["n0"].open and state.total_free == 4
    submit(state, "x", 4, 1.0)
    gandiva().schedule(state, 1.0)
    assert nodes_of(state, "x") == {"n0"}
