"""The discrete-event engine: conservation of work, exactly-once finishes, determinism."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gctl.core.model import JobSpec
from gctl.core.policies.fifo import FifoPolicy
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.sim.cluster_spec import parse_cluster
from gctl.sim.engine import Simulator
from gctl.sim.perf import PerfConfig
from gctl.sim.workload import TraceJob


def _jobs(spec: list[tuple[float, int, float]], model: str | None = "resnet18") -> list[TraceJob]:
    return [
        TraceJob(JobSpec(f"j{i}", gpus, submit_time=t, profile=model), duration)
        for i, (t, gpus, duration) in enumerate(spec)
    ]


def test_fifo_on_an_empty_cluster_runs_every_job_for_exactly_its_duration() -> None:
    jobs = _jobs([(0, 1, 100.0), (10, 2, 50.0), (20, 4, 30.0)])
    result = Simulator(parse_cluster("2x4"), FifoPolicy(), PerfConfig.plain()).run(jobs)
    assert result.metrics.finished == 3
    assert result.metrics.avg_jct == pytest.approx((100 + 50 + 30) / 3)
    assert result.metrics.makespan == pytest.approx(100.0)
    assert result.metrics.avg_queueing_delay == 0.0


def test_fifo_queues_behind_the_head_of_line() -> None:
    # 4 GPUs: j0 takes 3, j1 needs 2 and blocks j2 (1 GPU) although one GPU is free.
    jobs = _jobs([(0, 3, 100.0), (1, 2, 10.0), (2, 1, 10.0)])
    result = Simulator(parse_cluster("1x4"), FifoPolicy(), PerfConfig.plain()).run(jobs)
    assert result.metrics.finished == 3
    # j1 starts at 100, j2 right after j1 is placed (both fit once j0 is gone)
    assert result.metrics.makespan == pytest.approx(110.0)


def test_the_queue_length_is_recorded_when_it_changes_and_at_the_end() -> None:
    # as above: j1 and j2 wait behind j0 until it finishes at 100, then both run
    jobs = _jobs([(0, 3, 100.0), (1, 2, 10.0), (2, 1, 10.0)])
    result = Simulator(parse_cluster("1x4"), FifoPolicy(), PerfConfig.plain()).run(jobs)
    assert [n for _, n in result.queue] == [0, 1, 2, 0, 0]
    assert [t for t, _ in result.queue] == pytest.approx([0.0, 1.0, 2.0, 100.0, 110.0])


def test_time_slicing_conserves_work_in_the_plain_model() -> None:
    """Busy GPU-seconds equal the trace's GPU-seconds when nothing speeds jobs up or down."""
    jobs = _jobs([(i * 7.0, 1 + (i % 2), 300.0 + 40 * i) for i in range(12)])
    policy = GandivaPolicy(packing=False, migration=False, elastic=False)
    result = Simulator(parse_cluster("1x4"), policy, PerfConfig.plain(), tick=30.0).run(jobs)
    assert result.metrics.finished == len(jobs)
    assert result.metrics.counts["suspends"] > 0
    demanded = sum(j.duration * j.spec.gpus for j in jobs)
    busy = result.metrics.gpu_utilisation * 4 * result.metrics.makespan
    assert busy == pytest.approx(demanded, rel=1e-6)


def test_every_job_finishes_exactly_once_and_oversized_ones_are_reported() -> None:
    jobs = _jobs([(i * 3.0, [1, 2, 4, 8, 16][i % 5], 200.0 + i) for i in range(40)])
    result = Simulator(parse_cluster("1x8"), GandivaPolicy(), PerfConfig()).run(jobs)
    too_big = {j.spec.id for j in jobs if j.spec.gpus > 8}
    assert set(result.rejected) == too_big
    assert result.metrics.jobs == len(jobs) - len(too_big)
    assert result.metrics.finished == len(jobs) - len(too_big)
    assert result.unfinished == ()


def test_horizon_leaves_jobs_unfinished_and_says_which() -> None:
    jobs = _jobs([(0, 1, 100.0), (0, 1, 10_000.0)])
    sim = Simulator(parse_cluster("1x2"), FifoPolicy(), PerfConfig.plain(), horizon=500.0)
    result = sim.run(jobs)
    assert result.unfinished == ("j1",)
    assert result.metrics.finished == 1


def test_same_input_gives_identical_results() -> None:
    jobs = _jobs([(i * 11.0, 1 + i % 4, 500.0 + 13 * i) for i in range(60)], model=None)
    jobs = [
        replace(j, spec=replace(j.spec, profile=m))
        for j, m in zip(jobs, ["vgg16", "bert", "dqn"] * 20, strict=True)
    ]
    a = Simulator(parse_cluster("2x4"), GandivaPolicy(), PerfConfig()).run(jobs)
    b = Simulator(parse_cluster("2x4"), GandivaPolicy(), PerfConfig()).run(jobs)
    assert a.metrics == b.metrics


def test_locality_slows_a_job_spread_over_two_nodes() -> None:
    # Two 3-GPU jobs leave one GPU free per node, so the 2-GPU vgg16 job spans both
    # nodes and runs at its CROSS_NODE factor (< 1): it takes longer than its duration.
    jobs = _jobs([(0, 3, 5000.0), (0, 3, 5000.0), (1, 2, 1000.0)], model="vgg16")
    sim = Simulator(parse_cluster("2x4"), FifoPolicy(), PerfConfig())
    sim.run(jobs)
    record = next(r for r in sim.records if r.job_id == "j2")
    assert record.finish is not None
    assert record.finish - record.submit > 1000.0 * 1.2


def test_a_job_larger_than_a_node_on_whole_nodes_runs_at_full_speed() -> None:
    # The trace's duration of an 8-GPU job was measured on two 4-GPU nodes: no slow-down there.
    jobs = _jobs([(0, 8, 1000.0)], model="vgg16")
    result = Simulator(parse_cluster("2x4"), FifoPolicy(), PerfConfig()).run(jobs)
    assert result.metrics.avg_jct == pytest.approx(1000.0)


def test_light_jobs_sharing_one_gpu_take_their_turns_packed() -> None:
    # Unknown models pack at 0.6 of their speed each: pairs of turns do 1.2 GPUs of work.
    jobs = _jobs([(0, 1, 86400.0), (1, 1, 86400.0), (2, 1, 86400.0)], model=None)
    packed = Simulator(parse_cluster("1x1"), GandivaPolicy(), PerfConfig()).run(jobs)
    alone = Simulator(parse_cluster("1x1"), GandivaPolicy(packing=False), PerfConfig()).run(jobs)
    assert alone.metrics.makespan >= 3 * 86400.0
    assert packed.metrics.makespan < 0.9 * 3 * 86400.0
    assert packed.metrics.finished == 3


def test_a_requeued_job_keeps_its_progress_and_pays_one_restore() -> None:
    """The starvation guard requeues small jobs for a size below its share; no work is lost.

    Eight 1-GPU jobs of 10 days hold the one 8-GPU node; two 4-GPU jobs ask
    for as many GPUs, so their share is 4: after an hour the first takes four
    GPUs, whose jobs wait (no time slicing here) until it is done, then
    finish their work plus one restore. The second is alone in its size then,
    its share (8 x 4 / 12 GPUs) less than one job: it waits for free GPUs.
    """
    from gctl.sim import profiles

    day = 86400.0
    jobs = _jobs([(0, 1, 10 * day)] * 8 + [(1, 4, 1000.0)] * 2)
    perf = PerfConfig(locality=False, packing=False, overheads=True, elastic=False)
    policy = GandivaPolicy(
        starvation_limit=3600.0, max_height=1.0, migration=False, order="round-robin"
    )
    sim = Simulator(parse_cluster("1x8"), policy, perf, tick=60.0)
    result = sim.run(jobs)
    assert result.metrics.finished == 10 and result.metrics.counts["requeues"] == 4
    finish = {r.job_id: r.finish or 0.0 for r in sim.records}
    first = {r.job_id: r.first_run or 0.0 for r in sim.records}
    started = first["j8"]
    assert 3601.0 <= started <= 3601.0 + 60.0
    assert finish["j8"] == pytest.approx(started + 1000.0)
    assert first["j9"] == pytest.approx(10 * day) and finish["j9"] == pytest.approx(10 * day + 1000)
    restore = profiles.migration_cost_s("resnet18")
    assert restore > 0
    late = sorted(finish[f"j{i}"] - 10 * day for i in range(8))
    assert late == pytest.approx([0.0] * 4 + [1000.0 + restore] * 4, abs=1e-6)


@pytest.mark.parametrize(("gpu", "checkpointed"), [("V100-16GB", True), ("A100-80GB", False)])
def test_a_suspend_by_checkpoint_costs_a_restore_and_a_freeze_a_thaw(
    gpu: str, checkpointed: bool
) -> None:
    """Two gpt2 jobs (12 GB each) take turns on one GPU: checkpointed on 16 GB, frozen on 80 GB.

    They ask for their memory, so even the first turn, handed to the second
    job before it ever ran, knows they do not fit together on 16 GB.
    """
    from gctl.sim import profiles

    jobs = [
        TraceJob(JobSpec(f"j{i}", 1, submit_time=t, profile="gpt2", gpu_mem_mb=12000), 1000.0)
        for i, t in enumerate((0.0, 1.0))
    ]
    perf = PerfConfig(locality=False, packing=False, overheads=True, elastic=False)
    policy = GandivaPolicy(
        packing=False,
        migration=False,
        quantum=60.0,
        checkpoint_quantum=60.0,
        order="round-robin",
    )
    sim = Simulator(parse_cluster(f"1x1:{gpu}"), policy, perf, tick=60.0)
    result = sim.run(jobs)
    suspends = result.metrics.counts["suspends"]
    assert result.metrics.finished == 2 and suspends > 10
    thaw = profiles.suspend_resume_cost_s("gpt2")
    restore = profiles.migration_cost_s("gpt2")
    extra = suspends * (restore - thaw) if checkpointed else 0.0
    # One GPU did both jobs' work, one thaw per resume, and a restore's extra per checkpoint.
    assert result.metrics.makespan == pytest.approx(
        2000.0 + result.metrics.counts["resumes"] * thaw + extra
    )
