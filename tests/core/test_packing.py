"""Greedy packing under overload, and keep/undo of packs by measured progress."""

from __future__ import annotations

from corekit import gandiva, new_state, observe, of_type, submit

from gctl.core import packing
from gctl.core.decisions import Migrate, Pack, Resume, Suspend, Unpack
from gctl.core.model import JobStatus, Priority, ShareMode
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.core.state import ClusterState

LIMITS = packing.PackLimits(util=1.0, keep_above=1.0, max_packs=32, max_height=4.0)


def _overloaded(mem: dict[str, int] | None = None) -> tuple[ClusterState, GandivaPolicy]:
    """One 4-GPU node: a, b, c, d alone on GPUs 0-3, then e and f time-slice onto a's and b's.

    a and b wait for their turn; c and d run exclusively. Utilisation: a 0.3,
    b 0.2, c 0.4, d 0.1; solo rate 10 for everyone.
    """
    mem = mem or {}
    state = new_state(4)
    policy = gandiva()
    for j in "abcd":
        submit(state, j, 1)
    policy.schedule(state, 0.0)
    assert [state.jobs[j].gpus for j in "abcd"] == [(("n0", i),) for i in range(4)]
    for j, util in zip("abcd", (0.3, 0.2, 0.4, 0.1), strict=True):
        observe(state, j, 1.0, util=util, mem=mem.get(j, 1000), rate=10.0)
        assert state.jobs[j].solo_rate == 10.0
    for j in "ef":
        submit(state, j, 1, 5.0)
    policy.schedule(state, 5.0)
    assert state.jobs["a"].status is JobStatus.SUSPENDED
    assert state.jobs["b"].status is JobStatus.SUSPENDED
    assert state.members(state.jobs["e"].gpus) == ["a", "e"]
    assert state.members(state.jobs["f"].gpus) == ["b", "f"]
    return state, policy


def test_lowest_util_waiting_job_packs_onto_lowest_util_runner() -> None:
    state, policy = _overloaded()
    out = policy.introspect(state, 10.0)
    packs = of_type(out, Pack)
    assert [(p.job_id, p.gpus, p.with_jobs) for p in packs] == [
        ("b", (("n0", 3),), ("d",)),
        ("a", (("n0", 2),), ("c",)),
    ]
    for j in "abcd":
        assert state.jobs[j].status is JobStatus.RUNNING
        assert state.mode_of(j) is ShareMode.PACKED
    assert state.members((("n0", 3),)) == ["d", "b"]
    assert state.mode_of("e") is ShareMode.EXCLUSIVE
    assert state.jobs["b"].packed_at == state.jobs["d"].packed_at == 10.0


def test_no_packing_without_overload() -> None:
    state = new_state(4)
    policy = gandiva()
    for j in "ab":
        submit(state, j, 1)
    policy.schedule(state, 0.0)
    for j in "ab":
        observe(state, j, 1.0, util=0.1)
    assert not of_type(policy.introspect(state, 10.0), Pack)


def test_memory_that_does_not_fit_is_skipped() -> None:
    state, policy = _overloaded(mem={"b": 8000, "d": 10000, "a": 1000, "c": 2000})
    out = policy.introspect(state, 10.0)
    packs = of_type(out, Pack)
    assert [(p.job_id, p.with_jobs) for p in packs] == [("b", ("c",)), ("a", ("d",))]


def test_nothing_packs_when_no_memory_fits() -> None:
    state, policy = _overloaded(mem={"a": 9000, "b": 9000, "c": 9000, "d": 9000})
    out = policy.introspect(state, 10.0)
    assert not of_type(out, Pack)
    assert state.jobs["a"].status is JobStatus.SUSPENDED


def test_utilisation_limit_blocks_pack() -> None:
    state, policy = _overloaded()
    policy = gandiva(pack_util_limit=0.25)
    out = policy.introspect(state, 10.0)
    assert not of_type(out, Pack)


def test_bad_pack_is_undone_good_pack_kept() -> None:
    state, policy = _overloaded()
    policy.introspect(state, 10.0)  # b+d and a+c packed
    observe(state, "b", 20.0, rate=4.0)
    observe(state, "d", 20.0, rate=5.0)  # 0.4 + 0.5 = 0.9 <= 1: unpack
    observe(state, "a", 20.0, rate=7.0)
    observe(state, "c", 20.0, rate=6.0)  # 0.7 + 0.6 = 1.3 > 1: keep
    out = policy.introspect(state, 30.0)
    unpacks = of_type(out, Unpack)
    assert [u.job_id for u in unpacks] == ["b"]  # the newer member of the pair
    assert state.jobs["b"].status is JobStatus.SUSPENDED
    assert state.jobs["d"].status is JobStatus.RUNNING
    assert state.mode_of("b") is ShareMode.TIMESLICED
    assert state.mode_of("a") is ShareMode.PACKED
    assert state.mode_of("c") is ShareMode.PACKED
    assert not [p for p in of_type(out, Pack) if {p.job_id, *p.with_jobs} == {"b", "d"}]
    # later passes keep the good pack and do not re-pack the bad pair
    for t in (35.0, 40.0, 50.0):
        out = policy.introspect(state, t)
        assert not of_type(out, Unpack)
        assert not [p for p in of_type(out, Pack) if {p.job_id, *p.with_jobs} == {"b", "d"}]
    assert state.mode_of("a") is ShareMode.PACKED


def test_pack_kept_when_aggregate_above_one() -> None:
    state, policy = _overloaded()
    policy.introspect(state, 10.0)
    observe(state, "b", 20.0, rate=6.0)
    observe(state, "d", 20.0, rate=5.0)  # 1.1
    out = policy.introspect(state, 30.0)
    assert not of_type(out, Unpack)
    assert state.mode_of("b") is ShareMode.PACKED


def test_aggregate_exactly_one_is_unpacked() -> None:
    state, policy = _overloaded()
    policy.introspect(state, 10.0)
    observe(state, "b", 20.0, rate=5.0)
    observe(state, "d", 20.0, rate=5.0)  # 1.0: no better than time slicing
    out = policy.introspect(state, 30.0)
    assert [u.job_id for u in of_type(out, Unpack)] == ["b"]


def test_a_pack_one_job_pays_for_is_unpacked() -> None:
    """0.2 + 0.95 beats time slicing in all, but b would run slower than in its time slice."""
    state, policy = _overloaded()
    policy.introspect(state, 10.0)
    observe(state, "b", 20.0, rate=2.0)
    observe(state, "d", 20.0, rate=9.5)
    out = policy.introspect(state, 30.0)
    [unpack] = of_type(out, Unpack)
    assert unpack.job_id == "b"
    assert unpack.reason == (
        "packed speeds 0.95 + 0.20 of alone do not beat time slicing (1.00 in all, 0.50 each)"
    )


def test_samples_from_before_the_pack_do_not_judge_it() -> None:
    state, policy = _overloaded()
    policy.introspect(state, 10.0)
    observe(state, "b", 20.0, rate=1.0)  # d's last sample predates the pack
    out = policy.introspect(state, 30.0)
    assert not of_type(out, Unpack)
    assert packing.pack_rates(state, state.jobs["d"].gpus) is None


def test_a_rate_measured_from_before_the_pack_does_not_judge_it() -> None:
    # A job's reported rate covers a window of its last steps: one that began before the pack
    # (a job frozen for its turn until then) is dragged down by time the pack did not run.
    state, policy = _overloaded()
    policy.introspect(state, 10.0)
    observe(state, "b", 20.0, rate=1.0, since=8.0)
    observe(state, "d", 20.0, rate=1.0, since=12.0)
    assert packing.pack_rates(state, state.jobs["d"].gpus) is None
    assert not of_type(policy.introspect(state, 30.0), Unpack)
    observe(state, "b", 31.0, rate=1.0, since=30.5)  # measured packed throughout: judged
    assert packing.pack_rates(state, state.jobs["d"].gpus) == [0.1, 0.1]
    assert [u.job_id for u in of_type(policy.introspect(state, 40.0), Unpack)] == ["b"]


def test_bad_pair_is_never_packed_again() -> None:
    state, policy = _overloaded()
    policy.introspect(state, 10.0)
    observe(state, "b", 20.0, rate=2.0)
    observe(state, "d", 20.0, rate=2.0)
    memory = packing.PackingMemory()
    out = packing.review_packs(state, 30.0, memory, 1.0)
    assert [u.job_id for u in out] == ["b"]
    assert memory.bad_pairs == {frozenset({"b", "d"})}
    # put b back to waiting on e's GPU set, d alone again on GPU 3
    e_gpus = state.jobs["e"].gpus
    state.commit([Migrate("b", state.jobs["b"].gpus, e_gpus, "test"), Suspend("b", "test")], 31.0)
    assert state.mode_of("d") is ShareMode.EXCLUSIVE
    assert state.jobs["b"].status is JobStatus.SUSPENDED
    assert packing.pack_waiting(state, 32.0, memory, LIMITS) == []
    # control: without the memory the pair would be packed again
    out = packing.pack_waiting(state, 33.0, packing.PackingMemory(), LIMITS)
    assert [(p.job_id, p.with_jobs) for p in of_type(out, Pack)] == [("b", ("d",))]


def test_memory_forgets_pairs_of_finished_jobs_once_they_pile_up() -> None:
    """Pairs of jobs gone are dropped in one sweep once the memory has doubled, not every pass."""
    gone = {frozenset({f"x{i}", "y"}) for i in range(100)}
    memory = packing.PackingMemory(gone | {frozenset({"y", "z"})})
    memory.prune({"y": None, "z": None})
    assert memory.bad_pairs == {frozenset({"y", "z"})}
    few = packing.PackingMemory({frozenset({"x", "y"}), frozenset({"y", "z"})})
    few.prune({"y": None, "z": None})
    assert len(few.bad_pairs) == 2  # a handful is kept until it grows


def test_max_packs_per_pass() -> None:
    state, _ = _overloaded()
    policy = gandiva(max_packs_per_pass=1)
    out = policy.introspect(state, 10.0)
    assert [p.job_id for p in of_type(out, Pack)] == ["b"]


def test_pack_of_job_that_only_ran_time_sliced_is_still_judged() -> None:
    """A job that has only ever run in its time slices has a solo rate too.

    ClusterState.observe sets ``solo_rate`` only when the job's GPU set has a
    single member, so a job placed straight into time slicing never gets one;
    pack_rates then returns None for its pack and a losing pack is kept
    forever.
    """
    state = new_state(2)
    policy = gandiva(quantum=60.0)
    for j in "at":
        submit(state, j, 1)
    policy.schedule(state, 0.0)
    observe(state, "a", 1.0, util=0.2, rate=10.0)
    observe(state, "t", 1.0, util=0.2, rate=10.0)
    submit(state, "c", 1, 5.0)
    policy.schedule(state, 5.0)
    assert state.members(state.jobs["c"].gpus) == ["a", "c"]
    observe(state, "c", 6.0, util=0.2, rate=10.0)  # c runs its time slice, alone
    out = policy.introspect(state, 65.0)  # c's quantum is over; a takes its turn beside c
    assert [(r.job_id, r.reason) for r in of_type(out, Resume)] == [
        ("a", "round-robin turn on n0, packed with job c")
    ]
    assert not of_type(out, Suspend)
    assert state.mode_of("c") is ShareMode.PACKED
    observe(state, "c", 70.0, util=0.2, rate=3.0)
    observe(state, "a", 70.0, util=0.2, rate=3.0)  # 0.3 + 0.3 of solo speed
    out = policy.introspect(state, 80.0)
    assert [u.job_id for u in of_type(out, Unpack)] == ["a"]  # the one that joined the pack


def test_unpack_never_suspends_high_job_beside_a_running_normal_one() -> None:
    """Unpacking the newer member must respect priorities.

    review_packs unpacks the member with the latest ``since``; when that is a
    HIGH job packed onto a NORMAL runner, the HIGH job ends up suspended while
    the NORMAL job runs on the same GPU set.
    """
    state = new_state(2)
    policy = gandiva(quantum=60.0)
    submit(state, "h1", 1, priority=Priority.HIGH)
    submit(state, "t", 1)
    policy.schedule(state, 0.0)
    observe(state, "h1", 1.0, util=0.2, rate=10.0)
    observe(state, "t", 1.0, util=0.2, rate=10.0)
    submit(state, "h2", 1, 2.0, priority=Priority.HIGH)
    policy.schedule(state, 2.0)  # joins t's set (lower priority there); t waits
    submit(state, "h3", 1, 3.0, priority=Priority.HIGH)
    policy.schedule(state, 3.0)  # joins h1's set; h1 waits
    state.finish("h2", 4.0)
    policy.schedule(state, 4.0)  # t resumes alone on GPU 1
    observe(state, "t", 5.0, util=0.2, rate=10.0)
    out = policy.introspect(state, 5.0)
    assert [(p.job_id, p.with_jobs) for p in of_type(out, Pack)] == [("h1", ("t",))]
    observe(state, "h1", 10.0, util=0.2, rate=4.0)
    observe(state, "t", 10.0, util=0.2, rate=4.0)
    policy.introspect(state, 10.0)
    members = state.members(state.jobs["t"].gpus)
    assert sorted(members) == ["h1", "t"]
    running = [m for m in members if state.jobs[m].status is JobStatus.RUNNING]
    waiting = [m for m in members if state.jobs[m].status is JobStatus.SUSPENDED]
    for w in waiting:
        for r in running:
            assert state.jobs[w].spec.priority <= state.jobs[r].spec.priority, (
                f"{w} ({state.jobs[w].spec.priority.name}) suspended while "
                f"{r} ({state.jobs[r].spec.priority.name}) runs"
            )


def test_pack_reviews_follow_the_reconsider_period() -> None:
    state, _ = _overloaded()
    policy = GandivaPolicy(reconsider_every=300.0)
    assert len(of_type(policy.introspect(state, 10.0), Pack)) == 2
    observe(state, "b", 20.0, rate=2.0)
    observe(state, "d", 20.0, rate=2.0)
    assert not of_type(policy.introspect(state, 30.0), Unpack)
    assert not of_type(policy.introspect(state, 309.0), Unpack)
    assert [u.job_id for u in of_type(policy.introspect(state, 310.0), Unpack)] == ["b"]


def test_a_model_loaded_afresh_is_reconsidered_even_with_the_same_counts() -> None:
    """The daemon loads a new model every pass: equal change counts must not hide new profiles."""
    busy, _ = _overloaded()
    light, _ = _overloaded()
    for j in "abcd":
        observe(busy, j, 2.0, util=0.9, rate=10.0)
        observe(light, j, 2.0, util=0.1, rate=10.0)
    assert (busy.changes, busy.samples) == (light.changes, light.samples)
    policy = GandivaPolicy(reconsider_every=0.0, order="round-robin")
    assert not of_type(policy.introspect(busy, 10.0), Pack)  # too busy to pack
    assert len(of_type(policy.introspect(light, 20.0), Pack)) == 2
