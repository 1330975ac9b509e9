"""The FIFO baseline: strict arrival order, consolidated placement, no preemption."""

from __future__ import annotations

import pytest
from corekit import new_state, of_type, put, submit

from gctl.core.decisions import Place, Resume, Suspend
from gctl.core.model import JobStatus, Priority, ShareMode
from gctl.core.placement import consolidated_set
from gctl.core.policies.fifo import FifoPolicy


def test_head_of_line_blocks_later_jobs_that_would_fit() -> None:
    state = new_state(4)
    policy = FifoPolicy()
    submit(state, "a", 3, 0.0)
    policy.schedule(state, 0.0)
    submit(state, "b", 2, 1.0)
    submit(state, "c", 1, 2.0)  # would fit in the one free GPU
    assert policy.schedule(state, 2.0) == []
    assert state.jobs["b"].status is JobStatus.PENDING
    assert state.jobs["c"].status is JobStatus.PENDING
    assert state.total_free == 1
    state.finish("a", 10.0)
    out = policy.schedule(state, 10.0)
    assert [d.job_id for d in out] == ["b", "c"]
    assert all(isinstance(d, Place) and d.mode is ShareMode.EXCLUSIVE for d in out)


def test_arrival_order_ignores_priority() -> None:
    state = new_state(2)
    policy = FifoPolicy()
    submit(state, "n", 2, 0.0)
    submit(state, "h", 2, 1.0, priority=Priority.HIGH)
    submit(state, "low", 1, 2.0, priority=Priority.LOW)
    out = policy.schedule(state, 2.0)
    assert [d.job_id for d in out] == ["n"]
    state.finish("n", 5.0)
    out = policy.schedule(state, 5.0)
    assert [d.job_id for d in out] == ["h"]
    assert state.jobs["low"].status is JobStatus.PENDING


def test_consolidated_best_fit_node_then_fewest_nodes() -> None:
    state = new_state(4, 4, 4)
    put(state, "x", "n0", (0, 1, 2))  # n0: 1 free
    put(state, "y", "n1", (0,))  # n1: 3 free, n2: 4 free
    policy = FifoPolicy()
    submit(state, "a", 1, 0.0)
    policy.schedule(state, 0.0)
    assert state.jobs["a"].gpus == (("n0", 3),)  # the fullest node that fits, not n2
    submit(state, "b", 3, 1.0)
    policy.schedule(state, 1.0)
    assert state.jobs["b"].gpus == (("n1", 1), ("n1", 2), ("n1", 3))
    submit(state, "c", 4, 2.0)
    policy.schedule(state, 2.0)
    assert [n for n, _ in state.jobs["c"].gpus] == ["n2"] * 4  # one whole node
    assert state.total_free == 0


def test_consolidated_spans_the_fewest_nodes() -> None:
    state = new_state(4, 4, 4)
    put(state, "a", "n0", (0, 1, 2))  # n0: 1 free
    put(state, "b", "n1", (0,))  # n1: 3 free
    put(state, "c", "n2", (0, 1))  # n2: 2 free
    assert consolidated_set(state, 7) is None
    found = consolidated_set(state, 5)
    assert found is not None
    assert sorted({n for n, _ in found}) == ["n1", "n2"]  # 3 + 2, not the 1-free node
    assert consolidated_set(state, 1) == (("n0", 3),)


def test_never_suspends_or_shares() -> None:
    state = new_state(2, 2)
    policy = FifoPolicy()
    decisions = []
    for k in range(8):
        submit(state, f"j{k}", 1 + k % 2, float(k), priority=Priority(k % 3))
        decisions += policy.schedule(state, float(k))
        decisions += policy.introspect(state, float(k) + 0.5)
    assert not of_type(decisions, Suspend) and not of_type(decisions, Resume)
    assert not state.shared
    assert all(d.mode is ShareMode.EXCLUSIVE for d in of_type(decisions, Place))
    assert state.cluster_height() <= 1.0
    assert not policy.wants_introspection(state)
    running = [j for j, js in state.jobs.items() if js.status is JobStatus.RUNNING]
    for j in running:
        state.finish(j, 20.0)
    decisions = policy.schedule(state, 20.0)
    assert not of_type(decisions, Suspend)
    assert len(state.groups) == sum(
        1 for js in state.jobs.values() if js.status is JobStatus.RUNNING
    )


def test_fifo_rejects_options() -> None:
    with pytest.raises(TypeError):
        FifoPolicy(quantum=1.0)
