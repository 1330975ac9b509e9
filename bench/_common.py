"""Shared set-up for the benchmarks: a seeded job stream and a peak-memory reading."""

from __future__ import annotations

import random
import resource
import sys

from gctl.core.model import JobSpec, Priority

SIZES = (1, 1, 1, 1, 2, 2, 4, 8)
"""GPU counts drawn per job: mostly small jobs, as in the Philly traces."""


def job_stream(count: int, seed: int = 1) -> list[JobSpec]:
    """``count`` jobs with Philly-like sizes and a few high/low priority ones."""
    rng = random.Random(seed)
    prios = (Priority.NORMAL,) * 8 + (Priority.HIGH, Priority.LOW)
    return [
        JobSpec(f"j{i}", rng.choice(SIZES), submit_time=float(i), priority=rng.choice(prios))
        for i in range(count)
    ]


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024
