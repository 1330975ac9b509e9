"""Starvation guard: a size of job held below its share of the cluster makes room.

Gandiva's placement serves whoever fits the GPUs that come free, and time
slicing keeps every GPU busy. Under a long overload that leaves whole sizes
of jobs behind: multi-GPU jobs need GPUs to come free together (or a node of
their affinity to share), and smaller jobs take every GPU that frees up. The
jobs left behind then run at the end, on a cluster otherwise idle, and set
the makespan.

Each size of job (its GPU count) has a *share* of the cluster: of all its
GPUs, the part its unfinished jobs ask for among everyone's. What a size
*holds* is the GPUs its jobs are on, a shared set split evenly among the
jobs on it. Once the first pending job of a size whose share has room for
it (a size whose share is smaller than one of its jobs is never helped: it
waits for GPUs to come free) has waited ``after`` seconds, the guard
requeues, with their progress kept, the jobs on the GPUs it needs and
starts it there. Only smaller jobs, of no higher priority, of sizes holding
more than their own share are displaced, so a job the guard started is
never displaced for one of its size, and two sizes never take turns
emptying each other's GPUs. A job larger than a node gets the least loaded
whole nodes; a smaller one the GPU set of one node that displaces the least
work. The displaced jobs are placed again at once by Algorithm 1 when they
can, else wait in the queue with their progress.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gctl.core.decisions import Decision, Place, Requeue
from gctl.core.model import GpuRef, ShareMode
from gctl.core.state import ClusterState, GroupKey, JobState, NodeState


@dataclass(frozen=True, slots=True)
class Shares:
    """Each job size's share of the cluster's GPUs and the GPUs it holds, by size."""

    fair: dict[int, float]
    held: dict[int, float]

    def room_for(self, size: int) -> bool:
        """Whether ``size`` stays within its share with one more job (``size`` GPUs) on GPUs."""
        return self.held.get(size, 0.0) + size <= self.fair.get(size, 0.0)

    def above(self, size: int) -> bool:
        """Whether ``size`` holds more than its share."""
        return self.held.get(size, 0.0) > self.fair.get(size, 0.0)


def shares(state: ClusterState) -> Shares:
    """The sizes' shares (by the GPUs their unfinished jobs ask for) and holdings."""
    gpus = sum(ns.size for ns in state.nodes.values() if ns.up)
    asked = sum(state.backlog.values()) or 1
    fair = {size: gpus * n / asked for size, n in state.backlog.items()}
    held: dict[int, float] = {}
    jobs, get = state.jobs, held.get
    for key, members in state.groups.items():
        part = len(key) / len(members)
        for m in members:
            size = jobs[m].spec.gpus
            held[size] = get(size, 0.0) + part
    return Shares(fair, held)


def starving(state: ClusterState, now: float, after: float) -> tuple[JobState, Shares] | None:
    """The first pending multi-GPU job (priority, then age) whose size's share has room for it.

    Only a job that waited ``after`` counts; the shares are worked out only
    when one did.
    """
    heads = (state.jobs[next(iter(b))] for (_, count), b in state.pending.items() if count > 1)
    waited = [js for js in heads if now - js.since >= after]
    if not waited:
        return None
    now_shares = shares(state)
    below = [js for js in waited if now_shares.room_for(js.spec.gpus)]
    if not below:
        return None
    return min(below, key=lambda js: (-js.spec.priority, js.seq)), now_shares


Yields = Callable[[GroupKey], bool]
"""Whether the jobs on a GPU set may all be displaced (requeued) to make room."""

Weight = Callable[[GroupKey], float]
"""What displacing the jobs of a GPU set costs, per GPU (their count unless told otherwise)."""


def every_job(state: ClusterState, yields: Callable[[JobState], bool]) -> Yields:
    """A GPU set yields when every job on it does."""
    return lambda key: all(yields(state.jobs[m]) for m in state.groups[key])


def unstarve(state: ClusterState, js: JobState, owed: Shares, now: float) -> list[Decision]:
    """Make room for a starving ``js`` by displacing smaller jobs of sizes above their share."""
    waited_h = (now - js.since) / 3600

    def yields(other: JobState) -> bool:
        spec = other.spec
        return (
            spec.gpus < js.spec.gpus and spec.priority <= js.spec.priority and owed.above(spec.gpus)
        )

    def weight(key: GroupKey) -> float:
        return float(len(state.groups[key]))  # every job displaced costs the same

    because = f"it waited {waited_h:.1f} h for GPUs no job could share"
    return make_room(state, js, every_job(state, yields), weight, now, because)


def make_room(
    state: ClusterState, js: JobState, yields: Yields, weight: Weight, now: float, because: str
) -> list[Decision]:
    """Requeue the jobs of the GPU sets that ``yields`` that ``js`` needs, then start it there.

    The GPUs chosen displace the least ``weight`` (per GPU); ``because``
    says why, in both the victims' and ``js``'s reasons.
    """
    big = js.spec.gpus > state.max_size
    if big:
        found = _whole_nodes(state, js, yields, weight)
    else:
        found = _node_part(state, js, yields, weight)
    if found is None:
        return []
    where, victims = found
    names = ",".join(dict.fromkeys(n for n, _ in where))
    why = f"preempted: GPUs on {names} emptied for job {js.id}: {because}"
    out = state.commit([Requeue(v, why) for v in victims], now)
    reason = f"{because}; {names} emptied for it"
    return out + state.commit([Place(js.id, where, ShareMode.EXCLUSIVE, reason)], now)


def room(state: ClusterState, yields: Yields) -> tuple[int, int]:
    """The most GPUs :func:`make_room` could find with ``yields``: on one node, on whole nodes.

    One node: its free GPUs and the GPU sets on it that yield; whole nodes:
    the GPUs of the open nodes whose sets all yield. A job larger than
    either bound cannot be given room, so its search is skipped.
    """
    one = whole = 0
    for ns in state.nodes.values():
        if not ns.open:
            continue
        gpus = ns.free_mask.bit_count()
        every = True
        for key in ns.groups:
            if yields(key):
                if key[0][0] == key[-1][0]:
                    gpus += len(key)
            else:
                every = False
        one = max(one, gpus)
        whole += ns.size if every else 0
    return one, whole


def _victims(state: ClusterState, keys: list[GroupKey]) -> dict[str, None]:
    out: dict[str, None] = {}
    for key in keys:
        out.update(dict.fromkeys(state.groups[key]))
    return out


def _whole_nodes(
    state: ClusterState, js: JobState, yields: Yields, weight: Weight
) -> tuple[GroupKey, dict[str, None]] | None:
    """The least loaded open nodes whose jobs all yield to ``js``, enough to hold it."""
    candidates = [
        ns for ns in state.nodes.values() if ns.open and all(yields(k) for k in ns.groups)
    ]
    load = {ns.name: sum(len(k) * weight(k) for k in ns.groups) for ns in candidates}
    candidates.sort(key=lambda n: (load[n.name] / n.size, -n.size, n.name))
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


def _node_part(
    state: ClusterState, js: JobState, yields: Yields, weight: Weight
) -> tuple[GroupKey, dict[str, None]] | None:
    """The GPU set of one open node that can hold ``js`` displacing the least weighted work.

    On each node, the yielding GPU sets join the free GPUs cheapest first
    (least weight of jobs, then fewest GPUs) until a set of ``js``'s size
    fits; the cost is the weighted work on the sets that set overlaps. Ties
    go to the lower node.
    """
    count = js.spec.gpus
    best: tuple[tuple[float, float, str], GroupKey, list[GroupKey]] | None = None
    for ns in state.nodes.values():
        if not ns.open or ns.size < count:
            continue
        mask = ns.free_mask
        found = ns.topo.best_set(mask, count)
        for key in sorted(
            (k for k in ns.groups if k[0][0] == k[-1][0] and yields(k)),
            key=lambda k: (weight(k), len(k), k),
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
        cost = (sum(len(k) * weight(k) for k in hit), ns.height, ns.name)
        if best is None or cost < best[0]:
            best = (cost, tuple((ns.name, i) for i in found), hit)
    if best is None:
        return None
    return best[1], _victims(state, best[2])
