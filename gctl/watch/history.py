"""Sparkline series from profile history: a GPU's utilisation and memory, a job's latest rate.

The samples come from :class:`gctl.services.dashboard.ProfileHistory`,
through the frame; these functions only arrange them for the widgets.
"""

from __future__ import annotations

from gctl.services.dashboard import HISTORY_DEPTH, Sample
from gctl.watch.frame import GpuCell


def gpu_series(
    gpu: GpuCell, samples: dict[int, tuple[Sample, ...]], depth: int = HISTORY_DEPTH
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
