"""Starvation guard: whole nodes emptied, by suspend-and-requeue, for a job that waited too long.

Gandiva's placement serves whoever fits the GPUs that come free, and time
slicing keeps every GPU busy. A job that needs whole nodes (larger than a
node, or a node's size when no node has its affinity) cannot time-slice, and
an empty node is taken at once by any small job (step 2), so such a job can
wait behind a stream of smaller ones for ever.

Once it has waited ``after`` seconds, the guard picks the least loaded nodes
that together hold its GPUs (holding no job of higher priority), suspends
the jobs there back to the queue with their progress kept, and starts it.
The displaced jobs are placed again at once by Algorithm 1, which usually
means time slicing elsewhere. Suspending is cheap in Gandiva; waiting for
those nodes to drain would idle their GPUs instead.
"""

from __future__ import annotations

from gctl.core.decisions import Decision, Place, Requeue
from gctl.core.model import GpuRef, ShareMode
from gctl.core.placement import node_set
from gctl.core.state import ClusterState, JobState, NodeState


def needs_whole_nodes(state: ClusterState, count: int) -> bool:
    """Whether a ``count``-GPU job can only start on emptied nodes (never by time slicing)."""
    if count > state.max_size:
        return True
    return count == state.max_size and next(state.nodes_by_affinity(count), None) is None


def starving(state: ClusterState, now: float, after: float) -> JobState | None:
    """The first pending job (priority, then age) needing whole nodes that waited ``after``."""
    best: JobState | None = None
    for (_, count), bucket in state.pending.items():
        if not needs_whole_nodes(state, count):
            continue
        js = state.jobs[next(iter(bucket))]
        if now - js.since < after:
            continue
        if best is None or (-js.spec.priority, js.seq) < (-best.spec.priority, best.seq):
            best = js
    return best


def make_room(state: ClusterState, js: JobState, now: float) -> list[Decision]:
    """Requeue the jobs on the least loaded nodes that can hold ``js``, then start it there."""
    nodes = _victim_nodes(state, js)
    if nodes is None:
        return []
    waited_h = (now - js.since) / 3600
    names = ",".join(ns.name for ns in nodes)
    victims: dict[str, None] = {}
    for ns in nodes:
        for key in ns.groups:
            victims.update(dict.fromkeys(state.groups[key]))
    why = f"preempted: {names} emptied for job {js.id}, which waited {waited_h:.1f} h"
    out = state.commit([Requeue(v, why) for v in victims], now)
    gpus: list[GpuRef] = []
    for ns in nodes:
        part = node_set(ns, min(ns.free, js.spec.gpus - len(gpus)))
        if part is not None:
            gpus.extend(part)
    reason = f"waited {waited_h:.1f} h for whole nodes; {names} emptied for it"
    return out + state.commit([Place(js.id, tuple(sorted(gpus)), ShareMode.EXCLUSIVE, reason)], now)


def _victim_nodes(state: ClusterState, js: JobState) -> list[NodeState] | None:
    """Least loaded open nodes, with no job above ``js``'s priority, that hold its GPUs."""
    prio = js.spec.priority
    candidates = [
        ns
        for ns in state.nodes.values()
        if ns.open
        and all(state.jobs[m].spec.priority <= prio for k in ns.groups for m in state.groups[k])
    ]
    candidates.sort(key=lambda n: (n.load / n.size, -n.size, n.name))
    chosen: list[NodeState] = []
    room = 0
    for ns in candidates:
        if room >= js.spec.gpus:
            break
        chosen.append(ns)
        room += ns.size
    return chosen if room >= js.spec.gpus else None
