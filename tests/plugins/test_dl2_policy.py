"""The dl2 policy: counts become legal decisions, in the simulator and on a hand-built state."""

from __future__ import annotations

import numpy as np
import pytest
from gctl_dl2.features import Layout
from gctl_dl2.network import Network
from gctl_dl2.policy import Dl2Policy, apply_counts, bundled_model, make_round

from gctl.core.decisions import Grow, Place, Queue, Requeue, Shrink
from gctl.core.model import GPU, Cluster, JobSpec, JobStatus, Node, ShareMode
from gctl.core.policy import Policy, PolicyOptionError, load_policy
from gctl.core.state import ClusterState
from gctl.sim.engine import Simulator
from gctl.sim.perf import PerfConfig
from gctl.sim.runner import prepare
from gctl.sim.traces import load_trace
from gctl.sim.workload import TraceJob

LAYOUT = Layout(("bert", "resnet18"), hidden=16, hidden2=8)


def _cluster(*sizes: int) -> Cluster:
    return Cluster(
        tuple(
            Node(f"n{i}", tuple(GPU(j, socket=j // 4, pcie_switch=j // 2) for j in range(size)))
            for i, size in enumerate(sizes)
        )
    )


def _state() -> ClusterState:
    """n0 (4 GPUs): elastic a on 0,1 and b on 2; c (2 GPUs, not elastic) and d wait."""
    state = ClusterState(_cluster(4))
    for job_id, gpus, idx in (("a", 2, (0, 1)), ("b", 1, (2,))):
        state.submit(JobSpec(job_id, gpus, elastic_min=1, elastic_max=4, profile="bert"), 0.0)
        gpu_set = tuple(("n0", i) for i in idx)
        state.apply(Place(job_id, gpu_set, ShareMode.EXCLUSIVE, "set-up"), 0.0)
    state.submit(JobSpec("c", 2, profile="resnet18"), 10.0)
    state.submit(JobSpec("d", 1, elastic_min=1, elastic_max=2, profile="mystery"), 20.0)
    return state


def _counts(state: ClusterState, **given: int) -> list:
    rnd = make_round(LAYOUT, state, 100.0)
    assert rnd is not None and rnd.left == 4  # every GPU is the round's to hand out
    for i, js in enumerate(rnd.jobs):
        for _ in range(99):
            if rnd.given[i] >= given.get(js.id, 0):
                break
            rnd.give(i)
    return apply_counts(state, 100.0, rnd, 1.5)


def test_counts_become_shrinks_requeues_and_starts_on_gctls_placement() -> None:
    state = _state()
    decisions = _counts(state, a=1, c=2, d=1)
    kinds = {d.job_id: type(d) for d in decisions}
    assert kinds == {"a": Shrink, "b": Requeue, "c": Place, "d": Place}
    a, b, c, d = (state.jobs[j] for j in "abcd")
    assert len(a.gpus) == 1 and len(c.gpus) == 2 and len(d.gpus) == 1
    assert b.status is JobStatus.PENDING and not b.gpus
    assert c.gpus in ((("n0", 0), ("n0", 1)), (("n0", 2), ("n0", 3)))  # a PCIe switch's pair
    assert "value estimate 1.50" in a.reason and "back to the queue" in b.reason


def test_a_job_given_more_grows_on_its_node_and_a_waiting_one_left_out_is_told_why() -> None:
    state = _state()
    decisions = _counts(state, a=3, b=1)
    assert [type(d) for d in decisions] == [Grow, Queue, Queue]
    assert state.jobs["a"].gpus == (("n0", 0), ("n0", 1), ("n0", 3))
    assert "went to the jobs it ranked higher" in state.jobs["c"].reason


def test_a_round_leaves_out_jobs_it_cannot_move() -> None:
    state = _state()
    state.submit(JobSpec("e", 1, can_checkpoint=False), 0.0)
    state.apply(Place("e", (("n0", 3),), ShareMode.EXCLUSIVE, "set-up"), 0.0)
    rnd = make_round(LAYOUT, state, 5.0)
    assert rnd is not None
    assert [j.id for j in rnd.jobs] == ["a", "b", "c", "d"]
    assert rnd.left == 3  # e keeps GPU 3
    assert rnd.mask().tolist() == [True, True, True, True]
    rnd.give(2)  # c, not elastic, takes both its GPUs at once
    assert rnd.given[2] == 2 and rnd.left == 1
    assert rnd.mask().tolist() == [True, True, False, True]


def _jobs(limit: int) -> list[TraceJob]:
    from pathlib import Path

    trace = Path(__file__).resolve().parents[2] / "traces" / "philly_models_trace3.csv"
    return prepare(load_trace(trace, limit=limit), 0, 1.0)


@pytest.mark.parametrize("sample", [False, True])
def test_every_job_finishes_under_a_fresh_network_in_the_simulator(sample: bool) -> None:
    net = Network.fresh(Layout(("vgg16",), hidden=16, hidden2=8), 5)
    rng = np.random.default_rng(0) if sample else None
    policy = Dl2Policy.from_network(net, 600.0, rng)
    jobs = _jobs(80)
    result = Simulator(_cluster(8, 8), policy, PerfConfig()).run(jobs)
    assert not result.unfinished
    assert result.metrics.finished + len(result.rejected) == len(jobs)
    assert result.metrics.counts["places"] >= len(jobs)


def test_the_greedy_policy_decides_the_same_way_twice() -> None:
    net = Network.fresh(LAYOUT, 9)
    runs = [
        Simulator(_cluster(8), Dl2Policy.from_network(net, 300.0), PerfConfig()).run(_jobs(40))
        for _ in range(2)
    ]
    assert runs[0].metrics == runs[1].metrics


def test_the_bundled_model_is_registered_and_options_are_checked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert bundled_model().is_file()
    policy = load_policy("dl2")
    assert isinstance(policy, Policy) and policy.name == "dl2"
    with pytest.raises(PolicyOptionError, match="interval=0"):
        load_policy("dl2", interval=0)
    with pytest.raises(PolicyOptionError, match="cannot read model"):
        load_policy("dl2", model=str(tmp_path / "none.npz"))
    with pytest.raises(PolicyOptionError, match="unexpected keyword"):
        load_policy("dl2", modle="x")
