"""Grow after an idle period, shrink at once when queued work needs GPUs."""

from __future__ import annotations

from corekit import gandiva, new_state, nodes_of, of_type, put, submit

from gctl.core import elastic
from gctl.core.decisions import Grow, Place, Queue, Shrink
from gctl.core.model import JobStatus, ShareMode
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.core.state import ClusterState

IDLE = 600.0


def test_grow_only_after_idle_period() -> None:
    state = new_state(8)
    policy = gandiva(grow_idle_period=IDLE)
    submit(state, "e", 2, elastic_min=1, elastic_max=4)
    policy.schedule(state, 0.0)
    assert policy.introspect(state, 0.0) == []
    assert policy.introspect(state, 300.0) == []
    assert policy.introspect(state, 599.9) == []
    assert state.jobs["e"].held == 2
    out = policy.introspect(state, 600.0)
    [grow] = of_type(out, Grow)
    assert grow.job_id == "e" and len(grow.gpus) == 4
    assert state.jobs["e"].held == 4  # up to elastic_max, not the 8 free
    assert state.jobs["e"].resized_at == 600.0
    assert state.mode_of("e") is ShareMode.EXCLUSIVE
    assert policy.introspect(state, 5000.0) == []  # already at its maximum


def test_busy_pass_restarts_the_idle_clock() -> None:
    state = new_state(8)
    policy = gandiva(grow_idle_period=IDLE)
    submit(state, "e", 2, elastic_min=2, elastic_max=4)
    policy.schedule(state, 0.0)
    policy.introspect(state, 0.0)
    submit(state, "big", 7, 300.0)  # cannot fit, cannot share: waits
    assert of_type(policy.schedule(state, 300.0), Queue)
    assert not of_type(policy.introspect(state, 300.0), Grow)
    state.finish("big", 400.0)  # cancelled
    policy.schedule(state, 400.0)
    assert not of_type(policy.introspect(state, 400.0), Grow)
    assert not of_type(policy.introspect(state, 999.0), Grow)
    assert of_type(policy.introspect(state, 1000.0), Grow)


def _elastic_beside_five_gpu_job() -> tuple[ClusterState, GandivaPolicy]:
    """Two 8-GPU nodes; on n0 a 5-GPU job and an elastic job on GPUs 5-6, idle clock started."""
    state = new_state(8, 8)
    policy = gandiva(grow_idle_period=IDLE)
    put(state, "j", "n0", range(5))
    put(state, "e", "n0", (5, 6), elastic_min=1, elastic_max=4)
    policy.introspect(state, 0.0)
    return state, policy


def test_grow_only_on_its_own_node() -> None:
    state, policy = _elastic_beside_five_gpu_job()
    out = policy.introspect(state, 600.0)
    [grow] = of_type(out, Grow)
    assert grow.gpus == (("n0", 5), ("n0", 6), ("n0", 7))
    assert nodes_of(state, "e") == {"n0"}
    assert state.nodes["n1"].load == 0


def test_no_grow_when_its_node_is_full() -> None:
    state = new_state(4, 8)
    policy = gandiva(grow_idle_period=IDLE)
    put(state, "j", "n0", range(2))
    put(state, "e", "n0", (2, 3), elastic_min=1, elastic_max=4)
    policy.introspect(state, 0.0)
    assert policy.introspect(state, 700.0) == []
    assert state.jobs["e"].held == 2


def test_resized_job_does_not_grow_again_within_the_period() -> None:
    state, policy = _elastic_beside_five_gpu_job()
    assert of_type(policy.introspect(state, 600.0), Grow)
    assert state.jobs["e"].held == 3
    state.finish("j", 610.0)
    policy.schedule(state, 610.0)
    assert policy.introspect(state, 620.0) == []  # room now, but resized 20 s ago
    assert policy.introspect(state, 1199.0) == []
    out = policy.introspect(state, 1200.0)
    assert [g.job_id for g in of_type(out, Grow)] == ["e"]
    assert state.jobs["e"].held == 4


def test_grow_extends_with_best_linked_gpus() -> None:
    """Growing 2 -> 4 from GPUs 6,7 should take their socket mates 4,5.

    elastic.grow first asks for the best 4-set of (free | own) GPUs; when that
    set (0-3) does not contain the job's own GPUs it adds ``best_set(free, extra)``
    chosen without regard to the GPUs the job keeps, here 0 and 1 on the other
    socket.
    """
    state = new_state(8)
    policy = gandiva(grow_idle_period=IDLE)
    put(state, "e", "n0", (6, 7), elastic_min=1, elastic_max=4)
    policy.introspect(state, 0.0)
    policy.introspect(state, 600.0)
    assert state.jobs["e"].held == 4
    assert [i for _, i in state.jobs["e"].gpus] == [4, 5, 6, 7]


def test_shrink_at_once_for_queued_job() -> None:
    state = new_state(8)
    policy = gandiva(grow_idle_period=IDLE)
    submit(state, "e", 4, elastic_min=2, elastic_max=8)
    policy.schedule(state, 0.0)
    policy.introspect(state, 0.0)
    policy.introspect(state, 600.0)
    assert state.jobs["e"].held == 8
    submit(state, "j", 4, 601.0)
    out = policy.schedule(state, 601.0)  # right after the grow: no idle wait for shrink
    assert [(type(d), d.job_id) for d in out] == [(Shrink, "e"), (Place, "j")]
    assert state.jobs["e"].held == 4
    assert state.jobs["e"].resized_at == 601.0
    assert state.jobs["j"].status is JobStatus.RUNNING
    assert state.mode_of("j") is ShareMode.EXCLUSIVE
    assert state.mode_of("e") is ShareMode.EXCLUSIVE
    assert not set(state.jobs["e"].gpus) & set(state.jobs["j"].gpus)


def test_shrink_never_below_elastic_min() -> None:
    state = new_state(8)
    policy = gandiva(grow_idle_period=IDLE)
    submit(state, "e", 4, elastic_min=2, elastic_max=8)
    policy.schedule(state, 0.0)
    policy.introspect(state, 0.0)
    policy.introspect(state, 600.0)
    submit(state, "k", 8, 601.0)
    out = policy.schedule(state, 601.0)
    [shrink] = of_type(out, Shrink)
    assert len(shrink.gpus) == 2
    assert state.jobs["e"].held == 2
    assert state.jobs["k"].status is JobStatus.PENDING
    out = policy.schedule(state, 602.0)
    assert not of_type(out, Shrink)
    assert state.jobs["e"].held == 2


def test_no_shrink_when_free_gpus_suffice() -> None:
    state = new_state(8)
    policy = gandiva(grow_idle_period=IDLE)
    submit(state, "e", 2, elastic_min=1, elastic_max=4)
    policy.schedule(state, 0.0)
    policy.introspect(state, 0.0)
    policy.introspect(state, 600.0)
    assert state.jobs["e"].held == 4
    submit(state, "j", 4, 601.0)
    out = policy.schedule(state, 601.0)
    assert not of_type(out, Shrink)
    assert state.jobs["e"].held == 4


def test_shrink_takes_biggest_surplus_first_and_only_the_deficit() -> None:
    state = new_state(8, 8)
    put(state, "a", "n0", range(6), elastic_min=2, elastic_max=6)  # surplus 4
    put(state, "b", "n1", range(8), elastic_min=4, elastic_max=8)  # surplus 4, later
    put(state, "c", "n0", (6, 7))
    out = elastic.shrink(state, 1.0, deficit=3)
    assert [(s.job_id, len(s.gpus)) for s in out] == [("a", 3)]
    assert state.jobs["b"].held == 8
    out = elastic.shrink(state, 2.0, deficit=6)
    assert [(s.job_id, len(s.gpus)) for s in out] == [("b", 4), ("a", 2)]


def test_shrink_keeps_a_connected_subset() -> None:
    state = new_state(8)
    put(state, "a", "n0", range(8), elastic_min=1, elastic_max=8)
    elastic.shrink(state, 1.0, deficit=6)
    (_, x), (_, y) = state.jobs["a"].gpus
    assert x // 2 == y // 2  # same PCIe switch
