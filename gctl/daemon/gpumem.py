"""GPU memory as an enforced limit: a job over its ``--gpu-mem`` is stopped, as an OOM kill would.

A job's ``--gpu-mem`` is the most GPU memory it may use on each of its
GPUs; its containers carry it in a label. Every full look at a node samples
each job's memory on each of its GPUs (:mod:`gctl.services.telemetry`: NVML
per process on real GPUs, summed per container and GPU; on emulated GPUs
the allocation the job declares in ``GCTL_EMULATED_GPU_MEM``, else its
ask). A job seen above its limit becomes a *suspect*: its node is then
looked at every control period (:meth:`MemoryGuard.nodes`), and when a look
at least ``grace`` seconds after the first still finds it above, the job
ends FAILED with ``GPU memory limit exceeded: used X MiB of Y MiB`` and its
containers are killed (:func:`stop`). A look that finds it within its limit
clears it; a job within its limit is never touched.

What sampling cannot stop: a burst shorter than the time between two looks
goes unseen, and nothing here refuses an allocation (the driver hands out
memory until the GPU is full), so a job sharing the GPU with the offender
can hit an out-of-memory error before the offender is stopped. The job SDK
also hands the limit to the framework (:func:`gctl.job.limit_gpu_memory`),
which does refuse allocations past it, from inside the job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

from gctl.daemon.ends import end_now
from gctl.daemon.inflight import Inflight
from gctl.daemon.site import Site
from gctl.daemon.watch import Observation
from gctl.services import events
from gctl.services.queue import ON_GPUS
from gctl.store.engine import transaction
from gctl.store.models import JobRow

DEFAULT_GRACE = 2.0
"""Seconds a job may stay above its GPU memory limit before it is stopped."""


@dataclass(frozen=True, slots=True)
class Excess:
    """A job attempt seen above its GPU memory limit, since ``since`` (store time)."""

    job_id: int
    attempt: int
    node: str
    used_mb: int
    limit_mb: int
    since: float

    @property
    def reason(self) -> str:
        """The job's end reason."""
        return f"GPU memory limit exceeded: used {self.used_mb} MiB of {self.limit_mb} MiB"


class MemoryGuard:
    """The jobs seen above their GPU memory limit, and which of them have been so too long."""

    def __init__(self, grace: float = DEFAULT_GRACE) -> None:
        """``grace``: seconds between the first look that finds a job above and its stop."""
        self.grace = grace
        self.suspects: dict[int, Excess] = {}

    def check(self, seen: Iterable[Observation]) -> list[Excess]:
        """Take in full looks; the jobs above their limit for ``grace`` seconds now, to stop."""
        due: list[Excess] = []
        for o in seen:
            if not o.full or o.error is not None or o.sample is None:
                continue
            usage = {j.container: j.memory_peak_mb for j in o.sample.jobs}
            for c in o.containers:
                used, limit = usage.get(c.name), c.gpu_mem_limit_mb
                if c.job_id is None or c.attempt is None or c.exit_code is not None:
                    continue
                if used is None or limit is None or used <= limit:
                    self._clear(c.job_id, c.attempt, o.node)
                    continue
                first = self.suspects.get(c.job_id)
                if first is None or first.attempt != c.attempt:
                    first = Excess(c.job_id, c.attempt, o.node, used, limit, o.began)
                excess = Excess(c.job_id, c.attempt, o.node, used, limit, first.since)
                self.suspects[c.job_id] = excess
                if o.began - excess.since >= self.grace:
                    due.append(excess)
        for excess in due:
            del self.suspects[excess.job_id]
        return due

    def _clear(self, job_id: int, attempt: int, node: str) -> None:
        suspect = self.suspects.get(job_id)
        if suspect is not None and (suspect.attempt != attempt or suspect.node == node):
            del self.suspects[job_id]

    def nodes(self) -> set[str]:
        """Nodes to look at every control period: those of the suspects."""
        return {s.node for s in self.suspects.values()}


def stop(site: Site, due: Iterable[Excess], inflight: Inflight) -> list[int]:
    """End each job FAILED with its excess as the reason, then kill its containers; their ids.

    A job that ended, moved or restarted since the look is left alone. The
    store is written first (its GPUs are free for the next decision); the
    containers are killed in the background, as ``gctl cancel`` does.
    """
    stopped = []
    with transaction(site.store.engine, write=True) as s:
        for excess in due:
            row = s.get(JobRow, excess.job_id)
            if row is None or row.state not in ON_GPUS or row.op is not None:
                continue
            if row.attempt != excess.attempt:
                continue
            nodes = end_now(site, s, row, "FAILED", excess.reason)
            data = {
                "attempt": excess.attempt,
                "used_mb": excess.used_mb,
                "limit_mb": excess.limit_mb,
                "node": excess.node,
            }
            message = f"job {row.id} failed: {excess.reason} on {excess.node}"
            events.record(s, "job.end", message, job_id=row.id, data=data)
            stopped.append((row.id, nodes))
    for job_id, nodes in stopped:
        inflight.submit(
            f"killing job {job_id}, over its GPU memory limit",
            partial(site.kill, nodes, job_id),
            jobs=[job_id],
            nodes={n.name for n in nodes},
        )
    return [job_id for job_id, _ in stopped]
