"""Least attained service: ranking jobs by the GPU time they have had, in a few levels.

Deep-learning job lengths are heavy-tailed and unknown in advance, so the
job that has had the least service (GPUs x time run, :meth:`JobState.attained_at`)
is the best guess for the one that finishes soonest. Ranking by attained
service finishes short jobs far sooner than round robin or FIFO, as
Tiresias' 2D-LAS does, and that ranking is what this module provides.

Service is discretised into *levels*: level 0 holds jobs below the first
threshold (``base`` GPU-seconds), level ``i`` jobs below ``base x factor^i``,
the last level everything above. Within a level jobs keep arrival order
(FIFO), so a job is not preempted by one that merely has a few seconds less
service; with ``smaller_first`` jobs of fewer GPUs come first within a
level, then arrival order. That is gctl's addition to Tiresias: a level's
bound is GPU-seconds, so a small job of a level has run longer and is
likelier to finish soon, and it frees the fewer GPUs to wait for. The
stand-alone ``las`` policy uses it (on the bundled trace3, 8x8, plain model
it takes the average JCT from 297,626 s to 287,778 s); gandiva does not by
default (in the full model it costs trace1 9 points of makespan under
FIFO). Priorities come first: a high-priority job outranks every normal one.

Starvation guard: a waiting job (queued or suspended) whose wait reaches
``promote_after`` times its run time so far (attained service over its GPUs,
at least ``min_service``) is *promoted*: its service is counted again from
zero (:attr:`JobState.service_base`), so it re-enters level 0 and climbs the
levels again, as Tiresias does. That bounds how long a long job can be held
behind a stream of short ones.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from gctl.core.model import JobStatus
from gctl.core.state import ClusterState, GroupKey, JobState

HOUR = 3600.0

Key = tuple[int, int, int, int]
"""A job's sort key: (-priority, level, size term, arrival); see :meth:`Levels.rank`."""


@dataclass(frozen=True, slots=True)
class Levels:
    """Level thresholds and the starvation guard of a least-attained-service ranking."""

    count: int = 3
    base: float = 3600.0
    factor: float = 10.0
    promote_after: float = 8.0
    min_service: float = 3600.0
    smaller_first: bool = False
    """Within a level, jobs of fewer GPUs first (then arrival order)."""
    thresholds: tuple[float, ...] = field(init=False)
    """Upper bounds of levels 0 .. count-2, in GPU-seconds."""

    def __post_init__(self) -> None:
        """Refuse a ranking that could not order jobs; work out the thresholds."""
        if self.count < 1:
            raise ValueError(f"levels must be >= 1, got {self.count}")
        if self.base <= 0 or self.factor <= 1:
            raise ValueError("level thresholds need base > 0 and factor > 1")
        if self.promote_after < 0 or self.min_service < 0:
            raise ValueError("the starvation guard needs promote_after and min_service >= 0")
        bounds = tuple(self.base * self.factor**i for i in range(self.count - 1))
        object.__setattr__(self, "thresholds", bounds)

    def service(self, js: JobState, now: float) -> float:
        """GPU-seconds that rank ``js``: attained since its last promotion."""
        return js.attained_at(now) - js.service_base

    def level(self, js: JobState, now: float) -> int:
        """The level ``js`` is in now (0 = least service)."""
        return bisect_right(self.thresholds, self.service(js, now))

    def rank(self, js: JobState, now: float) -> Key:
        """Sort key: priority (higher first), level, size (``smaller_first``), arrival."""
        return (-int(js.spec.priority), self.level(js, now), self.size_term(js.spec.gpus), js.seq)

    def size_term(self, gpus: int) -> int:
        """The size part of a sort key: the GPU count with ``smaller_first``, else 0."""
        return gpus if self.smaller_first else 0

    def crosses_at(self, js: JobState, now: float) -> float | None:
        """When a running ``js`` enters its next level, or None (not running, or last level)."""
        if js.status is not JobStatus.RUNNING or not js.gpus:
            return None
        service = self.service(js, now)
        for bound in self.thresholds:
            if service < bound:
                return now + (bound - service) / len(js.gpus)
        return None

    def promote_at(self, js: JobState) -> float | None:
        """When a waiting ``js`` is due for promotion, or None (running, or at level 0)."""
        if js.status is JobStatus.RUNNING or self.level(js, js.since) == 0:
            return None
        run_time = max(js.attained / max(js.spec.gpus, 1), self.min_service)
        return js.since + self.promote_after * run_time

    def promote(self, js: JobState, now: float) -> bool:
        """Promote a waiting ``js`` to level 0 when it is due; whether it was."""
        due = self.promote_at(js)
        if due is None or now < due:
            return False
        js.service_base = js.attained_at(now)
        return True

    def describe(self, js: JobState, now: float, note: str | None = None) -> str:
        """Where ``js`` stands, for reasons and ``gctl why``: level, service, promotion.

        ``note`` says why the job's service counts from a later moment, in
        place of the starvation guard's promotion.
        """
        hours = js.attained_at(now) / HOUR
        text = f"level {self.level(js, now) + 1} of {self.count}: {hours:.1f} GPU-hours attained"
        if note:
            return f"{text}, {note}"
        return text + (", promoted after a long wait" if js.service_base else "")


DEFAULT = Levels()
"""The default levels: 1 and 10 GPU-hours, promotion after waiting 8x the run time."""


Waiting = dict[str, tuple[float, float, Key]]
"""Sort keys of waiting jobs by job id, with the attained service and base they were taken at."""

_T = TypeVar("_T")


def forget_finished(kept: dict[str, _T], state: ClusterState) -> dict[str, _T]:
    """``kept`` (what a policy remembers per job), without the jobs gone, once it has grown."""
    if len(kept) > 2 * len(state.jobs) + 1024:
        return {j: k for j, k in kept.items() if j in state.jobs}
    return kept


@dataclass(frozen=True, slots=True)
class Ranking:
    """:class:`Levels` frozen at one moment: a sort key for jobs, and their description.

    Keys are remembered per job: at a fixed moment a job's attained service
    does not change with the decisions taken then, so one pass ranks each
    job once. A waiting job's key does not change while it waits, so keys
    of waiting jobs are kept across passes in ``waiting`` (give each
    :class:`Ranking` of one policy the same dict). Promote jobs before
    ranking them.
    """

    levels: Levels
    now: float
    waiting: Waiting = field(default_factory=dict, compare=False)
    standings: Standings | None = field(default=None, compare=False)
    """Summaries of the GPU sets kept across passes, if the policy keeps them."""
    notes: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Why the service of some jobs counts from a later moment, by job id (see
    :meth:`Levels.describe`)."""
    _keys: dict[str, Key] = field(default_factory=dict, compare=False)

    def __call__(self, js: JobState) -> Key:
        """The sort key of ``js`` (see :meth:`Levels.rank`)."""
        key = self._keys.get(js.id)
        if key is not None:
            return key
        if js.status is JobStatus.RUNNING:
            key = self._keys[js.id] = self.levels.rank(js, self.now)
            return key
        kept = self.waiting.get(js.id)
        if (
            kept is not None
            and kept[0] == js.attained
            and kept[1] == js.service_base
            and kept[2][0] == -int(js.spec.priority)
            and kept[2][3] == js.seq  # a model loaded afresh numbers its jobs anew
        ):
            key = kept[2]
        else:
            key = self.levels.rank(js, self.now)
            self.waiting[js.id] = (js.attained, js.service_base, key)
        self._keys[js.id] = key
        return key

    def level(self, js: JobState) -> int:
        """The level of ``js`` (see :meth:`Levels.level`)."""
        return self(js)[1]

    def best(self, state: ClusterState, key: GroupKey) -> str:
        """The best-ranked job on GPU set ``key``."""
        if self.standings is not None:
            return self.standings.entry(state, key, self).best
        return min((state.jobs[m] for m in state.groups[key]), key=self).id

    def describe(self, js: JobState) -> str:
        """Where ``js`` stands (see :meth:`Levels.describe`)."""
        return self.levels.describe(js, self.now, self.notes.get(js.id))


_Entry = tuple[float, str, float, float, float]
"""(when due, job id, and the job's since, attained and service base when noted)."""


class Promotions:
    """The starvation guard's bookkeeping: waiting jobs by when they are due for promotion.

    A waiting job's due time does not change while it waits, so each is
    noted once (:meth:`watch`) and promotion is a look at the earliest
    (:meth:`promote`), not a scan of the queue. Entries of jobs that ran or
    finished since are dropped when they come up. A model not seen before
    (the daemon loads one every pass) or a node gone down (its jobs are
    requeued) is scanned whole.
    """

    def __init__(self, levels: Levels) -> None:
        """No job noted yet."""
        self.levels = levels
        self.promoted = 0
        """Promotions made so far: a change means rankings changed."""
        self._heap: list[_Entry] = []
        self._model: ClusterState | None = None
        self._node_events = 0

    def watch(self, state: ClusterState, jobs: Iterable[str]) -> None:
        """Note the jobs among ``jobs`` that wait, and every waiting job of a new model."""
        if self._model is not state or self._node_events != state.node_events:
            self._model, self._node_events = state, state.node_events
            self._heap = []
            jobs = state.jobs
        for job_id in jobs:
            js = state.jobs.get(job_id)
            if js is not None and js.status is not JobStatus.RUNNING:
                due = self.levels.promote_at(js)
                if due is not None:
                    heapq.heappush(self._heap, (due, js.id, js.since, js.attained, js.service_base))

    def promote(self, state: ClusterState, now: float) -> list[JobState]:
        """Promote every noted job due by ``now`` that still waits as it did; those promoted."""
        self.watch(state, ())
        heap = self._heap
        out: list[JobState] = []
        while heap and heap[0][0] <= now:
            js = self._still_waiting(state, heapq.heappop(heap))
            if js is not None and self.levels.promote(js, now):
                self.promoted += 1
                out.append(js)
        return out

    def next_due(self, state: ClusterState) -> float | None:
        """When the next noted job that still waits is due, if any."""
        heap = self._heap
        while heap and self._still_waiting(state, heap[0]) is None:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    @staticmethod
    def _still_waiting(state: ClusterState, entry: _Entry) -> JobState | None:
        _, job_id, since, attained, base = entry
        js = state.jobs.get(job_id)
        if js is None or js.status is JobStatus.RUNNING:
            return None
        return js if (js.since, js.attained, js.service_base) == (since, attained, base) else None


@dataclass(slots=True)
class _Standing:
    stamp: int
    """:attr:`ClusterState.touched` of the set when summarised."""
    until: float
    """When a job running on it enters its next level (the summary expires)."""
    bar: tuple[int, int] | None
    weight: float
    peaks: dict[int, int]
    best: str
    """The best-ranked job on the set."""


class Standings:
    """The GPU sets in use, summarised for displacement, kept from pass to pass.

    A set's *standing* is the best (priority, -level) among its jobs: it
    yields to a waiting job that outranks every job on it, and never when
    one of its jobs cannot checkpoint. Its *weight* (the sum over its jobs
    of ``count - level``) makes jobs of higher levels, which have had more
    GPU time, the first displaced. A summary holds while the set's jobs and
    their states are as they were (:attr:`ClusterState.touched`), no job
    running on it crossed into another level, and none of its jobs was
    promoted (:meth:`forget`), so a pass summarises the sets that changed,
    not every set, and none when nothing changed at all
    (:attr:`ClusterState.changes`) since the last update and no summary expired.
    """

    def __init__(self) -> None:
        """Nothing summarised yet."""
        self._state: ClusterState | None = None
        self._sets: dict[GroupKey, _Standing] = {}
        self._updated: tuple[int, float] | None = None
        """The model's change count and the moment of the last full :meth:`update`."""
        self._until: float | None = None
        """The earliest expiry of the summaries, once worked out since they last changed."""

    def update(self, state: ClusterState, rank: Ranking) -> None:
        """Bring the summaries up to date with ``state`` at the moment of ``rank``."""
        now = rank.now
        if state is not self._state:
            self._state, self._sets = state, {}
        elif (
            self._updated is not None
            and self._updated[0] == state.changes
            and (self._updated[1] == now or (self._until is not None and now < self._until))
        ):
            return  # the model is unchanged since the last update, and no summary expired
        self._updated, self._until = (state.changes, now), None
        kept, touched = self._sets, state.touched
        for key in state.groups:  # :meth:`entry`, inlined: this loop is the simulator's hottest
            entry = kept.get(key)
            if entry is None or entry.stamp != touched[key] or entry.until <= now:
                kept[key] = self._summarise(state, key, rank)
        if len(kept) > len(state.groups):
            for key in [k for k in kept if k not in state.groups]:
                del kept[key]

    def entry(self, state: ClusterState, key: GroupKey, rank: Ranking) -> _Standing:
        """The summary of set ``key`` as of ``rank``, summarised afresh when it expired."""
        if state is not self._state:  # the daemon loads a model afresh every pass
            self._state, self._sets, self._updated = state, {}, None
        entry = self._sets.get(key)
        if entry is None or entry.stamp != state.touched[key] or entry.until <= rank.now:
            entry = self._sets[key] = self._summarise(state, key, rank)
            self._until = None
        return entry

    def next_crossing(self) -> float | None:
        """When the first job running on a set summarised enters its next level, if one will."""
        if self._until is None:
            self._until = min((entry.until for entry in self._sets.values()), default=math.inf)
        return None if self._until == math.inf else self._until

    def forget(self, key: GroupKey) -> None:
        """Summarise set ``key`` afresh next time (one of its jobs was promoted)."""
        self._sets.pop(key, None)
        self._updated = self._until = None

    def top(self) -> dict[int, int]:
        """The highest level of a job that can checkpoint on GPUs, by priority."""
        out: dict[int, int] = {}
        for entry in self._sets.values():
            for prio, level in entry.peaks.items():
                if level > out.get(prio, -1):
                    out[prio] = level
        return out

    def yielding_to(self, prio: int, level: int) -> Callable[[GroupKey], bool]:
        """Whether a set yields to a waiting job of ``prio`` at ``level``."""
        bar = (prio, -level)
        kept = self._sets

        def yields(key: GroupKey) -> bool:
            held = kept[key].bar
            return held is not None and held < bar

        return yields

    def weight(self, key: GroupKey) -> float:
        """What displacing the jobs of set ``key`` costs, per GPU."""
        return self._sets[key].weight

    @staticmethod
    def _summarise(state: ClusterState, key: GroupKey, rank: Ranking) -> _Standing:
        levels = rank.levels
        bar: tuple[int, int] | None = (-(2**31), 0)
        weight = 0.0
        until = math.inf
        peaks: dict[int, int] = {}
        best: tuple[Key, str] | None = None
        for m in state.groups[key]:
            js = state.jobs[m]
            ranked = rank(js)
            level = ranked[1]
            if best is None or ranked < best[0]:
                best = (ranked, m)
            weight += levels.count - level
            crossing = levels.crosses_at(js, rank.now)
            if crossing is not None:
                until = min(until, crossing)
            if not js.spec.can_checkpoint:
                bar = None
                continue
            prio = int(js.spec.priority)
            peaks[prio] = max(level, peaks.get(prio, -1))
            if bar is not None:
                bar = max(bar, (prio, -level))
        assert best is not None, f"GPU set {key} has no jobs"
        return _Standing(state.touched[key], until, bar, weight, peaks, best[1])


class Order:
    """One pending bucket in rank order (level, then arrival), kept up to date by difference.

    A waiting job's level is fixed while it waits, so only the jobs queued
    since the last look are ranked: each entry of a bucket carries the stamp
    of its queueing, so a job requeued since counts as taken and queued
    again. A promoted job is ranked again when it is promoted
    (:meth:`rerank`); a model not seen before is ordered afresh.
    """

    def __init__(self, levels: Levels) -> None:
        """Nothing ordered yet."""
        self.levels = levels
        self._seen: tuple[ClusterState | None, int] = (None, -1)
        self._at: dict[str, tuple[int, int, str]] = {}
        self._entries: list[tuple[int, int, str]] = []

    def entries(self, state: ClusterState, key: tuple[int, int]) -> list[tuple[int, int, str]]:
        """The bucket's jobs as (level, arrival, job id), best first; do not change the list."""
        bucket = state.pending[key]
        model, stamp = self._seen
        if model is not state:
            self._at, self._entries, stamp = {}, [], -1
        elif stamp == state.queued[key]:
            return self._entries
        at = self._at
        # Queued since the last look: stamped after it (a job requeued since included).
        fresh = [j for j, queued in bucket.items() if queued > stamp]
        for job_id in [*(at.keys() - bucket.keys()), *(j for j in fresh if j in at)]:
            self._drop(job_id)
        for job_id in fresh:
            self._add(state.jobs[job_id])
        self._seen = (state, state.queued[key])
        return self._entries

    def rerank(self, js: JobState) -> None:
        """Rank a job of the bucket again: it was promoted."""
        if js.id in self._at:
            self._drop(js.id)
            self._add(js)

    def _drop(self, job_id: str) -> None:
        del self._entries[bisect_left(self._entries, self._at.pop(job_id))]

    def _add(self, js: JobState) -> None:
        entry = self._at[js.id] = (self.levels.level(js, js.since), js.seq, js.id)
        insort(self._entries, entry)
