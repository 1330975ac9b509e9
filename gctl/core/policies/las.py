"""The 2D-LAS baseline (Tiresias): least attained service first, preemptive, exclusive GPUs.

On every event and pass, all unfinished jobs are ranked by priority, then
attained-service level, then arrival (:mod:`gctl.core.las`, with its
starvation promotion). Walking that order, each job that fits the GPUs not
yet given to better-ranked jobs is chosen (a job too big for what is left is
skipped, so smaller ones behind it still run); running jobs that were not
chosen are preempted (requeued, progress kept) and chosen waiting jobs start
on the tightest free set their size can get. A job keeps its GPUs for at
least ``quantum`` seconds, so two jobs never swap back and forth at every
event. It never time-slices, packs, migrates or resizes: it is the strongest
classic peer, not a Gandiva.
"""

from __future__ import annotations

from gctl.core import las, placement
from gctl.core.decisions import Decision, Place, Requeue
from gctl.core.model import JobStatus, ShareMode
from gctl.core.policy import PolicyOptionError
from gctl.core.state import ClusterState, JobState


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
    ) -> None:
        """Level options as gandiva's; ``quantum``: the least run before a preemption."""
        try:
            self.levels = las.Levels(levels, level_base, level_factor, promote_after)
        except (TypeError, ValueError) as exc:
            raise PolicyOptionError(f"las: {exc}") from None
        if quantum < 0:
            raise PolicyOptionError(f"las option quantum={quantum!r}: must be >= 0")
        self.quantum = float(quantum)
        self._passed: tuple[float, int] | None = None

    def schedule(self, state: ClusterState, now: float) -> list[Decision]:
        """Re-rank every job and hand the GPUs to the best-ranked ones that fit."""
        return self._pass(state, now)

    def introspect(self, state: ClusterState, now: float) -> list[Decision]:
        """The same pass: levels change with time as running jobs attain service."""
        out = self._pass(state, now)
        self._passed = (now, state.changes)
        return out

    def _pass(self, state: ClusterState, now: float) -> list[Decision]:
        levels = self.levels
        for js in state.jobs.values():
            if js.status is not JobStatus.RUNNING:
                levels.promote(js, now)
        rank = las.Ranking(levels, now)
        room = sum(ns.size for ns in state.nodes.values() if ns.open)
        ordered = sorted(state.jobs.values(), key=rank)
        keep: set[str] = set()
        for js in ordered:  # jobs within their quantum keep their GPUs whatever their rank
            if js.status is JobStatus.RUNNING and now - js.last_resumed < self.quantum:
                keep.add(js.id)
                room -= js.held
        chosen: list[JobState] = []
        for js in ordered:
            if js.id in keep:
                continue
            size = js.held or js.spec.gpus
            if size <= room:
                chosen.append(js)
                room -= size
        chosen_ids = {js.id for js in chosen} | keep
        out: list[Decision] = []
        for js in ordered:
            if js.gpus and js.id not in chosen_ids:
                why = f"preempted for jobs with less GPU time; {rank.describe(js)}"
                out += state.commit([Requeue(js.id, why)], now)
        for js in chosen:
            if js.status is not JobStatus.PENDING:
                continue
            gpus = placement.consolidated_set(state, js.spec.gpus)
            if gpus is None:
                continue
            out += state.commit([Place(js.id, gpus, ShareMode.EXCLUSIVE, rank.describe(js))], now)
        return out

    def wants_introspection(self, state: ClusterState) -> bool:
        """While jobs wait: ranks change as runners attain service and waiters age."""
        return bool(state.pending)

    def wake_at(self, state: ClusterState, now: float) -> float | None:
        """The next moment a pass could reorder jobs: a level crossing, a promotion, a quantum."""
        if not state.pending:
            return None
        passed = self._passed
        if passed is None or passed[1] != state.changes:
            return now
        levels = self.levels
        due: list[float] = []
        for js in state.jobs.values():
            if js.status is JobStatus.RUNNING:
                crossing = levels.crosses_at(js, now)
                if crossing is not None:
                    due.append(crossing)
                due.append(js.last_resumed + self.quantum)
            elif (promotion := levels.promote_at(js)) is not None:
                due.append(promotion)
        due = [t for t in due if t > passed[0]]
        return max(min(due), now) if due else None
