"""Shared set-up for the benchmarks: a seeded job stream, a peak-memory reading, a test run."""

from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
from pathlib import Path

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


def run_test(test: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run one test of the suite (``pytest -q -s``) with ``env`` added; its output."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", test],
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
