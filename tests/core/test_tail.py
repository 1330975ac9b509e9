"""The makespan guard: jobs whose remaining work outlasts the backlog run before it drains."""

from __future__ import annotations

import pytest
from corekit import new_state, put, submit

from gctl.core import las, tail
from gctl.core.model import JobSpec
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.core.policy import PolicyOptionError
from gctl.core.state import ClusterState
from gctl.sim.cluster_spec import parse_cluster
from gctl.sim.engine import Simulator
from gctl.sim.perf import PerfConfig
from gctl.sim.workload import TraceJob

HOUR = 3600.0


def test_a_job_is_critical_when_its_remaining_time_alone_outlasts_the_backlogs_drain() -> None:
    state = new_state(4)
    put(state, "long", "n0", (0,), now=0.0)  # 10 GPU-h had, 10 % done: 90 h left
    put(state, "short", "n0", (1,), now=0.0)  # 10 GPU-h had, half done: 10 h left
    put(state, "wide", "n0", (2, 3), now=5 * HOUR)  # 10 GPU-h had, half: 10 GPU-h, 5 h left
    submit(state, "new", 1, now=HOUR)  # never ran: nothing known
    done = {"long": 0.1, "short": 0.5, "wide": 0.5, "new": 0.0}
    assert tail.critical(state, 10 * HOUR, 1.0) == {}  # the driver knows no fraction done
    state.work_done = done.get
    got = tail.critical(state, 10 * HOUR, 1.0)
    # Backlog: 90 + 10 + 10 GPU-hours over 4 GPUs drains in 27.5 h; only "long" outlasts it.
    assert got == {"long": tail.Critical(90 * HOUR, 27.5 * HOUR)}
    assert got["long"].describe() == (
        "tail guard: about 3.8 days of work left, more than the 27.5 hours the whole queue needs"
    )


def test_critical_jobs_hold_at_most_their_share_of_the_gpus_but_the_longest_always_runs() -> None:
    state = new_state(8)
    put(state, "a", "n0", (0, 1, 2), now=0.0)  # 30 GPU-h had, 10 % done: 90 h left on 3 GPUs
    put(state, "b", "n0", (3,), now=0.0)  # 10 GPU-h had, 20 % done: 40 h left
    put(state, "c", "n0", (4,), now=0.0)  # 30 h left
    put(state, "d", "n0", (5,), now=0.0)  # 10 h left
    state.work_done = {"a": 0.1, "b": 0.2, "c": 0.25, "d": 0.5}.get
    now = 10 * HOUR
    # Backlog: 270 + 40 + 30 + 10 GPU-hours over 8 GPUs: 43.75 h. Only a outlasts it.
    assert list(tail.critical(state, now, 1.0)) == ["a"]
    state.work_done = {"a": 0.5, "b": 0.2, "c": 0.25, "d": 0.5}.get
    # Now 30 + 40 + 30 + 10 over 8: 13.75 h, and b, c (and a: 10 h) outlast it; d does not.
    assert list(tail.critical(state, now, 1.0)) == ["b", "c"]
    assert list(tail.critical(state, now, 1 / 8)) == ["b"]  # one GPU of 8: the longest only
    state.work_done = {"a": 0.05, "b": 0.2, "c": 0.25, "d": 0.5}.get
    assert list(tail.critical(state, now, 1 / 8)) == ["a"]  # 3 GPUs, over the share: the longest


def test_a_job_with_less_work_left_than_the_guards_period_is_never_chosen() -> None:
    state = new_state(2)
    put(state, "a", "n0", (0,), now=0.0)  # 1 GPU-h had, 60 % done: 40 min left
    put(state, "b", "n0", (1,), now=0.0)  # 1 GPU-h had, 80 % done: 15 min left
    state.work_done = {"a": 0.6, "b": 0.8}.get
    # Drain: 55 min over 2 GPUs; a outlasts it, but the next check (an hour) comes first.
    assert tail.critical(state, HOUR, 1.0, at_least=HOUR) == {}
    assert list(tail.critical(state, HOUR, 1.0, at_least=0.5 * HOUR)) == ["a"]


def _stream(guard: bool) -> dict[str, float]:
    """A 20 h job, and 1-GPU jobs of 0.9 h arriving four at a time to keep 4 GPUs busy."""
    jobs = [TraceJob(JobSpec("long", 1, submit_time=0.0), 20 * HOUR)]
    for k in range(40):
        for i in range(4):
            spec = JobSpec(f"s{k}-{i}", 1, submit_time=0.5 * HOUR + k * 0.9 * HOUR)
            jobs.append(TraceJob(spec, 0.9 * HOUR))
    policy = GandivaPolicy(packing=False, migration=False, tail_guard=guard)
    sim = Simulator(parse_cluster("1x4"), policy, PerfConfig.plain(), tick=60.0)
    sim.run(jobs)
    return {r.job_id: r.finish or 0.0 for r in sim.records}


def test_the_tail_guard_ends_the_long_job_when_the_stream_of_short_ones_drains() -> None:
    """Least attained service alone holds the long job back until the stream dries up."""
    held, guarded = _stream(False), _stream(True)
    fluid = (20 + 160 * 0.9) * HOUR / 4  # all the work on 4 GPUs, never one idle: 41 h
    assert held["long"] > 36 * HOUR + 18 * HOUR  # ran after the stream, alone to the end
    assert max(guarded.values()) == guarded["long"] < 1.05 * fluid
    short = [f for j, f in guarded.items() if j != "long"]
    assert max(short) < 1.05 * fluid  # and the short jobs were not held back for it


def test_a_fresh_model_gets_the_chosen_jobs_service_counted_from_the_check() -> None:
    """The daemon loads its model afresh every pass: the guard's choice outlives it."""
    policy = GandivaPolicy()

    def model() -> ClusterState:
        state = new_state(4)
        for i, job in enumerate(["long", "a", "b", "c"]):
            put(state, job, "n0", (i,), now=0.0)
        state.work_done = {"long": 0.1, "a": 0.9, "b": 0.9, "c": 0.9}.get
        return state

    first = model()
    policy.introspect(first, 10 * HOUR)
    assert first.jobs["long"].service_base == pytest.approx(10 * HOUR)
    again = model()
    policy.schedule(again, 10.5 * HOUR)
    js = again.jobs["long"]
    assert js.service_base == pytest.approx(10 * HOUR)
    assert policy.levels is not None and policy.levels.level(js, 10.5 * HOUR) == 0
    rank = las.Ranking(policy.levels, 10.5 * HOUR, notes={"long": "tail guard: why"})
    assert rank.describe(js) == "level 1 of 3: 10.5 GPU-hours attained, tail guard: why"


def test_tail_options_are_checked() -> None:
    with pytest.raises(PolicyOptionError, match=r"tail_share=-0\.1: must be >= 0"):
        GandivaPolicy(tail_share=-0.1)
    with pytest.raises(PolicyOptionError, match=r"tail_every=0\.0: must be > 0"):
        GandivaPolicy(tail_every=0.0)
    assert GandivaPolicy(tail_share=0.0, tail_every=1.0).config.tail_share == 0.0
