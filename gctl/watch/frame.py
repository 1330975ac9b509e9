"""One refresh's worth of what the dashboard shows: immutable views built by the data layer."""

from __future__ import annotations

from dataclasses import dataclass

from gctl.services.dashboard import Holder, Sample
from gctl.services.events import EventView
from gctl.services.nodes import NodeView


@dataclass(frozen=True, slots=True)
class GpuCell:
    """One GPU of a node and the jobs on it, oldest allocation first."""

    node: str
    index: int
    model: str
    memory_mb: int
    emulated: bool
    holders: tuple[Holder, ...]

    @property
    def mode(self) -> str:
        """``idle``, or how the GPU is held.

        ``exclusive``, ``packed``, ``time-sliced``, ``opportunistic`` (an
        opportunistic job alone) or ``tgs`` (one beside a production job,
        rate-limited).
        """
        if not self.holders:
            return "idle"
        modes = {h.mode for h in self.holders}
        if "opportunistic" in modes:
            return "opportunistic" if len(self.holders) == 1 else "tgs"
        if len(self.holders) == 1:
            return "exclusive"
        return "time-sliced" if "time-sliced" in modes else "packed"

    @property
    def slice_holder(self) -> int | None:
        """On a time-sliced GPU, the job that has the slice now (the running one)."""
        if self.mode != "time-sliced":
            return None
        running = [h.job_id for h in self.holders if h.running]
        return running[0] if running else None


@dataclass(frozen=True, slots=True)
class NodeLine:
    """A node as the service shows it, with its GPUs and the jobs on them."""

    view: NodeView
    gpus: tuple[GpuCell, ...]


@dataclass(frozen=True, slots=True)
class JobLine:
    """A job row of the dashboard: the queue's columns plus where, how and how fast."""

    id: int
    name: str
    user: str
    state: str
    gpus: int
    where: str
    mechanism: str | None
    rate: float | None
    start_time: float | None
    end_time: float | None
    reason: str | None
    held: bool


@dataclass(frozen=True, slots=True)
class Frame:
    """Everything one refresh read: nodes, jobs, recent events and profile samples."""

    taken_at: float
    nodes: tuple[NodeLine, ...]
    jobs: tuple[JobLine, ...]
    events: tuple[EventView, ...]
    samples: dict[int, tuple[Sample, ...]]
    build_seconds: float

    def node(self, name: str) -> NodeLine | None:
        """The node called ``name`` in this frame, if any."""
        return next((n for n in self.nodes if n.view.name == name), None)

    def job(self, job_id: int) -> JobLine | None:
        """The job ``job_id`` in this frame, if listed."""
        return next((j for j in self.jobs if j.id == job_id), None)
