"""The scheduler's vocabulary: GPUs, nodes, job specs, observed profiles and allocations.

Everything here is an immutable value. The mutable working model a policy
reasons over lives in :mod:`gctl.core.state`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum


class Priority(IntEnum):
    """Job priority: a job is never suspended to make room for a lower one."""

    LOW = 0
    NORMAL = 1
    HIGH = 2


class JobClass(StrEnum):
    """TGS job class: production jobs are protected, opportunistic ones use what is left."""

    PRODUCTION = "production"
    OPPORTUNISTIC = "opportunistic"


class ShareMode(StrEnum):
    """How a job holds its GPUs."""

    EXCLUSIVE = "exclusive"
    PACKED = "packed"
    TIMESLICED = "time-sliced"
    OPPORTUNISTIC = "opportunistic"
    """An opportunistic job: on idle GPUs or beside a production job, evicted when needed."""


class JobStatus(StrEnum):
    """Where a job is in its life, as the scheduler sees it."""

    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class GPU:
    """One GPU of a node and where it sits in the node's topology.

    ``nvlink`` lists ``(peer index, link count)`` pairs.
    """

    index: int
    type: str = "V100"
    memory_mb: int = 16384
    socket: int = 0
    pcie_switch: int = 0
    nvlink: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Node:
    """A server with its GPUs."""

    name: str
    gpus: tuple[GPU, ...]

    @property
    def size(self) -> int:
        """Number of GPUs on the node."""
        return len(self.gpus)


GpuRef = tuple[str, int]
"""A GPU named by ``(node name, GPU index)``."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a user asked for.

    ``elastic_min``/``elastic_max`` are set only for elastic jobs; ``gpus`` is
    the count the job starts with. A job that cannot checkpoint
    (``can_checkpoint`` false) is only ever frozen in place: never migrated,
    packed onto other GPUs or resized.
    """

    id: str
    gpus: int
    submit_time: float = 0.0
    priority: Priority = Priority.NORMAL
    job_class: JobClass = JobClass.PRODUCTION
    elastic_min: int | None = None
    elastic_max: int | None = None
    gpu_mem_mb: int | None = None
    datasets: tuple[str, ...] = ()
    profile: str | None = None
    name: str = ""
    user: str = ""
    can_checkpoint: bool = True

    def __post_init__(self) -> None:
        """Reject specs no scheduler could honour."""
        if self.gpus < 1:
            raise ValueError(f"job {self.id}: gpus must be >= 1, got {self.gpus}")
        if (self.elastic_min is None) != (self.elastic_max is None):
            raise ValueError(f"job {self.id}: elastic range needs both min and max")
        lo, hi = self.elastic_min, self.elastic_max
        if lo is not None and hi is not None and not 1 <= lo <= self.gpus <= hi:
            raise ValueError(
                f"job {self.id}: elastic range {lo}:{hi} must contain gpus={self.gpus}"
            )

    @property
    def elastic(self) -> bool:
        """Whether the job may be grown or shrunk."""
        return self.elastic_min is not None


@dataclass(frozen=True, slots=True)
class Observed:
    """A profile sample: GPU utilisation (0..1), GPU memory, progress rate.

    ``progress_rate`` is mini-batches per second as the job reports it; the
    scheduler only ever compares a job's rate with its own earlier rates.
    ``since`` is when the window the rate was measured over began (None: a
    rate of the moment ``at``).
    """

    at: float
    gpu_util: float
    gpu_mem_mb: int
    progress_rate: float
    since: float | None = None

    @property
    def measured_from(self) -> float:
        """When the measurement began: a rate measures only what ran from then on."""
        return self.at if self.since is None else self.since


@dataclass(frozen=True, slots=True)
class Allocation:
    """The GPUs a job holds and how it holds them."""

    job_id: str
    gpus: tuple[GpuRef, ...]
    mode: ShareMode = ShareMode.EXCLUSIVE

    @property
    def nodes(self) -> tuple[str, ...]:
        """Distinct nodes the allocation spans, in order of first appearance."""
        return tuple(dict.fromkeys(node for node, _ in self.gpus))


@dataclass(frozen=True, slots=True)
class Cluster:
    """A set of nodes, the input to build a :class:`~gctl.core.state.ClusterState`."""

    nodes: tuple[Node, ...] = field(default_factory=tuple)

    @property
    def total_gpus(self) -> int:
        """GPUs across every node."""
        return sum(n.size for n in self.nodes)
