"""Property tests: the cluster model stays consistent under any event stream, for every policy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from corekit import gandiva, pcie_node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gctl.core.decisions import Decision, Grow, Migrate, Pack, Place, Queue, Requeue
from gctl.core.model import Cluster, JobSpec, JobStatus, Observed, Priority
from gctl.core.policies.fifo import FifoPolicy
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.core.policies.las import LasPolicy
from gctl.core.policy import Policy
from gctl.core.state import ClusterState, GroupKey

EPS = 1e-9


def _gandiva_default() -> Policy:
    return GandivaPolicy()


def _gandiva_las_fast() -> Policy:
    """Least attained service with levels a few introspective passes apart, and quick promotion."""
    return GandivaPolicy(reconsider_every=0.0, level_base=40.0, level_factor=3.0, promote_after=2.0)


def _gandiva_tail() -> Policy:
    """The tail guard choosing often, among many jobs (fractions done: :func:`_work_done`)."""
    return GandivaPolicy(
        reconsider_every=0.0, level_base=40.0, level_factor=3.0, tail_every=30.0, tail_share=0.5
    )


def _las_fast() -> Policy:
    return LasPolicy(quantum=20.0, level_base=40.0, level_factor=3.0, promote_after=2.0)


def _gandiva_small() -> Policy:
    return gandiva(max_height=1.5, quantum=30.0, grow_idle_period=120.0)


def _gandiva_flat() -> Policy:
    return gandiva(max_height=1.0, grow_idle_period=60.0)


def _gandiva_impatient() -> Policy:
    return gandiva(starvation_guard=True, starvation_limit=60.0)


POLICIES: dict[str, Callable[[], Policy]] = {
    "gandiva": _gandiva_default,
    "gandiva-las-fast-levels": _gandiva_las_fast,
    "gandiva-tail-guard": _gandiva_tail,
    "gandiva-round-robin": gandiva,
    "las": LasPolicy,
    "las-fast-levels": _las_fast,
    "gandiva-small-height": _gandiva_small,
    "gandiva-height-1": _gandiva_flat,
    "gandiva-starvation-guard": _gandiva_impatient,
    "fifo": FifoPolicy,
}


def _max_height(policy: Policy) -> float:
    if isinstance(policy, GandivaPolicy):
        cfg = policy.config
        return cfg.max_height if cfg.timeslicing else 1.0
    return 1.0


@st.composite
def job_params(draw: st.DrawFn) -> dict[str, Any]:
    gpus = draw(st.one_of(st.sampled_from([1, 1, 1, 2, 2, 4]), st.integers(1, 16)))
    params: dict[str, Any] = {
        "gpus": gpus,
        "priority": draw(st.sampled_from([Priority.NORMAL, Priority.NORMAL, *Priority])),
    }
    if draw(st.integers(0, 3)) == 0:
        params["elastic_min"] = draw(st.integers(1, gpus))
        params["elastic_max"] = draw(st.integers(gpus, 16))
    return params


SUBMIT = st.tuples(st.just("submit"), job_params())
SCHEDULE = st.tuples(st.just("schedule"))
INTROSPECT = st.tuples(
    st.just("introspect"), st.sampled_from([0.0, 5.0, 30.0, 60.0, 60.0, 150.0, 400.0])
)
FINISH = st.tuples(st.just("finish"), st.integers(0, 1000))
DRAIN = st.tuples(st.just("drain"), st.integers(0, 5))
CANCEL = st.tuples(st.just("cancel"), st.integers(0, 1000))
OBSERVE = st.tuples(
    st.just("observe"),
    st.integers(0, 1000),
    st.sampled_from([0.05, 0.1, 0.2, 0.3, 0.5, 0.9]),
    st.sampled_from([500, 1000, 4000, 9000, 16000]),
    st.sampled_from([1.0, 3.0, 5.0, 8.0, 10.0]),
)
OPS = st.one_of(
    SUBMIT, SUBMIT, SUBMIT, SCHEDULE, SCHEDULE, INTROSPECT, INTROSPECT, INTROSPECT,
    OBSERVE, OBSERVE, OBSERVE, FINISH, CANCEL, DRAIN,
)  # fmt: skip

CLUSTERS = st.lists(st.sampled_from([1, 2, 4, 8, 3, 5, 6, 7]), min_size=1, max_size=6)


@dataclass
class Run:
    state: ClusterState
    policy: Policy
    max_height: float
    now: float = 0.0
    submitted: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)
    queued: set[str] = field(default_factory=set)
    seq: int = 0
    requeues: int = 0
    attained: dict[str, float] = field(default_factory=dict)

    def decided(self, decisions: list[Decision]) -> None:
        for d in decisions:
            assert d.job_id in self.submitted and d.job_id not in self.finished
            if isinstance(d, Queue):
                assert d.job_id not in self.queued, f"Queue for {d.job_id} repeated"
                self.queued.add(d.job_id)
            if isinstance(d, Requeue):
                self.queued.discard(d.job_id)
                self.requeues += 1
            if isinstance(d, Place):
                assert d.gpus == tuple(sorted(d.gpus))
            dst = d.dst if isinstance(d, Migrate) else getattr(d, "gpus", ())
            if isinstance(d, Place | Migrate | Pack | Grow):
                closed = {n for n, _ in dst if not self.state.nodes[n].open}
                assert not closed, f"{type(d).__name__} of {d.job_id} onto drained {closed}"


def check(run: Run, *, after_pass: bool) -> None:
    state = run.state
    jobs = state.jobs

    # (f) every submitted job is live or finished, exactly once
    assert set(jobs) | run.finished == run.submitted
    assert not set(jobs) & run.finished
    pending_ids = [j for bucket in state.pending.values() for j in bucket]
    assert len(pending_ids) == len(set(pending_ids))
    for (prio, gpus), bucket in state.pending.items():
        assert bucket, "empty pending bucket left behind"
        for j in bucket:
            assert (int(jobs[j].spec.priority), jobs[j].spec.gpus) == (prio, gpus)
    resident = set()
    for key, members in state.groups.items():
        assert members, f"empty group {key}"
        assert len(members) == len(set(members))
        for m in members:
            assert jobs[m].gpus == key
            resident.add(m)
    for j, js in jobs.items():
        if js.status is JobStatus.PENDING:
            assert j in pending_ids and not js.gpus
        else:
            assert js.status in (JobStatus.RUNNING, JobStatus.SUSPENDED)
            assert j in resident and j not in pending_ids
            spec = js.spec
            if spec.elastic:
                assert spec.elastic_min is not None and spec.elastic_max is not None
                assert spec.elastic_min <= js.held <= spec.elastic_max
            else:
                assert js.held == spec.gpus
    assert set(pending_ids) | resident == set(jobs)

    # (h) attained service never decreases, and a promotion never counts more than was had
    for j, js in jobs.items():
        had = js.attained_at(run.now)
        assert had >= run.attained.get(j, 0.0) - EPS, f"{j}: attained service went down"
        assert 0.0 <= js.service_base <= had + EPS
        run.attained[j] = had
    assert set(state.elastic) == {j for j in resident if jobs[j].spec.elastic}

    # (a) groups are disjoint; shared sets are exactly those with several members
    held = [g for key in state.groups for g in key]
    assert len(held) == len(set(held)), "a GPU is held by two groups"
    for key in state.groups:
        assert key == tuple(sorted(key))
    assert set(state.shared) == {k for k, m in state.groups.items() if len(m) > 1}
    assert set(state.scattered) == {k for k in state.groups if len({n for n, _ in k}) > 1}

    # (b) a shared set is a pack (all run) or takes turns (one runs); never none after a pass
    for key, members in state.groups.items():
        running = [m for m in members if jobs[m].status is JobStatus.RUNNING]
        if len(running) != len(members):
            assert len(running) <= 1, f"{key}: {running} run together with waiting jobs"
        if after_pass:
            assert running, f"{key}: nobody runs after a scheduling pass"
        elif not running:
            assert key in state.dirty

    # (g) a waiting job never outranks a running job on the same set
    for key, members in state.groups.items():
        running = [jobs[m] for m in members if jobs[m].status is JobStatus.RUNNING]
        for m in members:
            w = jobs[m]
            if w.status is JobStatus.SUSPENDED:
                for r in running:
                    assert w.spec.priority <= r.spec.priority, (
                        f"{w.id} ({w.spec.priority.name}) waits while "
                        f"{r.id} ({r.spec.priority.name}) runs on {key}"
                    )

    # (c) node load, free GPUs and affinity match the groups; (e) height cap
    total_free = 0
    for name, ns in state.nodes.items():
        load = 0
        on_node: dict[int, tuple[Any, ...]] = {}
        keys = set()
        for key, members in state.groups.items():
            idx = [i for n, i in key if n == name]
            if idx:
                keys.add(key)
                load += len(members) * len(idx)
                for i in idx:
                    on_node[i] = key
        assert ns.load == load, f"{name}: load {ns.load}, groups say {load}"
        assert set(ns.groups) == keys
        for i in range(ns.size):
            assert ns.group_of[i] == on_node.get(i)
            assert bool(ns.free_mask >> i & 1) == (i not in on_node)
        assert ns.free_mask >> ns.size == 0
        assert ns.free == ns.size - len(on_node)
        assert (ns.affinity == 0) == (load == 0)
        assert 0 <= ns.affinity <= ns.size
        assert ns.load + ns.free <= run.max_height * ns.size + EPS, (
            f"{name}: load {ns.load} + free {ns.free} over {run.max_height} x {ns.size}"
        )
        if ns.open:
            total_free += ns.free
    # (d)
    assert state.total_free == total_free

    # indexes agree with the nodes
    up = [ns for ns in state.nodes.values() if ns.open]
    for aff in {ns.affinity for ns in up}:
        listed = list(state.nodes_by_affinity(aff))
        assert {ns.name for ns in listed} == {ns.name for ns in up if ns.affinity == aff}
        heights = [ns.height for ns in listed]
        assert heights == sorted(heights)
    # the time-slice index agrees with a brute-force search of the groups
    for count in {len(key) for key in state.groups}:
        for prio in Priority:
            expect: dict[str, tuple[int, int, GroupKey]] = {}
            for key, members in state.groups.items():
                ns = state.nodes[key[0][0]]
                if len(key) != count or key[-1][0] != ns.name or not ns.open:
                    continue
                jobs = [state.jobs[m] for m in members]
                top = max(int(j.spec.priority) for j in jobs)
                packed = len(jobs) > 1 and all(j.status is JobStatus.RUNNING for j in jobs)
                if top <= prio and not packed:
                    rank = (len(jobs), top, key)
                    expect[ns.name] = min(expect.get(ns.name, rank), rank)
            for cap in (3, 1000):
                targets = list(state.slice_targets(count, prio, cap))
                want = {n: r[2] for n, r in expect.items() if r[0] < cap}
                assert {ns.name: key for ns, key in targets} == want
                heights = [ns.height for ns, _ in targets]
                assert heights == sorted(heights)
    listed = list(state.nodes_with_free(1))
    assert {ns.name for ns in listed} == {ns.name for ns in up if ns.free >= 1}
    frees = [ns.free for ns in listed]
    assert frees == sorted(frees)


def _live(state: ClusterState, status: JobStatus | None) -> list[str]:
    return sorted(j for j, js in state.jobs.items() if status is None or js.status is status)


def _work_done(run: Run, job_id: str) -> float | None:
    """A fraction done for every job, as a driver knows it: job jN has N x 100 GPU-seconds left."""
    js = run.state.jobs.get(job_id)
    if js is None:
        return None
    attained = js.attained_at(run.now)
    return attained / (attained + 100.0 * int(job_id[1:]))


def run_ops(sizes: list[int], ops: list[tuple[Any, ...]], make: Callable[[], Policy]) -> Run:
    cluster = Cluster(tuple(pcie_node(f"n{i}", s) for i, s in enumerate(sizes)))
    policy = make()
    run = Run(ClusterState(cluster), policy, _max_height(policy))
    state = run.state
    state.work_done = lambda job_id: _work_done(run, job_id)
    check(run, after_pass=True)
    for op in ops:
        after_pass = False
        match op:
            case ("submit", params):
                run.seq += 1
                job_id = f"j{run.seq}"
                state.submit(JobSpec(job_id, submit_time=run.now, **params), run.now)
                run.submitted.add(job_id)
            case ("schedule",):
                run.decided(policy.schedule(state, run.now))
                after_pass = True
            case ("introspect", dt):
                run.now += dt
                run.decided(policy.introspect(state, run.now))
                after_pass = True
            case (("finish" | "cancel") as what, k):
                # a job finishes while running; a cancel may hit any live job
                live = _live(state, JobStatus.RUNNING if what == "finish" else None)
                if not live:
                    continue
                job_id = live[k % len(live)]
                state.finish(job_id, run.now)
                run.finished.add(job_id)
            case ("drain", k):
                name = f"n{k % len(sizes)}"
                if state.nodes[name].drained_by:
                    state.undrain(name, "operator")
                else:
                    state.drain(name, "operator")
            case ("observe", k, util, mem, rate):
                live = _live(state, None)
                if not live:
                    continue
                job_id = live[k % len(live)]
                state.observe(job_id, Observed(run.now, util, mem, rate))
        check(run, after_pass=after_pass)
    # draining: finish every job, each exactly once, and the cluster is empty again
    for name in state.nodes:
        state.undrain(name, "operator")
    for _ in range(len(run.submitted) + 1):
        run.decided(policy.schedule(state, run.now))
        check(run, after_pass=True)
        live = _live(state, None)
        if not live:
            break
        state.finish(live[0], run.now)
        run.finished.add(live[0])
    assert not state.jobs and not state.groups and not state.pending
    assert run.finished == run.submitted
    assert state.total_free == sum(sizes)
    assert all(ns.affinity == 0 and ns.load == 0 for ns in state.nodes.values())
    return run


SETTINGS = settings(
    max_examples=70,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("kind", sorted(POLICIES))
@SETTINGS
@given(sizes=CLUSTERS, ops=st.lists(OPS, min_size=30, max_size=100))
def test_state_invariants_hold(kind: str, sizes: list[int], ops: list[tuple[Any, ...]]) -> None:
    run_ops(sizes, ops, POLICIES[kind])


def test_the_starvation_variant_does_requeue_and_keeps_every_invariant() -> None:
    """The checker sees requeues: 4-GPU jobs (half of what is asked) starved behind 1-GPU jobs."""
    fill = [("submit", {"gpus": 1, "priority": Priority.NORMAL})] * 8
    big = [("submit", {"gpus": 4, "priority": Priority.NORMAL})] * 2
    ops = [*fill, ("schedule",), *big]
    ops += [("schedule",), ("introspect", 150.0), ("schedule",)]
    run = run_ops([4, 4], ops, _gandiva_impatient)
    assert run.requeues >= 1


def test_the_tail_guard_variant_chooses_jobs_and_keeps_every_invariant() -> None:
    """The variant is not vacuous: with more jobs than GPUs its guard chooses some."""
    fill = [("submit", {"gpus": 1, "priority": Priority.NORMAL})] * 6
    ops = [*fill, ("schedule",), *[("introspect", 60.0)] * 5]
    run = run_ops([2, 2], ops, _gandiva_tail)
    assert isinstance(run.policy, GandivaPolicy)
    assert run.policy._tail_bases  # the jobs it chose, and the service they count from


def test_invariant_checker_catches_a_corrupted_state() -> None:
    """The checker is not vacuous: a hand-corrupted load is reported."""
    cluster = Cluster((pcie_node("n0", 4),))
    policy = FifoPolicy()
    run = Run(ClusterState(cluster), policy, 1.0)
    run.state.submit(JobSpec("a", 2), 0.0)
    run.submitted.add("a")
    run.decided(policy.schedule(run.state, 0.0))
    check(run, after_pass=True)
    run.state.nodes["n0"].load += 1
    with pytest.raises(AssertionError, match="load"):
        check(run, after_pass=True)
