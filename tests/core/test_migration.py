"""Migration: to freed GPUs, regrouping for locality, defragmentation."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

from corekit import gandiva, new_state, nodes_of, of_type, put, submit

from gctl.core import migration
from gctl.core.decisions import Migrate, Place, Queue, Resume, Suspend
from gctl.core.model import JobStatus, Priority, ShareMode
from gctl.core.state import ClusterState


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging if the body loops forever."""

    def _raise(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds}s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ---- time-sliced jobs move to freed GPUs ------------------------------------


def test_waiting_job_moves_to_gpus_freed_by_a_finish() -> None:
    state = new_state(2)
    policy = gandiva()
    put(state, "a", "n0", (0,))
    put(state, "b", "n0", (1,))
    submit(state, "c", 1, 1.0)
    policy.schedule(state, 1.0)
    assert state.members((("n0", 0),)) == ["a", "c"]
    state.finish("b", 10.0)
    out = policy.schedule(state, 10.0)
    assert out == [
        Migrate("a", (("n0", 0),), (("n0", 1),), state.jobs["a"].reason),
    ]
    assert state.jobs["a"].status is JobStatus.RUNNING
    assert state.jobs["a"].moves == 1
    assert state.mode_of("a") is ShareMode.EXCLUSIVE
    assert state.mode_of("c") is ShareMode.EXCLUSIVE
    assert not state.shared
    assert state.cluster_height() == 1.0


def test_oldest_sliced_job_leaves_first_even_during_its_turn() -> None:
    """Freed GPUs go to the oldest job taking turns, not to whichever happens to wait."""
    state = new_state(2)
    policy = gandiva(quantum=60.0)
    put(state, "a", "n0", (0,))
    put(state, "b", "n0", (1,))
    submit(state, "c", 1, 1.0)
    policy.schedule(state, 1.0)  # c takes turns with a; a waits
    policy.introspect(state, 61.0)  # a's turn again; c waits
    assert state.jobs["a"].status is JobStatus.RUNNING
    state.finish("b", 70.0)
    out = policy.schedule(state, 70.0)
    assert [(type(d), d.job_id) for d in out] == [(Migrate, "a"), (Resume, "c")]
    assert state.jobs["a"].gpus == (("n0", 1),)
    assert state.mode_of("a") is ShareMode.EXCLUSIVE
    assert state.jobs["c"].status is JobStatus.RUNNING
    assert not state.shared


def test_unslice_moves_high_priority_waiting_job_first() -> None:
    state = new_state(3)
    policy = gandiva()
    put(state, "n", "n0", (0,))
    put(state, "h", "n0", (1,), priority=Priority.HIGH)
    put(state, "f", "n0", (2,))
    submit(state, "x", 1, 1.0)
    submit(state, "y", 1, 1.0, priority=Priority.HIGH)
    state.commit(
        [
            Suspend("n", "test"),
            Place("x", (("n0", 0),), ShareMode.TIMESLICED, "test"),
            Suspend("h", "test"),
            Place("y", (("n0", 1),), ShareMode.TIMESLICED, "test"),
        ],
        1.0,
    )
    state.finish("f", 10.0)  # one GPU for two waiting jobs
    out = policy.schedule(state, 10.0)
    assert [(m.job_id, m.dst) for m in of_type(out, Migrate)] == [("h", (("n0", 2),))]
    assert state.jobs["n"].status is JobStatus.SUSPENDED
    assert state.mode_of("h") is ShareMode.EXCLUSIVE


def test_no_move_when_freed_gpus_are_too_few() -> None:
    state = new_state(4)
    policy = gandiva()
    put(state, "a", "n0", (0, 1))
    put(state, "b", "n0", (2,))
    put(state, "b2", "n0", (3,))
    submit(state, "c", 2, 1.0)
    policy.schedule(state, 1.0)
    assert state.members((("n0", 0), ("n0", 1))) == ["a", "c"]
    state.finish("b", 10.0)  # one GPU free: a needs two
    assert not of_type(policy.schedule(state, 10.0), Migrate)
    assert state.jobs["a"].status is JobStatus.SUSPENDED


# ---- regroup a job spread over nodes -----------------------------------------


def test_spread_job_is_regrouped_onto_one_node() -> None:
    state = new_state(4, 4)
    policy = gandiva()
    put(state, "p", "n0", (0, 1, 2))
    put(state, "q", "n1", (0, 1, 2))
    submit(state, "x", 2, 1.0)
    policy.schedule(state, 1.0)
    assert nodes_of(state, "x") == {"n0", "n1"}
    assert state.jobs["x"].gpus in state.scattered
    assert policy.introspect(state, 2.0) == []  # no room on one node yet
    state.finish("p", 10.0)
    policy.schedule(state, 10.0)
    out = policy.introspect(state, 11.0)
    [move] = of_type(out, Migrate)
    assert move.job_id == "x"
    assert {n for n, _ in move.dst} == {"n0"}
    assert nodes_of(state, "x") == {"n0"}
    assert not state.scattered
    assert state.nodes["n1"].free == 1
    assert state.nodes["n0"].free == 2


def test_regroup_respects_max_moves() -> None:
    state = new_state(2, 2, 8)
    put(state, "fill", "n2", range(8))
    submit(state, "x", 3)
    submit(state, "y", 1)
    gandiva().schedule(state, 0.0)
    assert len(nodes_of(state, "x")) == 2
    state.finish("fill", 1.0)
    out = migration.regroup(state, 2.0, max_moves=0)
    assert out == []
    out = migration.regroup(state, 2.0, max_moves=5)
    assert [m.job_id for m in out] == ["x"]
    assert nodes_of(state, "x") == {"n2"}


# ---- defragmentation -----------------------------------------------------------


def _defrag_cluster() -> ClusterState:
    """n0 busy with 2 free, n1 busy with 6 free, n2 busy with 5 free, n3 idle."""
    state = new_state(8, 8, 8, 8)
    put(state, "big", "n0", range(6))
    put(state, "s1", "n1", (0,))
    put(state, "s2", "n1", (1,))
    put(state, "mid", "n2", range(3))
    return state


def test_defragment_moves_most_free_node_into_fuller_ones() -> None:
    state = _defrag_cluster()
    out = migration.defragment(state, 1.0, threshold=2, max_moves=32)
    assert [(m.job_id, {n for n, _ in m.src}, {n for n, _ in m.dst}) for m in out] == [
        ("s1", {"n1"}, {"n0"}),
        ("s2", {"n1"}, {"n0"}),
    ]
    assert state.nodes["n1"].load == 0  # emptied
    assert state.nodes["n0"].free == 0
    assert state.nodes["n3"].load == 0  # never a move to an idle node
    assert nodes_of(state, "mid") == {"n2"}  # no fuller node has room for it


def test_defragment_via_policy_only_with_waiting_work() -> None:
    state = _defrag_cluster()
    policy = gandiva()
    assert policy.introspect(state, 1.0) == []  # nothing waits: leave it
    submit(state, "huge", 32, 2.0)
    assert of_type(policy.schedule(state, 2.0), Queue)
    out = policy.introspect(state, 3.0)
    assert [m.job_id for m in of_type(out, Migrate)] == ["s1", "s2"]


def test_defragment_stops_at_threshold() -> None:
    state = new_state(8, 8)
    put(state, "a", "n0", range(6))  # 2 free
    put(state, "b", "n1", range(7))  # 1 free
    assert migration.defragment(state, 1.0, threshold=3, max_moves=32) == []
    # with threshold 2, n0 (2 free) is over it: its job cannot move (too big)
    assert migration.defragment(state, 1.0, threshold=2, max_moves=32) == []
    state2 = new_state(8, 8)
    put(state2, "a", "n0", range(5))
    put(state2, "x", "n0", (5,))  # n0: 2 free
    put(state2, "b", "n1", range(7))  # n1: 1 free
    assert migration.defragment(state2, 1.0, threshold=3, max_moves=32) == []
    out = migration.defragment(state2, 1.0, threshold=2, max_moves=32)
    assert [(m.job_id, m.dst) for m in out] == [("x", (("n1", 7),))]


def test_defragment_never_loops_when_nothing_can_move() -> None:
    state = new_state(8, 8, 8)
    put(state, "a", "n0", range(6))  # 2 free, 6-GPU job
    put(state, "b", "n1", range(4))  # 4 free, 4-GPU job
    with deadline(5):
        out = migration.defragment(state, 1.0, threshold=1, max_moves=10**9)
    assert out == []
    assert state.nodes["n2"].load == 0


def test_defragment_respects_max_moves() -> None:
    state = _defrag_cluster()
    out = migration.defragment(state, 1.0, threshold=2, max_moves=1)
    assert [m.job_id for m in out] == ["s1"]


def test_defragment_keeps_locality() -> None:
    state = new_state(8, 8)
    put(state, "pair", "n1", (0, 1))  # one PCIe switch; n1 has 6 free
    put(state, "a", "n0", (0, 2, 4, 6))  # n0 has 4 free, no two on one switch
    put(state, "b", "n0", (1,))
    out = migration.defragment(state, 1.0, threshold=2, max_moves=32)
    # moving "pair" to n0 would split it over switches/sockets: it stays
    assert not [m for m in out if m.job_id == "pair"]
    assert nodes_of(state, "pair") == {"n1"}


def test_migrated_and_placed_jobs_keep_state_consistent() -> None:
    state = new_state(4, 4)
    policy = gandiva()
    for k in range(6):
        submit(state, f"j{k}", 1, float(k))
    out = policy.schedule(state, 6.0)
    assert len(of_type(out, Place)) == 6
    assert state.total_free == 2
    for k in range(3):
        state.finish(f"j{k}", 7.0)
    policy.schedule(state, 7.0)
    submit(state, "w", 8, 8.0)
    policy.schedule(state, 8.0)
    policy.introspect(state, 9.0)
    assert state.total_free == sum(ns.free for ns in state.nodes.values())
    busy = [ns for ns in state.nodes.values() if ns.load]
    assert len(busy) == 1  # the three small jobs were gathered on one node


# ---- packs split onto GPUs nobody waits for ----------------------------------


def _packed(state: ClusterState) -> None:
    """a and b packed on n0:0 (b the newer), n0:1 busy with c."""
    put(state, "a", "n0", (0,))
    put(state, "c", "n0", (1,))
    submit(state, "b", 1, 1.0)
    state.commit([Place("b", (("n0", 0),), ShareMode.PACKED, "test")], 1.0)
    assert state.members((("n0", 0),)) == ["a", "b"]


def test_a_pack_splits_onto_freed_gpus_once_nobody_waits() -> None:
    state = new_state(2)
    policy = gandiva()
    _packed(state)
    state.finish("c", 10.0)
    out = policy.schedule(state, 10.0)
    assert [(m.job_id, m.dst) for m in of_type(out, Migrate)] == [("b", (("n0", 1),))]
    assert "packed" in state.jobs["b"].reason
    assert state.mode_of("a") is ShareMode.EXCLUSIVE
    assert state.mode_of("b") is ShareMode.EXCLUSIVE
    assert not state.shared


def test_a_pack_keeps_its_gpus_while_a_job_waits_for_free_ones() -> None:
    state = new_state(2)
    policy = gandiva()
    _packed(state)
    submit(state, "big", 2, 5.0)  # waits for both GPUs
    state.finish("c", 10.0)
    assert not of_type(policy.schedule(state, 10.0), Migrate)
    assert state.members((("n0", 0),)) == ["a", "b"]
    assert state.total_free == 1


def test_the_oldest_pack_splits_first_when_free_gpus_are_few() -> None:
    state = new_state(3)
    put(state, "a", "n0", (0,))
    put(state, "x", "n0", (1,))
    put(state, "c", "n0", (2,))
    submit(state, "b", 1, 1.0)
    submit(state, "y", 1, 2.0)
    state.commit(
        [
            Place("y", (("n0", 1),), ShareMode.PACKED, "test"),
            Place("b", (("n0", 0),), ShareMode.PACKED, "test"),
        ],
        2.0,
    )
    state.finish("c", 10.0)  # one free GPU for two packs
    out = migration.unpack(state, 10.0)
    assert [m.job_id for m in of_type(out, Migrate)] == ["b"]
    assert state.members((("n0", 1),)) == ["x", "y"]
