"""The FIFO baseline: exclusive GPUs, consolidated placement, strict arrival order.

The head of the queue blocks everyone behind it until it fits, as in the
baselines of the Gandiva and Tiresias papers. Each job gets the tightest set
its size can get (one node when any fits, best fit, best-linked GPUs; else
the fewest nodes), as Tiresias' consolidated placement does, so a policy
that beats it does so by scheduling, not by a careless baseline paying a
locality slow-down. It never preempts, suspends, packs, migrates or
resizes, so its introspective pass decides nothing.
"""

from __future__ import annotations

from gctl.core.decisions import Decision, Place
from gctl.core.model import ShareMode
from gctl.core.placement import consolidated_set
from gctl.core.state import ClusterState


class FifoPolicy:
    """First-in first-out with consolidated GPU choice."""

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
            spec = state.jobs[job_id].spec
            gpus = consolidated_set(state, spec.gpus, frozenset(spec.datasets))
            if gpus is None:
                break
            nodes = ",".join(dict.fromkeys(n for n, _ in gpus))
            why = f"first in line; tightest free set on {nodes}"
            out += state.commit([Place(job_id, gpus, ShareMode.EXCLUSIVE, why)], now)
        return out

    def introspect(self, state: ClusterState, now: float) -> list[Decision]:
        """FIFO never revisits a placement."""
        return []

    def wants_introspection(self, state: ClusterState) -> bool:
        """Never: there is nothing to revisit."""
        return False

    def steady(self) -> bool:
        """Yes: it only ever places waiting jobs."""
        return True
