"""The FIFO baseline: exclusive GPUs, first fit, strict arrival order, no preemption.

The head of the queue blocks everyone behind it until it fits, as in the
baselines of the Gandiva and Tiresias papers. It never suspends, packs,
migrates or resizes, so its introspective pass decides nothing.
"""

from __future__ import annotations

from gctl.core.decisions import Decision, Place
from gctl.core.model import GpuRef, ShareMode
from gctl.core.state import ClusterState, GroupKey


class FifoPolicy:
    """First-in first-out with first-fit GPU choice."""

    name = "fifo"

    def __init__(self, **options: object) -> None:
        """FIFO has no options; unknown ones are an error."""
        if options:
            raise TypeError(f"fifo takes no options, got {', '.join(sorted(options))}")

    def schedule(self, state: ClusterState, now: float) -> list[Decision]:
        """Place queued jobs in arrival order until the head does not fit."""
        out: list[Decision] = []
        for job_id in sorted(
            (j for bucket in state.pending.values() for j in bucket),
            key=lambda j: state.jobs[j].seq,
        ):
            gpus = first_fit(state, state.jobs[job_id].spec.gpus)
            if gpus is None:
                break
            out += state.commit([Place(job_id, gpus, ShareMode.EXCLUSIVE, "first fit")], now)
        return out

    def introspect(self, state: ClusterState, now: float) -> list[Decision]:
        """FIFO never revisits a placement."""
        return []

    def wants_introspection(self, state: ClusterState) -> bool:
        """Never: there is nothing to revisit."""
        return False


def first_fit(state: ClusterState, count: int) -> GroupKey | None:
    """The lowest-numbered free GPUs, on the first node that has enough, else across nodes."""
    if state.total_free < count:
        return None
    spill: list[GpuRef] = []
    for ns in state.nodes.values():
        if not ns.open or not ns.free:
            continue
        free = [(ns.name, i) for i in range(ns.size) if ns.free_mask >> i & 1]
        if len(free) >= count:
            return tuple(free[:count])
        spill.extend(free)
    return tuple(sorted(spill[:count])) if len(spill) >= count else None
