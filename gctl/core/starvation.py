"""Starvation guard: smaller jobs requeued to make room for a job that waited too long.

Gandiva's placement serves whoever fits the GPUs that come free, and time
slicing keeps every GPU busy. A job that cannot time-slice (larger than a
node, or no node has its affinity) needs GPUs to come free together, and
freed GPUs are taken at once by smaller jobs, so such a job can wait behind
a stream of smaller ones for ever.

Once it has waited ``after`` seconds, the guard suspends back to the queue,
with their progress kept, the jobs holding the GPUs it needs, and starts it
there. Only jobs asking for fewer GPUs than it (and of no higher priority)
are displaced: they can start again on the GPUs of jobs smaller still, so a
job the guard started is never displaced for one of its own size and no two
starving jobs take turns emptying each other's GPUs. A job larger than a
node gets the least loaded whole nodes; a smaller one the GPU set of one
node that displaces the least work. The displaced jobs are placed again at
once by Algorithm 1, which usually means time slicing elsewhere. Suspending
is cheap in Gandiva; waiting for those GPUs to drain would idle them instead.
"""

from __future__ import annotations

from gctl.core.decisions import Decision, Place, Requeue
from gctl.core.model import GpuRef, ShareMode
from gctl.core.state import ClusterState, GroupKey, JobState, NodeState


def cannot_share(state: ClusterState, count: int) -> bool:
    """Whether a ``count``-GPU job can only start on free GPUs (never by time slicing)."""
    if count > state.max_size:
        return True
    return next(state.nodes_by_affinity(count), None) is None


def starving(state: ClusterState, now: float, after: float) -> JobState | None:
    """The first pending job (priority, then age) that cannot time-slice and waited ``after``."""
    best: JobState | None = None
    for (_, count), bucket in state.pending.items():
        if count == 1 or not cannot_share(state, count):
            continue
        js = state.jobs[next(iter(bucket))]
        if now - js.since < after:
            continue
        if best is None or (-js.spec.priority, js.seq) < (-best.spec.priority, best.seq):
            best = js
    return best


def make_room(state: ClusterState, js: JobState, now: float) -> list[Decision]:
    """Requeue the smaller jobs on the GPUs ``js`` is given, then start it there."""
    big = js.spec.gpus > state.max_size
    found = _whole_nodes(state, js) if big else _node_part(state, js)
    if found is None:
        return []
    where, victims = found
    waited_h = (now - js.since) / 3600
    names = ",".join(dict.fromkeys(n for n, _ in where))
    why = f"preempted: GPUs on {names} emptied for job {js.id}, which waited {waited_h:.1f} h"
    out = state.commit([Requeue(v, why) for v in victims], now)
    reason = f"waited {waited_h:.1f} h for GPUs no job could share; {names} emptied for it"
    return out + state.commit([Place(js.id, where, ShareMode.EXCLUSIVE, reason)], now)


def _yields_to(state: ClusterState, key: GroupKey, js: JobState) -> bool:
    """Whether every job on GPU set ``key`` may be displaced for ``js``."""
    return all(
        state.jobs[m].spec.gpus < js.spec.gpus and state.jobs[m].spec.priority <= js.spec.priority
        for m in state.groups[key]
    )


def _victims(state: ClusterState, keys: list[GroupKey]) -> dict[str, None]:
    out: dict[str, None] = {}
    for key in keys:
        out.update(dict.fromkeys(state.groups[key]))
    return out


def _whole_nodes(state: ClusterState, js: JobState) -> tuple[GroupKey, dict[str, None]] | None:
    """The least loaded open nodes whose jobs all yield to ``js``, enough to hold it."""
    candidates = [
        ns
        for ns in state.nodes.values()
        if ns.open and all(_yields_to(state, k, js) for k in ns.groups)
    ]
    candidates.sort(key=lambda n: (n.load / n.size, -n.size, n.name))
    chosen: list[NodeState] = []
    room = 0
    for ns in candidates:
        if room >= js.spec.gpus:
            break
        chosen.append(ns)
        room += ns.size
    if room < js.spec.gpus:
        return None
    victims = _victims(state, [k for ns in chosen for k in ns.groups])
    gpus: list[GpuRef] = []
    for ns in chosen:
        idx = ns.topo.best_set((1 << ns.size) - 1, min(ns.size, js.spec.gpus - len(gpus)))
        gpus.extend((ns.name, i) for i in idx or ())
    return tuple(sorted(gpus)), victims


def _node_part(state: ClusterState, js: JobState) -> tuple[GroupKey, dict[str, None]] | None:
    """The GPU set of one open node that can hold ``js`` displacing the fewest GPU-jobs.

    On each node, the yielding GPU sets join the free GPUs cheapest first
    (fewest jobs, then fewest GPUs) until a set of ``js``'s size fits; the
    cost is the work on the sets that set overlaps. Ties go to the lower node.
    """
    count = js.spec.gpus
    best: tuple[tuple[int, float, str], GroupKey, list[GroupKey]] | None = None
    for ns in state.nodes.values():
        if not ns.open or ns.size < count:
            continue
        mask = ns.free_mask
        found = ns.topo.best_set(mask, count)
        for key in sorted(
            (k for k in ns.groups if k[0][0] == k[-1][0] and _yields_to(state, k, js)),
            key=lambda k: (len(state.groups[k]), len(k), k),
        ):
            if found is not None:
                break
            for _, i in key:
                mask |= 1 << i
            found = ns.topo.best_set(mask, count)
        if found is None:
            continue
        taken = set(found)
        hit = [k for k in ns.groups if any(i in taken for _, i in k)]
        cost = (sum(len(k) * len(state.groups[k]) for k in hit), ns.height, ns.name)
        if best is None or cost < best[0]:
            best = (cost, tuple((ns.name, i) for i in found), hit)
    if best is None:
        return None
    return best[1], _victims(state, best[2])
