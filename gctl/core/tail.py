"""The makespan guard: a job whose remaining work outlasts the whole backlog runs now.

Least attained service holds long jobs back behind every shorter one. While
work keeps arriving that is what finishes short jobs soonest, but a long job
held back until the queue drains then runs alone to the end, on an
otherwise idle cluster, and sets the makespan (on trace2, 32x8: a 1-GPU job
with 40 days of work that had 1.8 days of service in its first 61 days).

Where the driver knows the fraction of each job's work done
(:attr:`ClusterState.work_done`: the simulator from its model, the daemon
from the job SDK's step/steps), a job's remaining work is estimated from
the service it had: ``attained x (1 - done) / done`` GPU-seconds, so a job
slowed by sharing counts as the slower. The backlog's *drain time* is all
the jobs' estimated remaining work over the GPUs of the nodes that are up.
A job whose estimated remaining time on its own GPUs is at least the drain
time is *critical*: every hour it does not run, the last job's end moves an
hour later, whatever else runs. The longest critical jobs, up to ``share``
of the GPUs (the longest always, whatever its size), are the ones the
policy chooses; their service then counts again from zero, as a promoted
job's does (:class:`gctl.core.las.Levels`), so they go back to the first
level. Jobs whose fraction done is not known (not using the SDK, or not
yet run) are never critical and count in no drain time.
"""

from __future__ import annotations

from dataclasses import dataclass

from gctl.core.state import ClusterState

HOUR = 3600.0
DAY = 86400.0


@dataclass(frozen=True, slots=True)
class Critical:
    """Why a job is critical: its estimated remaining time, and the backlog's drain time."""

    remaining: float
    """Seconds of work left on its own GPUs, as estimated."""
    drain: float
    """Seconds the whole backlog needs on every GPU that is up."""

    def describe(self) -> str:
        """For reasons and ``gctl why``."""
        return (
            f"tail guard: about {_span(self.remaining)} of work left,"
            f" more than the {_span(self.drain)} the whole queue needs"
        )


def _span(seconds: float) -> str:
    """A span in days from two days up, else in hours."""
    return f"{seconds / DAY:.1f} days" if seconds >= 2 * DAY else f"{seconds / HOUR:.1f} hours"


def critical(
    state: ClusterState, now: float, share: float, at_least: float = 0.0
) -> dict[str, Critical]:
    """The critical jobs the guard chooses, longest first, and why (module docstring).

    A job with less than ``at_least`` seconds of work left is never chosen:
    the policy passes its period between two choices, since a backlog that
    drains before the next one leaves no long tail to guard against.
    """
    done = state.work_done
    capacity = sum(ns.node.size for ns in state.nodes.values() if ns.up)
    if done is None or not capacity:
        return {}
    estimates: list[tuple[float, str, int]] = []
    total = 0.0
    for js in state.jobs.values():
        attained = js.attained_at(now)
        if attained <= 0.0:
            continue  # never ran (most of a long queue): nothing known
        fraction = done(js.id)
        if fraction is None or not 0.0 < fraction < 1.0:
            continue
        remaining = attained * (1.0 - fraction) / fraction
        total += remaining
        gpus = max(js.spec.gpus, 1)
        estimates.append((remaining / gpus, js.id, gpus))
    drain = total / capacity
    out: dict[str, Critical] = {}
    held = 0
    for remaining, job_id, gpus in sorted(estimates, reverse=True):
        if remaining < max(drain, at_least):
            break
        if out and held + gpus > share * capacity:
            continue
        held += gpus
        out[job_id] = Critical(remaining, drain)
    return out
