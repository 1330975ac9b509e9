"""Round-robin time slicing with priorities."""

from __future__ import annotations

from corekit import gandiva, new_state, observe, of_type, put, submit

from gctl.core.decisions import Place, Resume, Suspend
from gctl.core.model import JobStatus, Priority, ShareMode
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.core.state import ClusterState


def _runner(state: ClusterState) -> list[str]:
    return [j for j, js in state.jobs.items() if js.status is JobStatus.RUNNING]


def test_rotation_waits_for_a_full_quantum() -> None:
    state = new_state(1)
    policy = gandiva(quantum=60.0)
    put(state, "a", "n0", (0,))
    submit(state, "b", 1, 10.0)
    policy.schedule(state, 10.0)
    assert _runner(state) == ["b"]
    assert policy.introspect(state, 30.0) == []
    assert policy.introspect(state, 69.9) == []
    out = policy.introspect(state, 70.0)
    assert [(type(d), d.job_id) for d in out] == [(Suspend, "b"), (Resume, "a")]
    assert _runner(state) == ["a"]
    assert state.jobs["a"].last_resumed == 70.0
    # a now holds the turn for a whole quantum again
    assert policy.introspect(state, 129.0) == []
    out = policy.introspect(state, 130.0)
    assert [(type(d), d.job_id) for d in out] == [(Suspend, "a"), (Resume, "b")]


def _three_on_one_gpu() -> tuple[ClusterState, GandivaPolicy]:
    """One GPU shared by a (placed at 0), b (at 1) and c (at 2); c has the turn."""
    state = new_state(1)
    policy = gandiva(quantum=60.0)
    put(state, "a", "n0", (0,))
    for t, job in ((1.0, "b"), (2.0, "c")):
        submit(state, job, 1, t)
        policy.schedule(state, t)
    return state, policy


def test_three_jobs_rotate_through_all() -> None:
    state, policy = _three_on_one_gpu()
    key = state.jobs["a"].gpus
    assert state.members(key) == ["a", "b", "c"]
    assert _runner(state) == ["c"]
    runners = []
    now = 2.0
    for _ in range(6):
        now += 60.0
        policy.introspect(state, now)
        [r] = _runner(state)
        runners.append(r)
    assert runners == ["a", "b", "c", "a", "b", "c"]
    assert all(state.mode_of(j) is ShareMode.TIMESLICED for j in ("a", "b", "c"))


def test_high_job_is_never_rotated_out_for_normal_ones() -> None:
    state = new_state(1)
    policy = gandiva(quantum=60.0)
    put(state, "n1", "n0", (0,))
    submit(state, "h", 1, 1.0, priority=Priority.HIGH)
    policy.schedule(state, 1.0)
    assert _runner(state) == ["h"]
    for k in range(1, 6):
        out = policy.introspect(state, 1.0 + 100.0 * k)
        assert not of_type(out, Suspend)
        assert _runner(state) == ["h"]
    assert state.jobs["n1"].status is JobStatus.SUSPENDED


def test_normal_job_does_not_join_a_set_of_high_jobs() -> None:
    state = new_state(1)
    policy = gandiva()
    put(state, "h", "n0", (0,), priority=Priority.HIGH)
    submit(state, "n", 1, 1.0)
    out = policy.schedule(state, 1.0)
    assert not of_type(out, Suspend)
    assert state.jobs["h"].status is JobStatus.RUNNING
    assert state.jobs["n"].status is JobStatus.PENDING


def test_normal_never_resumed_while_a_high_job_waits() -> None:
    state = new_state(1)
    policy = gandiva(quantum=60.0)
    put(state, "n", "n0", (0,))
    for t, job in ((1.0, "h1"), (2.0, "h2")):
        submit(state, job, 1, t, priority=Priority.HIGH)
        policy.schedule(state, t)
    assert state.members(state.jobs["n"].gpus) == ["n", "h1", "h2"]
    runners = []
    now = 2.0
    for _ in range(6):
        now += 60.0
        out = policy.introspect(state, now)
        assert not [d for d in out if isinstance(d, Resume) and d.job_id == "n"]
        [r] = _runner(state)
        runners.append(r)
    assert runners == ["h1", "h2"] * 3
    # the running HIGH job finishes: the other HIGH one resumes, not the NORMAL one
    state.finish(runners[-1], now + 1.0)
    out = policy.schedule(state, now + 1.0)
    assert [(type(d), d.job_id) for d in out] == [(Resume, "h1")]
    assert state.jobs["n"].status is JobStatus.SUSPENDED
    # once no HIGH job is left, the NORMAL one gets the GPUs
    state.finish("h1", now + 2.0)
    out = policy.schedule(state, now + 2.0)
    assert [(type(d), d.job_id) for d in out] == [(Resume, "n")]
    assert state.mode_of("n") is ShareMode.EXCLUSIVE


def test_runner_finish_resumes_a_waiting_member_on_next_schedule() -> None:
    state, policy = _three_on_one_gpu()
    state.finish("c", 10.0)
    assert _runner(state) == []  # nothing runs until the policy reacts
    out = policy.schedule(state, 10.0)
    assert [(type(d), d.job_id) for d in out] == [(Resume, "a")]
    assert _runner(state) == ["a"]
    assert state.jobs["a"].last_resumed == 10.0
    assert state.mode_of("b") is ShareMode.TIMESLICED
    # the resumed job keeps its turn for a full quantum from its resume
    assert policy.introspect(state, 69.0) == []
    out = policy.introspect(state, 70.0)
    assert [(type(d), d.job_id) for d in out] == [(Suspend, "a"), (Resume, "b")]


def test_finish_of_waiting_member_keeps_runner() -> None:
    state = new_state(1)
    policy = gandiva()
    put(state, "a", "n0", (0,))
    submit(state, "b", 1, 1.0)
    policy.schedule(state, 1.0)
    state.finish("a", 5.0)  # a was waiting
    assert policy.schedule(state, 5.0) == []
    assert state.mode_of("b") is ShareMode.EXCLUSIVE
    assert not state.shared


def test_introspect_also_hands_on_a_freed_slice() -> None:
    state = new_state(1)
    policy = gandiva()
    put(state, "a", "n0", (0,))
    submit(state, "b", 1, 1.0)
    out = policy.schedule(state, 1.0)
    assert of_type(out, Place)[0].mode is ShareMode.TIMESLICED
    state.finish("b", 5.0)
    out = policy.introspect(state, 6.0)
    assert [(type(d), d.job_id) for d in out] == [(Resume, "a")]


def _profiled_three(
    util: float, mem: int = 1000, **kw: object
) -> tuple[ClusterState, GandivaPolicy]:
    """a, b and c take turns on one GPU, each seen alone at ``util``, ``mem`` MB and 10 steps/s."""
    state = new_state(1)
    policy = gandiva(quantum=60.0, checkpoint_quantum=60.0)
    put(state, "a", "n0", (0,), **kw)
    observe(state, "a", 0.5, util=util, mem=mem)
    for t, job in ((1.0, "b"), (2.0, "c")):
        submit(state, job, 1, t, **kw)
        policy.schedule(state, t)
        if state.jobs[job].status is JobStatus.RUNNING:
            observe(state, job, t + 0.5, util=util, mem=mem)
    return state, policy


def _turns(state: ClusterState, policy: GandivaPolicy, count: int) -> list[set[str]]:
    turns = []
    for k in range(1, count + 1):
        policy.introspect(state, 2.0 + 60.0 * k)
        turns.append(set(_runner(state)))
    return turns


def test_light_jobs_take_their_turns_two_at_a_time() -> None:
    state, policy = _profiled_three(util=0.3)
    out = policy.introspect(state, 62.0)
    assert [(type(d), d.job_id) for d in out] == [(Suspend, "c"), (Resume, "a"), (Resume, "b")]
    assert out[2].reason == "round-robin turn on n0, packed with job a"
    turns = [{"a", "b"}, *_turns(state, policy, 5)[1:]]
    assert turns == [{"a", "b"}, {"a", "c"}, {"b", "c"}, {"a", "b"}, {"a", "c"}]
    assert all(state.mode_of(j) is ShareMode.TIMESLICED for j in "abc")


def test_heavy_jobs_take_their_turns_alone() -> None:
    state, policy = _profiled_three(util=0.6)  # 0.6 + 0.6 > pack_util_limit 1.0
    assert [len(t) for t in _turns(state, policy, 6)] == [1] * 6


def test_a_pair_that_does_not_pay_never_takes_a_turn_together_again() -> None:
    state, policy = _profiled_three(util=0.3)
    policy.introspect(state, 62.0)  # a and b run packed
    for job in "ab":
        observe(state, job, 70.0, util=0.3, rate=4.0)  # 0.4 + 0.4 of their solo 10/s
    policy.introspect(state, 122.0)
    assert frozenset("ab") in policy._memory.bad_pairs
    assert {"a", "b"} not in _turns(state, policy, 9)


def test_a_turn_together_is_judged_only_on_rates_measured_from_its_start() -> None:
    for b_since, judged in ((50.0, False), (63.0, True)):
        state, policy = _profiled_three(util=0.3)
        policy.introspect(state, 62.0)  # a and b run packed; b was frozen until then
        observe(state, "a", 70.0, util=0.3, rate=9.0, since=63.0)
        observe(state, "b", 70.0, util=0.3, rate=3.0, since=b_since)  # 50: across the freeze
        policy.introspect(state, 122.0)
        assert (frozenset("ab") in policy._memory.bad_pairs) is judged


def test_a_pair_one_job_pays_for_never_takes_a_turn_together_again() -> None:
    state, policy = _profiled_three(util=0.3)
    policy.introspect(state, 62.0)  # a and b run packed
    observe(state, "a", 70.0, util=0.3, rate=9.0)
    observe(state, "b", 70.0, util=0.3, rate=3.0)  # 1.2 in all, but b at 0.3 < 0.5
    policy.introspect(state, 122.0)
    assert frozenset("ab") in policy._memory.bad_pairs


def test_a_pair_must_fit_beside_what_the_waiting_jobs_hold() -> None:
    # 3 x 7,000 MB does not fit 16,384: the waiting job must give its memory back.
    state, policy = _profiled_three(util=0.3, mem=7000, can_checkpoint=True)
    out = policy.introspect(state, 62.0)
    assert [(type(d), d.job_id) for d in out] == [(Suspend, "c"), (Resume, "a"), (Resume, "b")]
    assert of_type(out, Suspend)[0].checkpoint
    state, policy = _profiled_three(util=0.3, mem=9000, can_checkpoint=True)
    assert [len(t) for t in _turns(state, policy, 3)] == [1, 1, 1]  # 18,000 MB together
