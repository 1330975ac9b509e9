"""FIFO with backfill, shipped as a plugin to show how policies are added.

Jobs are considered in arrival order; one that does not fit is skipped
instead of blocking the queue (no reservation for the head, unlike Slurm's
conservative backfill: gctl has no run-time estimates to plan with).
"""

from __future__ import annotations

from gctl.core.decisions import Decision, Place
from gctl.core.model import ShareMode
from gctl.core.placement import consolidated_set
from gctl.core.state import ClusterState


class BackfillPolicy:
    """Exclusive consolidated placement in arrival order, skipping jobs that do not fit."""

    name = "backfill"

    def schedule(self, state: ClusterState, now: float) -> list[Decision]:
        """Place every queued job that fits now, oldest first."""
        out: list[Decision] = []
        queued = sorted(
            (j for bucket in state.pending.values() for j in bucket),
            key=lambda j: state.jobs[j].seq,
        )
        for job_id in queued:
            if not state.total_free:
                break
            spec = state.jobs[job_id].spec
            gpus = consolidated_set(state, spec.gpus, frozenset(spec.datasets))
            if gpus is not None:
                place = Place(job_id, gpus, ShareMode.EXCLUSIVE, "backfill: fits now")
                out += state.commit([place], now)
        return out

    def introspect(self, state: ClusterState, now: float) -> list[Decision]:
        """Nothing to revisit."""
        return []

    def wants_introspection(self, state: ClusterState) -> bool:
        """Never."""
        return False
