"""Profile history: the last samples of each job, read incrementally from the store.

No service exposes the ``profiles`` table the daemon fills, so this data
layer reads it itself; widgets never do. :func:`gpu_series` turns the
samples of the jobs on one GPU into that GPU's utilisation and memory
history for the sparklines.
"""

from __future__ import annotations

from collections import deque

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gctl.store.models import ProfileRow
from gctl.watch.frame import GpuCell, Sample

DEPTH = 30
"""Samples kept per job (and so points in a GPU's sparkline)."""


class History:
    """The last :data:`DEPTH` profile samples of each job still holding GPUs."""

    def __init__(self, depth: int = DEPTH) -> None:
        """Start empty; the first :meth:`read` back-fills from the newest stored samples."""
        self.depth = depth
        self._last_id: int | None = None
        self._by_job: dict[int, deque[Sample]] = {}

    def read(self, s: Session, holding: set[int]) -> dict[int, tuple[Sample, ...]]:
        """Add the samples stored since the last read; the history of each job in ``holding``."""
        p = ProfileRow.__table__.c
        if self._last_id is None:
            top = s.scalar(select(func.max(p.id))) or 0
            self._last_id = max(0, top - self.depth * max(1, len(holding)))
        rows = s.execute(
            select(p.id, p.job_id, p.at, p.gpu_util, p.memory_mb, p.progress_rate)
            .where(p.id > self._last_id)
            .order_by(p.id)
        ).all()
        for row_id, job_id, at, util, mem, rate in rows:
            self._last_id = row_id
            if job_id in holding:
                kept = self._by_job.get(job_id)
                if kept is None:
                    kept = self._by_job[job_id] = deque(maxlen=self.depth)
                kept.append(Sample(at, util, mem, rate))
        for gone in self._by_job.keys() - holding:
            del self._by_job[gone]
        return {job: tuple(kept) for job, kept in self._by_job.items()}


def gpu_series(
    gpu: GpuCell, samples: dict[int, tuple[Sample, ...]], depth: int = DEPTH
) -> tuple[list[float], list[int]]:
    """Utilisation (0..1) and memory (MB) of ``gpu`` over its jobs' last samples, oldest first.

    The daemon samples every running job in one pass at one time, so the
    samples of the jobs sharing a GPU line up by time: at each time the GPU's
    utilisation is the sum of theirs (at most 1) and its memory the sum of
    each job's memory spread over the GPUs it holds.
    """
    util: dict[float, float] = {}
    mem: dict[float, float] = {}
    for h in gpu.holders:
        for smp in samples.get(h.job_id, ()):
            util[smp.at] = util.get(smp.at, 0.0) + smp.util
            mem[smp.at] = mem.get(smp.at, 0.0) + smp.memory_mb / max(1, h.gpus_held)
    times = sorted(util)[-depth:]
    return [min(1.0, util[t]) for t in times], [round(mem[t]) for t in times]


def latest_rate(samples: tuple[Sample, ...]) -> float | None:
    """The progress rate of a job's newest sample, if it has one."""
    return samples[-1].rate if samples else None
