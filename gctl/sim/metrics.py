"""Metrics of a simulation run: job completion times, delays, utilisation, decision counts.

Definitions (all times in seconds):

* **JCT** (job completion time) of a finished job is ``finish - submit``. The
  JCT statistics are taken over finished jobs only; jobs cut off by the end of
  the simulation do not count.
* **Percentiles** use linear interpolation between closest ranks, the
  "inclusive" method of :func:`statistics.quantiles` and NumPy's default: for
  ``n`` sorted values ``x[0..n-1]`` the ``q``-quantile is read at position
  ``q * (n - 1)``. So the median is the usual median, and the 100th percentile
  is the maximum. A single value is every one of its own percentiles.
* **Makespan** is the last finish minus the first submit (over all jobs, even
  those that never finished); ``0.0`` when no job finished.
* **Queueing delay** of a job that ran is ``first_run - submit``; it is
  averaged over jobs that ran (``first_run`` set), finished or not.
* **Time to first progress** is Gandiva's "early feedback" measure: how long a
  user waits before the job starts making progress. :class:`JobRecord` has a
  single field for that moment, ``first_run``, so here this is computed
  exactly like the queueing delay and the two are always equal. Both are kept
  so that reports name the quantity they mean, and so that a simulator which
  one day records the first placement apart from the first progress (a job
  placed and suspended at once, say) can tell them apart.
* **Per-job decision tallies**: :class:`Counters` also counts, for each job,
  the ``Suspend`` decisions taken on it (its *suspends*) and its *moves*, the
  decisions that take it off its GPUs for others: ``Migrate`` and
  ``Requeue``. A grow, a shrink or a pack is not a move here.
  :class:`JobRecord` carries both, so per-job reports can show them.
* **GPU utilisation** is busy GPU-seconds over ``total_gpus * makespan``; it
  is ``0.0`` when that capacity is zero. It is not clamped: a value above 1
  means the busy time passed in exceeds what the cluster could have done.

Every function is deterministic and uses only the standard library. Empty
inputs do not fail: every statistic is then ``0.0``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from gctl.core.decisions import (
    Grow,
    Migrate,
    Pack,
    Place,
    Queue,
    Requeue,
    Resume,
    Shrink,
    Suspend,
    Unpack,
)

__all__ = [
    "Counters",
    "JobRecord",
    "Metrics",
    "compare",
    "percentile",
    "relative_change",
    "summarize",
]


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What the simulator saw of one job.

    ``first_run`` is the first time the job made progress (``None`` if it never
    ran) and ``finish`` when it completed (``None`` if it never finished, e.g.
    because the simulation was cut off). A finished job must have run.
    ``suspends`` and ``moves`` are the job's decision tallies (see the module
    docstring and :meth:`Counters.of_job`).
    """

    job_id: str
    gpus: int
    submit: float
    first_run: float | None
    finish: float | None
    suspends: int = 0
    moves: int = 0

    def __post_init__(self) -> None:
        """Reject records that cannot describe a real job."""
        if self.gpus < 0:
            raise ValueError(f"job {self.job_id!r}: gpus must be >= 0, got {self.gpus}")
        if self.suspends < 0 or self.moves < 0:
            raise ValueError(
                f"job {self.job_id!r}: suspends and moves must be >= 0, got "
                f"{self.suspends} and {self.moves}"
            )
        if self.first_run is not None and self.first_run < self.submit:
            raise ValueError(
                f"job {self.job_id!r}: first_run {self.first_run} is before submit {self.submit}"
            )
        if self.finish is not None:
            if self.first_run is None:
                raise ValueError(f"job {self.job_id!r}: finished but never ran")
            if self.finish < self.first_run:
                raise ValueError(
                    f"job {self.job_id!r}: finish {self.finish} is before first_run "
                    f"{self.first_run}"
                )

    @property
    def jct(self) -> float | None:
        """Job completion time ``finish - submit``; ``None`` if unfinished."""
        return None if self.finish is None else self.finish - self.submit

    @property
    def queueing_delay(self) -> float | None:
        """Wait before first progress ``first_run - submit``, or ``None`` if it never ran."""
        return None if self.first_run is None else self.first_run - self.submit


_COUNTER_FIELD: dict[type, str] = {
    Place: "places",
    Queue: "queues",
    Suspend: "suspends",
    Resume: "resumes",
    Pack: "packs",
    Unpack: "unpacks",
    Migrate: "migrations",
    Grow: "grows",
    Shrink: "shrinks",
    Requeue: "requeues",
}

_JOB_MOVES = (Migrate, Requeue)
"""Decisions that count as a move of their job (see the module docstring)."""


@dataclass(slots=True)
class Counters:
    """How many decisions of each kind a run took, and per job its suspends and moves."""

    places: int = 0
    queues: int = 0
    suspends: int = 0
    resumes: int = 0
    packs: int = 0
    unpacks: int = 0
    migrations: int = 0
    grows: int = 0
    shrinks: int = 0
    requeues: int = 0
    per_job: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False, compare=False)
    """Job id to its ``(suspends, moves)``; only jobs with at least one of either."""
    packed: dict[str, None] = field(default_factory=dict, repr=False, compare=False)
    """Jobs that ran at the same time as another job on their GPUs (packed, or a turn pair);
    the simulator records them."""

    def count(self, decision: object) -> None:
        """Add one to the counter for ``decision``'s kind, and to its job's tally if it has one.

        Raises :class:`TypeError` if ``decision`` is not one of the decision
        types of :mod:`gctl.core.decisions`.
        """
        kind = type(decision)
        name = _COUNTER_FIELD.get(kind)
        if name is None:
            raise TypeError(f"not a scheduling decision: {kind.__qualname__}")
        setattr(self, name, getattr(self, name) + 1)
        if isinstance(decision, (Suspend, *_JOB_MOVES)):
            suspends, moves = self.per_job.get(decision.job_id, (0, 0))
            suspend = kind is Suspend
            self.per_job[decision.job_id] = (suspends + suspend, moves + (not suspend))

    def of_job(self, job_id: str) -> tuple[int, int]:
        """Return ``(suspends, moves)`` counted so far for ``job_id``; ``(0, 0)`` if none."""
        return self.per_job.get(job_id, (0, 0))

    def as_dict(self) -> dict[str, int]:
        """Return every decision counter by field name, in declaration order."""
        skip = ("per_job", "packed")
        return {f.name: int(getattr(self, f.name)) for f in fields(self) if f.name not in skip}


@dataclass(frozen=True, slots=True)
class Metrics:
    """Summary of a run; see the module docstring for the definitions."""

    jobs: int
    finished: int
    avg_jct: float
    median_jct: float
    p95_jct: float
    p99_jct: float
    makespan: float
    avg_queueing_delay: float
    avg_time_to_first_progress: float
    gpu_utilisation: float
    counts: dict[str, int]

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form: field names as keys in declaration order, counts as a nested dict."""
        out: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = dict(value) if f.name == "counts" else value
        return out


_NUMERIC_FIELDS: tuple[str, ...] = (
    "jobs",
    "finished",
    "avg_jct",
    "median_jct",
    "p95_jct",
    "p99_jct",
    "makespan",
    "avg_queueing_delay",
    "avg_time_to_first_progress",
    "gpu_utilisation",
)


def percentile(values: Sequence[float], q: float) -> float:
    """Return the ``q``-th percentile (``0 <= q <= 100``) of ``values``, interpolated linearly.

    Reads position ``q / 100 * (n - 1)`` of the sorted values and interpolates
    between its two neighbours (the "inclusive" method). Returns ``0.0`` for
    no values.
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {q}")
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = q / 100.0 * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    frac = pos - lo
    # Clamp so that rounding never carries the result past the upper neighbour;
    # this keeps percentiles monotone in ``q``.
    return min(ordered[lo] + (ordered[hi] - ordered[lo]) * frac, ordered[hi])


def _mean(values: Sequence[float]) -> float:
    """Return the arithmetic mean (``0.0`` for none), kept within [min, max] despite rounding."""
    if not values:
        return 0.0
    mean = math.fsum(values) / len(values)
    return min(max(mean, min(values)), max(values))


def summarize(
    records: Sequence[JobRecord],
    counters: Counters,
    busy_gpu_seconds: float,
    total_gpus: int,
) -> Metrics:
    """Summarise a run from its job records, decision counters and GPU busy time.

    ``busy_gpu_seconds`` is the GPU-time during which GPUs ran jobs and
    ``total_gpus`` the size of the cluster. Raises :class:`ValueError` for
    duplicate job ids or a negative ``busy_gpu_seconds`` or ``total_gpus``.
    """
    if busy_gpu_seconds < 0:
        raise ValueError(f"busy_gpu_seconds must be >= 0, got {busy_gpu_seconds}")
    if total_gpus < 0:
        raise ValueError(f"total_gpus must be >= 0, got {total_gpus}")
    seen: set[str] = set()
    for r in records:
        if r.job_id in seen:
            raise ValueError(f"duplicate job id {r.job_id!r}")
        seen.add(r.job_id)

    jcts = [r.jct for r in records if r.jct is not None]
    delays = [r.queueing_delay for r in records if r.queueing_delay is not None]
    finishes = [r.finish for r in records if r.finish is not None]

    makespan = max(finishes) - min(r.submit for r in records) if finishes else 0.0
    capacity = total_gpus * makespan
    utilisation = busy_gpu_seconds / capacity if capacity > 0 else 0.0
    avg_delay = _mean(delays)

    return Metrics(
        jobs=len(records),
        finished=len(jcts),
        avg_jct=_mean(jcts),
        median_jct=percentile(jcts, 50),
        p95_jct=percentile(jcts, 95),
        p99_jct=percentile(jcts, 99),
        makespan=makespan,
        avg_queueing_delay=avg_delay,
        avg_time_to_first_progress=avg_delay,
        gpu_utilisation=utilisation,
        counts=counters.as_dict(),
    )


def relative_change(base: float, new: float) -> float | None:
    """Return the relative change ``(new - base) / base``; ``None`` when ``base`` is zero.

    Positive means ``new`` is larger than a positive ``base``. All metrics here
    are non-negative, so for them the sign reads directly as up or down.
    """
    if base == 0:
        return None
    return (new - base) / base


def compare(base: Metrics, new: Metrics) -> dict[str, dict[str, float | None]]:
    """Compare two runs metric by metric.

    Returns, for each numeric field of :class:`Metrics` and then for each
    decision counter (keyed ``"counts.<name>"``), ``{"base": …, "new": …,
    "change": relative_change(base, new)}``. Keys come in a stable order.
    """
    pairs: list[tuple[str, float, float]] = [
        (name, float(getattr(base, name)), float(getattr(new, name))) for name in _NUMERIC_FIELDS
    ]
    for name in Counters().as_dict():
        pairs.append(
            (f"counts.{name}", float(base.counts.get(name, 0)), float(new.counts.get(name, 0)))
        )
    return {key: {"base": b, "new": n, "change": relative_change(b, n)} for key, b, n in pairs}
