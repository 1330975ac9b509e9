"""Scheduling decisions as typed values, each carrying the reason it was taken.

A policy returns these; the daemon turns them into host actions and the
simulator into changes of job speed. ``gctl why`` shows the reasons.
"""

from __future__ import annotations

from dataclasses import dataclass

from gctl.core.model import GpuRef, ShareMode


@dataclass(frozen=True, slots=True)
class Place:
    """Start a pending job on ``gpus``."""

    job_id: str
    gpus: tuple[GpuRef, ...]
    mode: ShareMode
    reason: str


@dataclass(frozen=True, slots=True)
class Queue:
    """Leave a job pending."""

    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Suspend:
    """Stop a job's progress; it keeps its place on its GPUs (time slicing).

    ``checkpoint``: it gives its GPU memory back while it waits (checkpoint
    and stop, restart on its turn), because the jobs sharing its GPUs do not
    fit in their memory all at once; otherwise it is frozen in place.
    """

    job_id: str
    reason: str
    checkpoint: bool = False


@dataclass(frozen=True, slots=True)
class Resume:
    """Let a suspended job run again on the GPUs it holds."""

    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Pack:
    """Move ``job_id`` onto ``gpus`` to run concurrently with ``with_jobs``."""

    job_id: str
    gpus: tuple[GpuRef, ...]
    with_jobs: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Unpack:
    """End a pack: ``job_id`` stays on its GPUs but goes back to taking turns."""

    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Migrate:
    """Checkpoint ``job_id`` and restore it on ``dst`` (``src`` is where it was)."""

    job_id: str
    src: tuple[GpuRef, ...]
    dst: tuple[GpuRef, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Grow:
    """Restart an elastic job at a checkpoint on the larger set ``gpus``."""

    job_id: str
    gpus: tuple[GpuRef, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Shrink:
    """Restart an elastic job at a checkpoint on the smaller set ``gpus``."""

    job_id: str
    gpus: tuple[GpuRef, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Requeue:
    """Checkpoint a running or suspended job and return it to the queue, progress kept."""

    job_id: str
    reason: str


Decision = Place | Queue | Suspend | Resume | Pack | Unpack | Migrate | Grow | Shrink | Requeue
"""Any decision a policy can take."""

MOVES = (Migrate, Grow, Shrink, Requeue)
"""Decisions that checkpoint a job to restore it elsewhere (at once, or when placed again)."""
