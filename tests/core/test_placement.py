"""Gandiva Algorithm 1 (node allocation) and GPU choice inside a node."""

from __future__ import annotations

from itertools import combinations

from corekit import gandiva, new_state, nodes_of, of_type, put, submit

from gctl.core.decisions import Place, Queue, Suspend
from gctl.core.model import GPU, Cluster, JobStatus, Node, Priority, ShareMode
from gctl.core.state import ClusterState
from gctl.core.topology import Topology

# ---- step 1: affinity-g nodes, least loaded first -------------------------


def test_step1_least_loaded_affinity_node_before_empty_node() -> None:
    state = new_state(8, 8, 8)
    put(state, "a1", "n0", (0, 1))
    put(state, "a2", "n0", (2, 3))
    put(state, "b1", "n1", (0, 1))
    assert state.nodes["n0"].affinity == 2 and state.nodes["n1"].affinity == 2
    submit(state, "x", 2)
    out = gandiva().schedule(state, 1.0)
    [place] = of_type(out, Place)
    assert place.job_id == "x" and place.mode is ShareMode.EXCLUSIVE
    assert nodes_of(state, "x") == {"n1"}  # load 2 < load 4; the empty n2 is not touched
    assert state.nodes["n2"].load == 0 and state.nodes["n2"].affinity == 0


def test_step1_busy_affinity_node_still_beats_empty_node() -> None:
    state = new_state(8, 8)
    for k in range(3):
        put(state, f"a{k}", "n0", (2 * k, 2 * k + 1))
    submit(state, "x", 2)
    gandiva().schedule(state, 1.0)
    assert nodes_of(state, "x") == {"n0"}
    assert state.nodes["n0"].free == 0
    assert state.nodes["n1"].load == 0


def test_step1_same_size_jobs_collect_on_one_node() -> None:
    state = new_state(8, 8, 8)
    policy = gandiva()
    for k in range(4):
        submit(state, f"j{k}", 2, float(k))
        policy.schedule(state, float(k))
    assert {n for k in range(4) for n in nodes_of(state, f"j{k}")} == {"n0"}
    submit(state, "j4", 2, 5.0)
    policy.schedule(state, 5.0)
    assert nodes_of(state, "j4") == {"n1"}  # n0 is full: height 1 stops step 1


def test_step1_heterogeneous_skips_full_small_node_to_roomy_affinity_node() -> None:
    """A full 2-GPU node of affinity 2 must not hide a roomy 8-GPU node of affinity 2.

    Both have load 2; step 1 stops at the first node with load >= size (``break``
    in placement.affinity_set), so the job goes to an empty node instead.
    """
    state = new_state(2, 8, 8)
    put(state, "a", "n0", (0, 1))
    put(state, "b", "n1", (0, 1))
    submit(state, "x", 2)
    gandiva().schedule(state, 1.0)
    assert nodes_of(state, "x") == {"n1"}
    assert state.nodes["n2"].load == 0


# ---- step 2: an empty node -------------------------------------------------


def test_step2_empty_node_preferred_over_node_of_other_affinity() -> None:
    state = new_state(8, 8, 8)
    put(state, "one", "n0", (0,))  # n0: affinity 1, 7 GPUs free
    for k in range(4):
        put(state, f"a{k}", "n1", (2 * k, 2 * k + 1))  # n1: affinity 2, full
    submit(state, "x", 2)
    gandiva().schedule(state, 1.0)
    assert nodes_of(state, "x") == {"n2"}
    assert state.nodes["n2"].affinity == 2
    assert state.nodes["n0"].affinity == 1 and state.nodes["n0"].free == 7


def test_step2_affinity_set_by_first_job_and_cleared_when_empty() -> None:
    state = new_state(8)
    policy = gandiva()
    submit(state, "x", 4)
    policy.schedule(state, 0.0)
    assert state.nodes["n0"].affinity == 4
    submit(state, "y", 1)
    policy.schedule(state, 1.0)
    assert state.nodes["n0"].affinity == 4  # a later job of another size does not change it
    state.finish("x", 2.0)
    state.finish("y", 2.0)
    assert state.nodes["n0"].affinity == 0
    submit(state, "z", 2)
    policy.schedule(state, 3.0)
    assert state.nodes["n0"].affinity == 2


# ---- step 3: any free GPUs, best fit, then spread ---------------------------


def _uneven() -> ClusterState:
    """n0: 5 free (affinity 3), n1: 3 free (affinity 5), n2: 2 free (affinity 6)."""
    state = new_state(8, 8, 8)
    put(state, "p", "n0", range(3))
    put(state, "q", "n1", range(5))
    put(state, "r", "n2", range(6))
    return state


def test_step3_best_fit_ignores_affinity() -> None:
    state = _uneven()
    policy = gandiva()
    submit(state, "x", 2)
    policy.schedule(state, 1.0)
    assert nodes_of(state, "x") == {"n2"}  # fewest free that fits
    assert state.nodes["n2"].affinity == 6
    submit(state, "y", 2)
    policy.schedule(state, 2.0)
    assert nodes_of(state, "y") == {"n1"}
    submit(state, "z", 2)
    policy.schedule(state, 3.0)
    assert nodes_of(state, "z") == {"n0"}
    assert all(state.mode_of(j) is ShareMode.EXCLUSIVE for j in ("x", "y", "z"))


def test_step3_job_too_big_for_any_free_node_spreads_most_free_first() -> None:
    state = new_state(8, 8, 8)
    put(state, "p", "n0", range(3))  # 5 free
    put(state, "q", "n1", range(5))  # 3 free
    put(state, "s", "n2", range(2))  # 6 free
    submit(state, "x", 7)
    out = gandiva().schedule(state, 1.0)
    [place] = of_type(out, Place)
    per_node = {n: sum(1 for m, _ in place.gpus if m == n) for n in ("n0", "n1", "n2")}
    assert per_node == {"n0": 1, "n1": 0, "n2": 6}
    assert place.mode is ShareMode.EXCLUSIVE
    assert state.jobs["x"].status is JobStatus.RUNNING
    assert tuple(sorted(place.gpus)) in state.scattered


def test_step3_job_larger_than_any_node_spreads_most_free_first() -> None:
    state = new_state(8, 8, 8)
    put(state, "p", "n0", range(3))  # 5 free
    put(state, "q", "n1", range(5))  # 3 free
    put(state, "s", "n2", range(2))  # 6 free
    submit(state, "x", 10)
    gandiva().schedule(state, 1.0)
    gpus = state.jobs["x"].gpus
    assert len(gpus) == 10
    per_node = {n: sum(1 for m, _ in gpus if m == n) for n in ("n0", "n1", "n2")}
    assert per_node == {"n0": 4, "n1": 0, "n2": 6}
    assert state.total_free == 24 - 3 - 5 - 2 - 10


def test_job_larger_than_free_total_is_queued_not_time_sliced() -> None:
    state = new_state(8, 8)
    put(state, "p", "n0", range(4))
    submit(state, "x", 16)
    out = gandiva().schedule(state, 1.0)
    assert [type(d) for d in out] == [Queue]
    assert state.jobs["x"].status is JobStatus.PENDING


# ---- step 4: time slicing on the least loaded affinity-g node ----------------


def _full_pairs() -> ClusterState:
    state = new_state(4, 4)
    put(state, "a", "n0", (0, 1))
    put(state, "b", "n0", (2, 3))
    put(state, "c", "n1", (0, 1))
    put(state, "d", "n1", (2, 3))
    return state


def test_step4_time_slices_and_suspends_the_runner() -> None:
    state = _full_pairs()
    submit(state, "x", 2)
    out = gandiva().schedule(state, 5.0)
    assert [type(d) for d in out] == [Suspend, Place]
    suspend, place = out
    assert isinstance(place, Place) and place.mode is ShareMode.TIMESLICED
    key = state.jobs["x"].gpus
    members = state.members(key)
    assert members == [suspend.job_id, "x"]
    assert state.jobs[suspend.job_id].status is JobStatus.SUSPENDED
    assert state.jobs["x"].status is JobStatus.RUNNING
    assert state.mode_of("x") is ShareMode.TIMESLICED
    assert state.mode_of(suspend.job_id) is ShareMode.TIMESLICED
    assert key in state.shared
    assert state.cluster_height() == 1.5


def test_step4_balances_over_nodes_and_joins_smallest_set() -> None:
    state = _full_pairs()
    policy = gandiva()
    for k, job in enumerate(("x", "y", "z", "w")):
        submit(state, job, 2, float(k))
        policy.schedule(state, float(k))
    assert nodes_of(state, "x") != nodes_of(state, "y")  # least loaded node gets the 2nd
    assert state.nodes["n0"].load == state.nodes["n1"].load == 8
    sizes = sorted(len(m) for m in state.groups.values())
    assert sizes == [2, 2, 2, 2]  # never three on one set while a set of one remains
    for ns in state.nodes.values():
        assert ns.load <= 4.0 * ns.size


def test_step4_never_exceeds_max_height() -> None:
    state = _full_pairs()
    policy = gandiva(max_height=1.5)
    for k, job in enumerate(("x", "y", "z")):
        submit(state, job, 2, float(k))
        policy.schedule(state, float(k))
    assert state.jobs["x"].status is JobStatus.RUNNING
    assert state.jobs["y"].status is JobStatus.RUNNING
    assert state.jobs["z"].status is JobStatus.PENDING
    for ns in state.nodes.values():
        assert ns.load <= 1.5 * ns.size


def test_step4_never_puts_more_than_max_height_jobs_on_one_set() -> None:
    """A node held mostly by one exclusive job has height to spare, but one GPU takes turns.

    n0's 3-GPU job leaves its height at 1 with a single 1-GPU set: the node
    could take twelve more jobs there, but that set would hand each of them
    a thirteenth of a GPU. At most four (``max_height``) share it.
    """
    state = new_state(4)
    put(state, "a", "n0", (0,))
    put(state, "w", "n0", (1, 2, 3))
    policy = gandiva(max_height=4.0)
    for k in range(5):
        submit(state, f"x{k}", 1, float(k))
        policy.schedule(state, float(k))
    assert state.members((("n0", 0),)) == ["a", "x0", "x1", "x2"]
    assert [j for j in ("x3", "x4") if state.jobs[j].status is JobStatus.PENDING] == ["x3", "x4"]


def test_step4_heterogeneous_nodes_use_room_below_max_height() -> None:
    """A 2-GPU node at its max height must not hide a 4-GPU node below it.

    timeslice_group walks affinity-g nodes by absolute load and ``break``s at the
    first node over ``max_height * size``; with nodes of different sizes a more
    loaded but larger node can still have room.
    """
    state = new_state(2, 4)
    put(state, "a", "n0", (0, 1))
    put(state, "b", "n1", (0, 1))
    put(state, "c", "n1", (2, 3))
    policy = gandiva(max_height=2.0)
    for k, job in enumerate(("x", "y", "z")):
        submit(state, job, 2, float(k))
        policy.schedule(state, float(k))
        for ns in state.nodes.values():
            assert ns.load <= 2.0 * ns.size
    # n1 (4 GPUs) can take 8 GPU-slots at height 2; x, y and z need 2 + 2 + 2 more in all.
    assert state.jobs["z"].status is JobStatus.RUNNING
    assert state.mode_of("z") is ShareMode.TIMESLICED


def test_step4_never_shares_with_higher_priority_work() -> None:
    state = new_state(2, 2)
    put(state, "h", "n0", (0, 1), priority=Priority.HIGH)
    put(state, "n", "n1", (0, 1))
    submit(state, "x", 2)
    gandiva().schedule(state, 1.0)
    assert state.jobs["x"].gpus == (("n1", 0), ("n1", 1))
    assert state.jobs["h"].status is JobStatus.RUNNING
    submit(state, "x2", 2)
    out = gandiva().schedule(state, 2.0)
    # n0 holds only HIGH work: x2 joins n1 again rather than suspend h.
    assert state.jobs["h"].status is JobStatus.RUNNING
    assert nodes_of(state, "x2") == {"n1"}
    assert not [d for d in out if isinstance(d, Suspend) and d.job_id == "h"]


def test_step4_high_priority_job_preempts_normal_runner() -> None:
    state = new_state(1)
    put(state, "n", "n0", (0,))
    submit(state, "h", 1, priority=Priority.HIGH)
    out = gandiva().schedule(state, 1.0)
    assert [(type(d), d.job_id) for d in out] == [(Suspend, "n"), (Place, "h")]
    assert state.jobs["h"].status is JobStatus.RUNNING


def test_job_larger_than_a_node_is_never_time_sliced() -> None:
    state = new_state(4, 4)
    put(state, "a", "n0", range(4))
    put(state, "b", "n1", range(4))
    submit(state, "big", 8)
    out = gandiva().schedule(state, 1.0)
    assert [type(d) for d in out] == [Queue]
    assert state.jobs["a"].status is JobStatus.RUNNING


# ---- step 5: queue, once -----------------------------------------------------


def test_step5_queue_decision_emitted_once() -> None:
    state = new_state(2)
    put(state, "a", "n0", (0, 1))  # affinity 2: no node of affinity 1 to share
    submit(state, "x", 1)
    policy = gandiva()
    out = policy.schedule(state, 1.0)
    assert len(out) == 1 and isinstance(out[0], Queue) and out[0].job_id == "x"
    assert state.jobs["x"].reason.startswith("queued")
    assert policy.schedule(state, 2.0) == []
    assert policy.schedule(state, 3.0) == []
    state.finish("a", 4.0)
    out = policy.schedule(state, 4.0)
    assert [type(d) for d in out] == [Place]


def test_step5_queue_when_timeslicing_off() -> None:
    state = new_state(2)
    put(state, "a", "n0", (0,))
    put(state, "b", "n0", (1,))
    submit(state, "x", 1)
    out = gandiva(timeslicing=False).schedule(state, 1.0)
    assert [type(d) for d in out] == [Queue]
    assert not state.shared


def test_high_priority_pending_placed_before_earlier_normal() -> None:
    state = new_state(2)
    submit(state, "n", 2, 0.0)
    submit(state, "h", 2, 1.0, priority=Priority.HIGH)
    out = gandiva(timeslicing=False).schedule(state, 2.0)
    assert [(type(d), d.job_id) for d in out] == [(Place, "h"), (Queue, "n")]


# ---- GPU choice inside a node -------------------------------------------------


def test_two_gpu_job_gets_a_pcie_switch_pair() -> None:
    state = new_state(8)
    put(state, "one", "n0", (0,))
    submit(state, "x", 2)
    gandiva().schedule(state, 1.0)
    idx = [i for _, i in state.jobs["x"].gpus]
    gpus = state.nodes["n0"].node.gpus
    assert gpus[idx[0]].pcie_switch == gpus[idx[1]].pcie_switch
    assert 1 not in idx  # GPU 1's switch is half taken


def test_two_gpu_job_on_empty_node_same_switch() -> None:
    state = new_state(8)
    submit(state, "x", 2)
    gandiva().schedule(state, 0.0)
    (_, a), (_, b) = state.jobs["x"].gpus
    assert a // 2 == b // 2


def test_nvlink_pair_beats_same_switch_pair() -> None:
    gpus = []
    for j in range(8):
        links: tuple[tuple[int, int], ...] = ()
        if j == 2:
            links = ((5, 1),)
        elif j == 5:
            links = ((2, 1),)
        gpus.append(GPU(j, socket=j // 4, pcie_switch=j // 2, nvlink=links))
    state = ClusterState(Cluster((Node("n0", tuple(gpus)),)))
    submit(state, "x", 2)
    gandiva().schedule(state, 0.0)
    assert state.jobs["x"].gpus == (("n0", 2), ("n0", 5))


def test_four_gpu_job_gets_one_socket() -> None:
    state = new_state(8)
    put(state, "one", "n0", (0,))
    submit(state, "x", 4)
    gandiva().schedule(state, 1.0)
    assert [i for _, i in state.jobs["x"].gpus] == [4, 5, 6, 7]


def _brute_best(topo: Topology, free: list[int], count: int) -> int:
    return max(topo.set_score(c) for c in combinations(free, count))


def test_best_set_greedy_path_on_sixteen_gpu_node() -> None:
    gpus = tuple(GPU(j, socket=j // 8, pcie_switch=j // 2) for j in range(16))
    topo = Topology(gpus)
    full = (1 << 16) - 1
    best = topo.best_set(full, 8)
    assert best is not None and len(best) == 8
    assert len({gpus[i].socket for i in best}) == 1
    assert topo.set_score(best) == _brute_best(topo, list(range(16)), 8)
    # GPUs 0 and 2 taken: socket 1 is now the only whole socket.
    mask = full & ~0b101
    best = topo.best_set(mask, 8)
    assert best == tuple(range(8, 16))
    assert topo.best_set(mask, 15) is None
    assert topo.best_set(mask, 14) == tuple(i for i in range(16) if i not in (0, 2))


def test_best_set_greedy_four_sockets_keeps_switch_pairs() -> None:
    gpus = tuple(GPU(j, socket=j // 4, pcie_switch=j // 2) for j in range(16))
    topo = Topology(gpus)
    best = topo.best_set((1 << 16) - 1, 8)
    assert best is not None
    assert len({gpus[i].socket for i in best}) == 2  # two whole sockets
    assert topo.set_score(best) == _brute_best(topo, list(range(16)), 8)
    # repeated queries are answered the same (cache)
    assert topo.best_set((1 << 16) - 1, 8) == best
