"""Training learned policies in the simulator: the trainer interface and where trainers are found.

A learned policy ships a trainer beside it, registered in the
``gctl.trainers`` entry-point group under the policy's own name, so
``gctl sim train NAME`` finds it the way ``--policy NAME`` finds the policy.
A trainer gets the prepared jobs and the cluster (from a trace, or from the
site's own history in the store), trains, writes its model file and says
what it did; everything it shows goes through the progress callback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gctl.core.model import Cluster
from gctl.registry import registered, registered_object
from gctl.sim.perf import PerfConfig
from gctl.sim.workload import TraceJob

TRAINER_GROUP = "gctl.trainers"

TrainProgress = Callable[[str, int, int, float | None], None]
"""Called as ``(phase, steps done, steps in the phase, running reward or None)``."""


@dataclass(frozen=True, slots=True)
class TrainRequest:
    """Everything one ``gctl sim train`` run needs."""

    jobs: tuple[TraceJob, ...]
    cluster: Cluster
    source: str
    """Where the jobs came from, for the log: a trace path, or the store."""
    out: Path
    seed: int = 0
    perf: PerfConfig = field(default_factory=PerfConfig)
    tick: float = 60.0
    options: dict[str, Any] = field(default_factory=dict)
    """Trainer options (``-o KEY=VALUE``); a trainer refuses those it does not have."""
    init: Path | None = None
    """A model to continue training from, instead of a fresh one."""
    log: Path | None = None
    """Where to write the learning curve as JSON (default: beside ``out``)."""
    plot: Path | None = None
    """Where to write the learning curve as an SVG plot (default: beside ``out``)."""


@dataclass(frozen=True, slots=True)
class TrainSummary:
    """What a training run produced."""

    model: Path
    log: Path
    plot: Path
    episodes: int
    seconds: float
    figures: dict[str, float]
    """Named final figures (rewards, losses), for the CLI to show."""


class Trainer(Protocol):
    """Trains one learned policy; raises :class:`TrainError` on input it cannot use."""

    def __call__(self, request: TrainRequest, progress: TrainProgress | None) -> TrainSummary:
        """Train on the request's jobs and write the model to ``request.out``."""
        ...


class TrainError(ValueError):
    """A training request that cannot be carried out: the one-line reason."""


def available_trainers() -> list[str]:
    """Names of every registered trainer, sorted."""
    return registered(TRAINER_GROUP)


def load_trainer(name: str) -> Trainer:
    """The trainer registered under ``name``."""
    trainer: Trainer | None = registered_object(TRAINER_GROUP, name)
    if trainer is None:
        known = ", ".join(available_trainers()) or "none"
        raise TrainError(f"no trainer for policy {name!r} (trainers: {known})")
    return trainer
