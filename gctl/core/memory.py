"""GPU memory of jobs and GPU sets: what sharing a set needs, frozen or checkpointed.

A job frozen to take turns (gctl's *freeze*: the process is paused) keeps
its GPU memory, so the jobs taking turns on a set must fit in its memory
together, or those that can checkpoint must give their memory back while
they wait (suspend by checkpoint). A job's memory is its ``--gpu-mem``
limit (or what it was seen using, when more), else what it was seen
using; one with neither counts as none, as Gandiva assumes of a job not
yet profiled.
"""

from __future__ import annotations

from collections.abc import Sequence

from gctl.core.state import ClusterState, GroupKey, JobState


def job_mem(js: JobState) -> int:
    """The GPU memory (MB, per GPU) to count for a job: its limit, observed use, else 0.

    A job that gave ``--gpu-mem`` may grow to it (and is held to it), so its
    limit is counted even while it uses less: jobs sharing a GPU by memory
    each keep their share. Above it (within the grace before it is stopped)
    what it uses is counted.
    """
    seen = js.observed.gpu_mem_mb if js.observed is not None else 0
    return max(js.spec.gpu_mem_mb or 0, seen)


def gpu_mem(state: ClusterState, key: GroupKey) -> int:
    """The memory (MB) of the smallest GPU of the set ``key``."""
    return min(state.nodes[n].node.gpus[i].memory_mb for n, i in key)


def all_frozen_fit(state: ClusterState, key: GroupKey, jobs: Sequence[JobState]) -> bool:
    """Whether ``jobs`` fit the set's memory all at once, so every turn can be a freeze."""
    return sum(job_mem(j) for j in jobs) <= gpu_mem(state, key)


def can_take_turns(state: ClusterState, key: GroupKey, jobs: Sequence[JobState]) -> bool:
    """Whether ``jobs`` can take turns on the set at all.

    Either they fit all at once, or the ones that cannot checkpoint (always
    frozen, so always holding their memory) leave room for the biggest of
    the others while it runs.
    """
    if all_frozen_fit(state, key, jobs):
        return True
    frozen = sum(job_mem(j) for j in jobs if not j.spec.can_checkpoint)
    running = max((job_mem(j) for j in jobs if j.spec.can_checkpoint), default=0)
    return frozen + running <= gpu_mem(state, key)


def can_run_together(state: ClusterState, key: GroupKey, cohort: Sequence[JobState]) -> bool:
    """Whether ``cohort`` can run at once on the set while its other jobs wait their turn.

    The waiting jobs hold their memory when all of the set's jobs fit at
    once (frozen), else only those that cannot checkpoint do.
    """
    members = state.member_jobs(key)
    if all_frozen_fit(state, key, members):
        return True
    held = [j for j in members if j not in cohort and not j.spec.can_checkpoint]
    return sum(job_mem(j) for j in [*held, *cohort]) <= gpu_mem(state, key)


def suspend_by_checkpoint(state: ClusterState, js: JobState) -> bool:
    """Whether ``js`` must give its GPU memory back to wait for its turn on its set.

    True when the jobs sharing its GPUs do not all fit at once and ``js``
    can checkpoint.
    """
    members = state.member_jobs(js.gpus)
    return js.spec.can_checkpoint and not all_frozen_fit(state, js.gpus, members)
