"""The GPU memory guard: which jobs above their ``--gpu-mem`` are due to stop, and when."""

from __future__ import annotations

from gctl.daemon.gpumem import MemoryGuard
from gctl.daemon.watch import Observation
from gctl.hosts.engine import LABEL_ATTEMPT, LABEL_GPU_MEM, LABEL_GPUS, LABEL_JOB, ContainerState
from gctl.services.telemetry import JobSample, NodeSample


def _look(
    at: float, *jobs: tuple[int, int, int | None, int | None], node: str = "h1"
) -> Observation:
    """A full look at ``node`` finding each (job, attempt, limit, used) running."""
    containers, samples = [], []
    for job, attempt, limit, used in jobs:
        labels = {LABEL_JOB: str(job), LABEL_ATTEMPT: str(attempt), LABEL_GPUS: "0"}
        if limit is not None:
            labels[LABEL_GPU_MEM] = str(limit)
        name = f"gctl-{job}-{attempt}"
        containers.append(
            ContainerState(name, name, "running", True, False, None, False, None, labels)
        )
        samples.append(JobSample(job, name, "running", (0,), 50.0, used, False, used))
    sample = NodeSample(node, None, "nvml", (), tuple(samples))
    return Observation(node, at, 0, True, containers=tuple(containers), sample=sample)


def test_a_job_above_its_limit_for_the_grace_is_due_and_one_within_it_never() -> None:
    guard = MemoryGuard(grace=2.0)
    assert guard.check([_look(10.0, (1, 0, 4000, 6000), (2, 0, 4000, 3900))]) == []
    assert guard.nodes() == {"h1"}  # looked at fast while suspect
    assert guard.check([_look(11.0, (1, 0, 4000, 6100), (2, 0, 4000, 4000))]) == []
    [due] = guard.check([_look(12.0, (1, 0, 4000, 6200), (2, 0, 4000, 4000))])
    assert (due.job_id, due.attempt, due.used_mb, due.since) == (1, 0, 6200, 10.0)
    assert due.reason == "GPU memory limit exceeded: used 6200 MiB of 4000 MiB"
    assert guard.suspects == {} and guard.nodes() == set()


def test_a_burst_that_ends_within_the_grace_is_forgiven() -> None:
    guard = MemoryGuard(grace=2.0)
    guard.check([_look(10.0, (1, 0, 4000, 6000))])
    guard.check([_look(11.0, (1, 0, 4000, 3000))])  # back within: cleared
    assert guard.check([_look(12.5, (1, 0, 4000, 6000))]) == []  # a new excess starts over
    assert guard.check([_look(14.5, (1, 0, 4000, 6000))])[0].since == 12.5


def test_no_limit_no_measure_or_a_new_attempt_never_counts_against_the_job() -> None:
    guard = MemoryGuard(grace=0.0)
    assert guard.check([_look(10.0, (1, 0, None, 90000), (2, 0, 4000, None))]) == []
    assert guard.check([_look(10.0, (3, 0, 4000, 5000))])[0].job_id == 3  # grace 0: at once
    guard = MemoryGuard(grace=2.0)
    guard.check([_look(10.0, (1, 0, 4000, 6000))])
    assert guard.check([_look(12.0, (1, 1, 4000, 6000))]) == []  # restarted: its own clock
    partial = Observation("h1", 13.0, 0, False)  # a look that is not full samples nothing
    failed = Observation("h1", 13.0, 0, True, error="timed out")
    assert guard.check([partial, failed]) == [] and guard.nodes() == {"h1"}
