"""Least attained service: attained GPU time, levels, promotion, and the policies using them."""

from __future__ import annotations

import pytest
from corekit import new_state, of_type, put, submit

from gctl.core import las
from gctl.core.decisions import Migrate, Place, Requeue, Resume, Suspend
from gctl.core.model import JobSpec, JobStatus, Priority
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.core.policies.las import LasPolicy
from gctl.core.policy import PolicyOptionError
from gctl.sim.cluster_spec import parse_cluster
from gctl.sim.engine import Simulator
from gctl.sim.perf import PerfConfig
from gctl.sim.workload import TraceJob

HOUR = 3600.0


def test_attained_service_is_gpus_times_running_time_across_every_move() -> None:
    state = new_state(4, 4)
    js = put(state, "a", "n0", (0, 1), now=0.0)
    assert js.attained_at(50.0) == pytest.approx(100.0)
    state.apply(Suspend("a", "t"), 100.0)
    assert js.attained_at(500.0) == pytest.approx(200.0)  # nothing while suspended
    state.apply(Resume("a", "t"), 500.0)
    state.apply(Migrate("a", js.gpus, (("n1", 0), ("n1", 1)), "t"), 600.0)
    assert js.attained_at(600.0) == pytest.approx(400.0)
    state.apply(Requeue("a", "t"), 700.0)
    assert js.attained_at(5000.0) == pytest.approx(600.0)  # nothing while queued
    state.finish("a", 5000.0)
    assert js.attained == pytest.approx(600.0)


def test_levels_thresholds_and_description() -> None:
    levels = las.Levels(count=3, base=HOUR, factor=10.0)
    assert levels.thresholds == (HOUR, 10 * HOUR)
    state = new_state(8)
    js = put(state, "a", "n0", (0, 1, 2, 3), now=0.0)  # 4 GPUs: 4 GPU-hours per hour
    assert levels.level(js, 0.2 * HOUR) == 0
    assert levels.level(js, 0.25 * HOUR) == 1
    assert levels.crosses_at(js, 0.0) == pytest.approx(0.25 * HOUR)
    assert levels.crosses_at(js, 0.3 * HOUR) == pytest.approx(2.5 * HOUR)
    assert levels.level(js, 3 * HOUR) == 2 and levels.crosses_at(js, 3 * HOUR) is None
    assert levels.describe(js, 3 * HOUR) == "level 3 of 3: 12.0 GPU-hours attained"
    with pytest.raises(ValueError):
        las.Levels(factor=1.0)


def test_a_job_that_waited_long_for_its_service_is_promoted_to_level_zero() -> None:
    levels = las.Levels(count=3, base=HOUR, factor=10.0, promote_after=4.0, min_service=HOUR)
    state = new_state(1)
    js = put(state, "a", "n0", (0,), now=0.0)
    state.apply(Requeue("a", "t"), 2 * HOUR)  # 2 GPU-hours: level 1, waits from 2 h
    assert levels.level(js, 2 * HOUR) == 1
    assert levels.promote_at(js) == pytest.approx(2 * HOUR + 4 * 2 * HOUR)
    assert not levels.promote(js, 9.9 * HOUR)
    assert levels.promote(js, 10 * HOUR)
    assert levels.level(js, 10 * HOUR) == 0 and levels.promote_at(js) is None
    assert js.attained_at(10 * HOUR) == pytest.approx(2 * HOUR)  # promotion keeps what it had
    assert "promoted" in levels.describe(js, 10 * HOUR)


def _one_gpu_pair(order: str) -> tuple[GandivaPolicy, list[str]]:
    """Job a runs alone for 2 h; b arrives; introspect every minute for 3 h; who ran each minute."""
    state = new_state(1)
    policy = GandivaPolicy(order=order, reconsider_every=0.0, migration=False, packing=False)
    submit(state, "a", 1, 0.0)
    policy.schedule(state, 0.0)
    submit(state, "b", 1, 2 * HOUR)
    policy.schedule(state, 2 * HOUR)
    runs = []
    now = 2 * HOUR
    for _ in range(180):
        now += 60.0
        policy.introspect(state, now)
        runs.append(next(j for j, js in state.jobs.items() if js.status is JobStatus.RUNNING))
    return policy, runs


def test_las_runs_the_newcomer_until_it_has_had_as_much_then_the_older_job() -> None:
    _, runs = _one_gpu_pair("las")
    # b (level 0) keeps the GPU for its first GPU-hour; then both are at level 1 and
    # the older job a goes first: no round-robin swapping every quantum.
    assert runs[:59] == ["b"] * 59
    assert runs[61:] == ["a"] * (180 - 61)
    _, rr = _one_gpu_pair("round-robin")
    assert rr.count("a") > 60 and rr.count("b") > 60  # round robin splits the GPU


def test_las_displaces_jobs_of_a_higher_level_for_a_job_that_cannot_share() -> None:
    state = new_state(2)
    policy = GandivaPolicy(reconsider_every=0.0, starvation_guard=False)
    for job in ("x", "y"):
        submit(state, job, 1, 0.0)
    policy.schedule(state, 0.0)
    submit(state, "big", 2, 2 * HOUR)  # x and y: 2 GPU-hours each, level 1
    policy.schedule(state, 2 * HOUR)
    assert state.jobs["big"].status is JobStatus.PENDING  # no 2-GPU set to share
    out = policy.introspect(state, 2 * HOUR + 60)
    assert sorted(d.job_id for d in of_type(out, Requeue)) == ["x", "y"]
    placed = of_type(out, Place)
    assert [d.job_id for d in placed] == ["big"]
    assert "level 1 of 3: 0.0 GPU-hours attained" in placed[0].reason
    assert "emptied for job big" in of_type(out, Requeue)[0].reason


def test_las_never_displaces_higher_priority_or_jobs_that_cannot_checkpoint() -> None:
    state = new_state(2)
    policy = GandivaPolicy(reconsider_every=0.0, starvation_guard=False)
    state.submit(JobSpec("x", 1, priority=Priority.HIGH), 0.0)
    state.submit(JobSpec("y", 1, can_checkpoint=False), 0.0)
    policy.schedule(state, 0.0)
    submit(state, "big", 2, 2 * HOUR)
    policy.schedule(state, 2 * HOUR)
    assert not of_type(policy.introspect(state, 2 * HOUR + 60), Requeue)
    assert state.jobs["big"].status is JobStatus.PENDING


def test_gandiva_refuses_an_unknown_order() -> None:
    with pytest.raises(PolicyOptionError, match="order"):
        GandivaPolicy(order="lottery")
    with pytest.raises(PolicyOptionError, match="level_factor"):
        GandivaPolicy(level_factor=1.0)


def test_las_policy_preempts_the_most_served_job_for_a_new_one() -> None:
    state = new_state(2)
    policy = LasPolicy()
    submit(state, "old", 1, 0.0)
    policy.schedule(state, 0.0)
    submit(state, "mid", 1, 1.5 * HOUR)
    policy.schedule(state, 1.5 * HOUR)
    submit(state, "new", 1, 2 * HOUR)
    out = policy.schedule(state, 2 * HOUR)
    # old has 2 GPU-hours (level 1), mid 0.5 (level 0): old gives its GPU to new.
    assert [d.job_id for d in of_type(out, Requeue)] == ["old"]
    assert [d.job_id for d in of_type(out, Place)] == ["new"]
    assert state.jobs["old"].status is JobStatus.PENDING


@pytest.mark.parametrize("smaller_first", [True, False])
def test_within_a_level_the_smaller_job_goes_first_unless_told_arrival_order(
    smaller_first: bool,
) -> None:
    state = new_state(2)
    policy = LasPolicy(smaller_first=smaller_first)
    submit(state, "hog", 2, 0.0)
    policy.schedule(state, 0.0)
    submit(state, "pair", 2, 10.0)  # arrived first, two GPUs
    submit(state, "one", 1, 20.0)  # arrived later, one GPU: same level 0
    ranking = las.Ranking(policy.levels, 20.0)
    pair, one = ranking(state.jobs["pair"]), ranking(state.jobs["one"])
    assert pair[1] == one[1] == 0
    assert (one < pair) is smaller_first
    state.finish("hog", 100.0)
    out = policy.schedule(state, 100.0)
    assert [d.job_id for d in of_type(out, Place)] == (["one"] if smaller_first else ["pair"])


def test_las_policy_keeps_a_job_for_its_quantum_and_skips_jobs_too_big() -> None:
    state = new_state(2)
    policy = LasPolicy(quantum=600.0)
    submit(state, "a", 1, 0.0)
    policy.schedule(state, 0.0)
    submit(state, "big", 4, 1.0)  # never fits 2 GPUs: skipped, not blocking
    submit(state, "b", 1, 2.0)
    policy.schedule(state, 2.0)
    assert state.jobs["b"].status is JobStatus.RUNNING
    submit(state, "c", 1, 2 * HOUR)  # a and b both past 1 GPU-hour, both past their quantum
    out = policy.schedule(state, 2 * HOUR)
    assert [d.job_id for d in of_type(out, Requeue)] == ["b"]  # a arrived first: FIFO in level
    submit(state, "d", 1, 2 * HOUR + 100)  # c holds its quantum; a has had 2 GPU-hours
    out = policy.schedule(state, 2 * HOUR + 100)
    assert [d.job_id for d in of_type(out, Requeue)] == ["a"]
    submit(state, "e", 1, 2 * HOUR + 200)  # c and d both within their quantum
    assert policy.schedule(state, 2 * HOUR + 200) == []


def test_the_simulator_jumps_over_passes_that_decide_nothing() -> None:
    """a (9 h) runs; b (2 h) arrives at 2 h and has the GPU for its first hour; then a, b."""
    jobs = [
        TraceJob(JobSpec("a", 1, submit_time=0.0), 9 * HOUR),
        TraceJob(JobSpec("b", 1, submit_time=2 * HOUR), 2 * HOUR),
    ]
    policy = GandivaPolicy(packing=False, migration=False)
    sim = Simulator(parse_cluster("1x1"), policy, PerfConfig.plain(), tick=60.0)
    result = sim.run(jobs)
    finish = {r.job_id: r.finish or 0.0 for r in sim.records}
    assert finish["a"] == pytest.approx(10 * HOUR, abs=120.0)
    assert finish["b"] == pytest.approx(11 * HOUR, abs=120.0)
    assert result.events < 40  # 12 h at one pass a minute would be 720 passes


def test_las_policy_promotes_a_job_that_waited_long_for_its_service() -> None:
    """A job preempted at 2 GPU-hours is promoted after 4 x 2 h and takes a GPU back."""
    state = new_state(1)
    policy = LasPolicy(quantum=0.0, promote_after=4.0)
    submit(state, "old", 1, 0.0)
    policy.schedule(state, 0.0)
    submit(state, "a", 1, 2 * HOUR)
    out = policy.schedule(state, 2 * HOUR)
    assert [d.job_id for d in of_type(out, Requeue)] == ["old"]
    # a runs into level 2 at 3 h; old (2 GPU-hours, arrived first) goes back on at once
    out = policy.introspect(state, 3 * HOUR)
    assert [d.job_id for d in of_type(out, Requeue)] == ["a"]
    assert state.jobs["old"].status is JobStatus.RUNNING
    # next: a's promotion (waits from 3 h with 1 GPU-hour: 3 + 4 x 1 = 7 h), before old
    # enters level 3 at 11 h
    assert policy.wake_at(state, 3 * HOUR) == pytest.approx(7 * HOUR)
    submit(state, "b", 1, 3.5 * HOUR)  # level 1: takes the GPU from old (level 2 by then)
    policy.schedule(state, 3.5 * HOUR)
    assert state.jobs["b"].status is JobStatus.RUNNING
    policy.introspect(state, 6.9 * HOUR)
    assert state.jobs["a"].status is JobStatus.PENDING
    out = policy.introspect(state, 7 * HOUR)
    assert state.jobs["a"].status is JobStatus.RUNNING
    placed = of_type(out, Place)
    assert [d.job_id for d in placed] == ["a"] and "promoted" in placed[0].reason


def test_promotions_are_noted_once_and_a_new_model_is_scanned_whole() -> None:
    levels = las.Levels(promote_after=1.0, min_service=HOUR)
    promotions = las.Promotions(levels)
    state = new_state(1)
    put(state, "a", "n0", (0,), now=0.0)
    state.apply(Requeue("a", "t"), 2 * HOUR)
    promotions.watch(state, ())  # a model not seen before: every waiting job noted
    assert promotions.next_due(state) == pytest.approx(4 * HOUR)
    assert promotions.promote(state, 3 * HOUR) == []
    assert [js.id for js in promotions.promote(state, 4 * HOUR)] == ["a"]
    assert promotions.promoted == 1 and promotions.next_due(state) is None
    other = new_state(1)
    submit(other, "z", 1, 0.0)
    promotions.watch(other, ())
    assert promotions.next_due(other) is None  # z never ran: level 1, nothing to promote


def test_a_kept_rank_is_not_reused_for_a_job_numbered_anew() -> None:
    """The daemon loads a new model every pass; a job's arrival number there may differ."""
    kept: las.Waiting = {}
    first = new_state(1)
    submit(first, "x", 1, 0.0)
    submit(first, "y", 1, 1.0)
    ranking = las.Ranking(las.DEFAULT, 10.0, kept)
    assert ranking(first.jobs["y"])[3] == 2
    second = new_state(1)
    submit(second, "y", 1, 1.0)  # x finished: y is now the first arrival
    assert las.Ranking(las.DEFAULT, 20.0, kept)(second.jobs["y"])[3] == 1
