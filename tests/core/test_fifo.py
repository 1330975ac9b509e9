"""The FIFO baseline: strict arrival order, first fit, no preemption."""

from __future__ import annotations

import pytest
from corekit import new_state, of_type, put, submit

from gctl.core.decisions import Place, Resume, Suspend
from gctl.core.model import JobStatus, Priority, ShareMode
from gctl.core.policies.fifo import FifoPolicy, first_fit


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


def test_first_fit_lowest_indices() -> None:
    state = new_state(8, 8)
    policy = FifoPolicy()
    submit(state, "a", 1, 0.0)
    submit(state, "b", 2, 1.0)
    policy.schedule(state, 1.0)
    assert state.jobs["a"].gpus == (("n0", 0),)
    assert state.jobs["b"].gpus == (("n0", 1), ("n0", 2))
    state.finish("a", 2.0)
    submit(state, "c", 1, 3.0)
    policy.schedule(state, 3.0)
    assert state.jobs["c"].gpus == (("n0", 0),)  # the hole, not a better-linked GPU
    submit(state, "d", 6, 4.0)
    policy.schedule(state, 4.0)
    assert state.jobs["d"].gpus == tuple(("n1", i) for i in range(6))  # n0 has only 5
    submit(state, "e", 7, 5.0)
    policy.schedule(state, 5.0)
    assert state.jobs["e"].gpus == (
        *(("n0", i) for i in range(3, 8)),
        ("n1", 6),
        ("n1", 7),
    )
    assert state.total_free == 0


def test_first_fit_function_returns_none_when_short() -> None:
    state = new_state(4, 4)
    put(state, "a", "n0", (0, 1, 2))
    put(state, "b", "n1", (1, 2, 3))
    assert first_fit(state, 3) is None
    assert first_fit(state, 2) == (("n0", 3), ("n1", 0))
    assert first_fit(state, 1) == (("n0", 3),)


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
