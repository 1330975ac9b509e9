"""A job as a trace describes it: the core spec plus how long it runs when undisturbed."""

from __future__ import annotations

from dataclasses import dataclass

from gctl.core.model import JobSpec


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One trace job.

    ``duration`` is the ideal run time in seconds on ``spec.gpus`` GPUs, alone
    and well placed; the performance model stretches it for bad locality,
    packing, suspension and migration.
    """

    spec: JobSpec
    duration: float
