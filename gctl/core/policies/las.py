"""The 2D-LAS baseline (Tiresias): least attained service first, preemptive, exclusive GPUs.

On every event and pass, all unfinished jobs are ranked by priority, then
attained-service level, then size (fewer GPUs first) and arrival
(:mod:`gctl.core.las`, with its starvation promotion). Walking that order,
each job that fits the GPUs not yet given to better-ranked jobs is chosen (a
job too big for what is left is skipped, so smaller ones behind it still
run); running jobs that were not chosen are preempted (requeued, progress
kept) and chosen waiting jobs start on the tightest free set their size can
get. A job keeps its GPUs for at least ``quantum`` seconds, so two jobs never
swap back and forth at every event. It never time-slices, packs, migrates or
resizes: it is the strongest classic peer, not a Gandiva.

A waiting job's rank does not change while it waits, so the queue is kept
as one heap per job size, and a pass walks only as far into it as the GPUs
go: it costs the running jobs plus the jobs it starts, not the whole queue.
"""

from __future__ import annotations

import heapq

from gctl.core import las, placement
from gctl.core.decisions import Decision, Place, Requeue
from gctl.core.model import JobStatus, ShareMode
from gctl.core.policy import PolicyOptionError
from gctl.core.state import ClusterState, JobState

_Queued = tuple[las.Key, str]
"""(rank when queued, job id)."""


class LasPolicy:
    """Tiresias' discretised least-attained-service scheduler (2D-LAS)."""

    name = "las"

    def __init__(
        self,
        quantum: float = 60.0,
        levels: int = las.DEFAULT.count,
        level_base: float = las.DEFAULT.base,
        level_factor: float = las.DEFAULT.factor,
        promote_after: float = las.DEFAULT.promote_after,
        smaller_first: bool = True,
    ) -> None:
        """Level options as gandiva's; ``quantum``: the least run before a preemption.

        Within a level, jobs of fewer GPUs go first unless ``smaller_first``
        is false (:class:`las.Levels`).
        """
        try:
            self.levels = las.Levels(
                levels, level_base, level_factor, promote_after, smaller_first=smaller_first
            )
        except (TypeError, ValueError) as exc:
            raise PolicyOptionError(f"las: {exc}") from None
        if quantum < 0:
            raise PolicyOptionError(f"las option quantum={quantum!r}: must be >= 0")
        self.quantum = float(quantum)
        self._promotions = las.Promotions(self.levels)
        self._ranks: las.Waiting = {}
        self._queues: dict[int, list[_Queued]] = {}
        self._model: ClusterState | None = None
        self._node_events = 0
        self._seen = 0
        self._passed: tuple[float, ClusterState, int] | None = None

    def schedule(self, state: ClusterState, now: float) -> list[Decision]:
        """Re-rank the jobs and hand the GPUs to the best-ranked ones that fit."""
        return self._pass(state, now)

    def introspect(self, state: ClusterState, now: float) -> list[Decision]:
        """The same pass: levels change with time as running jobs attain service."""
        out = self._pass(state, now)
        self._passed = (now, state, state.changes)
        return out

    # ---- the queue -----------------------------------------------------

    def _sync(self, state: ClusterState, rank: las.Ranking) -> None:
        """Queue the jobs that arrived since the last pass (every waiting job of a new model)."""
        if self._model is not state or self._node_events != state.node_events:
            self._model, self._node_events = state, state.node_events
            self._queues, self._seen = {}, 0
            fresh = [js for js in state.jobs.values() if js.status is JobStatus.PENDING]
        else:
            fresh = []
            for js in reversed(state.jobs.values()):  # newest first: stop at the known
                if js.seq <= self._seen:
                    break
                fresh.append(js)
        self._seen = max([self._seen, *(js.seq for js in fresh)])
        self._queue(fresh, rank)

    def _queue(self, jobs: list[JobState], rank: las.Ranking) -> None:
        for js in jobs:
            if js.status is JobStatus.PENDING and not js.opportunistic:
                heapq.heappush(self._queues.setdefault(js.spec.gpus, []), (rank(js), js.id))

    @staticmethod
    def _current(state: ClusterState, entry: _Queued, rank: las.Ranking) -> JobState | None:
        """The job of a queue entry, if it still waits with that rank."""
        js = state.jobs.get(entry[1])
        if js is None or js.status is not JobStatus.PENDING or rank(js) != entry[0]:
            return None
        return js

    def _best_waiting(
        self, state: ClusterState, room: int, rank: las.Ranking, taken: set[str]
    ) -> tuple[las.Key, int] | None:
        """(rank, size) of the best-ranked waiting job that fits ``room`` GPUs, if any."""
        best: tuple[las.Key, int] | None = None
        for size, queue in self._queues.items():
            if size > room:
                continue
            while queue and (queue[0][1] in taken or self._current(state, queue[0], rank) is None):
                heapq.heappop(queue)
            if queue and (best is None or queue[0][0] < best[0]):
                best = (queue[0][0], size)
        return best

    # ---- the pass ------------------------------------------------------

    def _pass(self, state: ClusterState, now: float) -> list[Decision]:
        promoted = self._promotions.promote(state, now)
        self._ranks = las.forget_finished(self._ranks, state)
        rank = las.Ranking(self.levels, now, self._ranks)
        self._sync(state, rank)
        self._queue(promoted, rank)
        room = sum(ns.size for ns in state.nodes.values() if ns.open)
        running = [state.jobs[m] for members in state.groups.values() for m in members]
        others: list[JobState] = []
        for js in running:  # jobs within their quantum keep their GPUs whatever their rank
            if now - js.last_resumed < self.quantum:
                room -= js.held
            else:
                others.append(js)
        others.sort(key=rank)
        keep: set[str] = set()
        start: list[JobState] = []
        taken: set[str] = set()
        i = 0
        while True:
            waiting = self._best_waiting(state, room, rank, taken) if room > 0 else None
            runner = others[i] if i < len(others) else None
            if runner is None and waiting is None:
                break
            if runner is not None and (waiting is None or rank(runner) < waiting[0]):
                i += 1
                if runner.held <= room:
                    keep.add(runner.id)
                    room -= runner.held
                continue
            assert waiting is not None
            _, job_id = heapq.heappop(self._queues[waiting[1]])
            js = state.jobs[job_id]
            taken.add(job_id)
            start.append(js)
            room -= waiting[1]
        out: list[Decision] = []
        preempted = [js for js in others if js.id not in keep]
        for js in preempted:
            why = f"preempted for jobs with less GPU time; {rank.describe(js)}"
            out += state.commit([Requeue(js.id, why)], now)
        unplaced: list[JobState] = []
        for js in start:
            gpus = placement.consolidated_set(state, js.spec.gpus, frozenset(js.spec.datasets))
            if gpus is None:
                unplaced.append(js)
                continue
            out += state.commit([Place(js.id, gpus, ShareMode.EXCLUSIVE, rank.describe(js))], now)
        self._queue(preempted + unplaced, rank)
        self._promotions.watch(state, (js.id for js in preempted))
        return out

    def wants_introspection(self, state: ClusterState) -> bool:
        """While jobs wait: ranks change as runners attain service and waiters age."""
        return bool(state.pending)

    def wake_at(self, state: ClusterState, now: float) -> float | None:
        """The next moment a pass could reorder jobs: a level crossing, a promotion, a quantum."""
        if not state.pending:
            return None
        passed = self._passed
        if passed is None or passed[1] is not state or passed[2] != state.changes:
            return now
        levels = self.levels
        promotion = self._promotions.next_due(state)
        due = [] if promotion is None else [promotion]
        for members in state.groups.values():
            for m in members:
                js = state.jobs[m]
                crossing = levels.crosses_at(js, now)
                if crossing is not None:
                    due.append(crossing)
                due.append(js.last_resumed + self.quantum)
        due = [t for t in due if t > passed[0]]
        return max(min(due), now) if due else None
