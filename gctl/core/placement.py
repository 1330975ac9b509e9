"""Finding GPUs for a job: Gandiva's Algorithm 1 and the free-set searches it is built from.

Algorithm 1 (DESIGN §2.1), for a job needing g GPUs:

1. nodes of affinity g, lowest height first: the first with height < 1 and g
   free GPUs takes it;
2. else an empty node (affinity 0), which then gets affinity g;
3. else any node(s) with free GPUs, ignoring affinity: the node with the
   fewest free GPUs that still fits (best fit, keeping big holes for big
   jobs), or several nodes, most free first, when no single node fits;
4. else, when no GPU is free, the lowest node of affinity g is
   oversubscribed: the job joins the GPU set there with the fewest jobs and
   they take turns (never joining a set that holds higher-priority work,
   never putting more than ``max_height`` (rounded up) jobs on one set,
   and never pushing a node above ``max_height``, counting its free GPUs
   as used, since any job may take them later; jobs that do not fit the
   set's GPU memory together wait for their turn checkpointed, and a set
   where that cannot be is passed over);
5. else the job is queued.

Inside a node the job gets the best-connected free GPU set (topology link
scores). Jobs larger than one node take step 3 only: they are never
time-sliced, since that would need every node in the set to turn together.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gctl.core import memory
from gctl.core.decisions import Decision, Place, Queue, Suspend
from gctl.core.model import GpuRef, JobStatus, ShareMode
from gctl.core.state import ClusterState, GroupKey, JobState, NodeState


def node_set(ns: NodeState, count: int, mask: int | None = None) -> GroupKey | None:
    """Best-connected ``count`` free GPUs of one node (of ``mask``'s, when given), or None."""
    idx = ns.topo.best_set(ns.free_mask if mask is None else mask, count)
    if idx is None:
        return None
    return tuple((ns.name, i) for i in idx)


def first_fitting(nodes: Iterable[NodeState], count: int) -> GroupKey | None:
    """The best free set on the first of ``nodes`` that has ``count`` free GPUs."""
    for ns in nodes:
        if ns.free >= count:
            found = node_set(ns, count)
            if found is not None:
                return found
    return None


def affinity_set(
    state: ClusterState, count: int, datasets: frozenset[str] = frozenset()
) -> GroupKey | None:
    """Steps 1 and 2: the lowest node of affinity ``count`` below height 1, else an empty one.

    (A node of affinity ``count`` is only used while its height is below 1.)
    """
    for ns in state.nodes_by_affinity(count, datasets):
        if ns.height >= 1.0:
            break
        if ns.free >= count:
            found = node_set(ns, count)
            if found is not None:
                return found
    return first_fitting(state.nodes_by_affinity(0, datasets), count)


def spanning_set(
    state: ClusterState, count: int, datasets: frozenset[str] = frozenset()
) -> GroupKey | None:
    """GPUs from as few nodes as possible (most free first), or None when too few are free."""
    if state.total_free < count:
        return None
    chosen: list[GpuRef] = []
    for ns in state.nodes_with_free(1, most_free_first=True, datasets=datasets):
        take = min(ns.free, count - len(chosen))
        part = node_set(ns, take)
        if part is not None:
            chosen.extend(part)
        if len(chosen) == count:
            return tuple(sorted(chosen))
    return None


def free_set(
    state: ClusterState, count: int, *, span: bool = True, datasets: frozenset[str] = frozenset()
) -> GroupKey | None:
    """Steps 1 to 3: the Gandiva choice among free GPUs, or None when nothing is free.

    Among nodes equally good, those caching more of ``datasets`` (the job's) come first.
    """
    if state.total_free < count:
        return None
    if count <= state.max_size:
        fitting = state.nodes_with_free(count, datasets=datasets)
        found = affinity_set(state, count, datasets) or first_fitting(fitting, count)
        if found is not None or not span:
            return found
    elif not span:
        return None
    return spanning_set(state, count, datasets)


def consolidated_set(
    state: ClusterState, count: int, datasets: frozenset[str] = frozenset()
) -> GroupKey | None:
    """The tightest free set of ``count`` GPUs: one node when any fits, else fewest nodes.

    Tiresias' consolidated placement, for baselines that ignore affinity:
    the node with the fewest free GPUs that still fits (best fit, its
    best-connected set), else GPUs from the nodes with most free first.
    """
    if state.total_free < count:
        return None
    if count <= state.max_size:
        found = first_fitting(state.nodes_with_free(count, datasets=datasets), count)
        if found is not None:
            return found
    return spanning_set(state, count, datasets)


def timeslice_group(
    state: ClusterState, js: JobState, max_height: float, *, interference: bool = True
) -> GroupKey | None:
    """Step 4: the set for ``js`` to share on the lowest node of its affinity.

    A set whose jobs could not take turns with it in GPU memory (see
    :func:`gctl.core.memory.can_take_turns`) is passed over.
    """
    count = js.spec.gpus
    if count > state.max_size:
        return None
    cap = math.ceil(max_height)
    found: list[GroupKey] = []
    level: tuple[float, int] | None = None
    for ns, key in state.slice_targets(count, int(js.spec.priority), cap):
        if ns.affinity != count:
            continue
        if ns.load + ns.free + count > max_height * ns.size:
            # Nodes come by rising height and no node is bigger than max_size,
            # so once even the biggest could not take the job here, none later can.
            if ns.height + count / state.max_size > max_height:
                break
            continue
        members = state.member_jobs(key)
        if level is not None and (ns.height, len(members)) != level:
            break
        if not memory.can_take_turns(state, key, [*members, js]):
            continue
        if state.interference is None or not interference:
            return key
        level = (ns.height, len(members))
        found.append(key)
        if len(found) >= PARTNER_SETS:
            break
    if len(found) <= 1:
        return found[0] if found else None
    return max(found, key=lambda k: _best_turn_mate(state, k, js))


PARTNER_SETS = 8
"""Most equally good sets a time-slicing job weighs by predicted interference."""


def _best_turn_mate(state: ClusterState, key: GroupKey, js: JobState) -> float:
    """The best predicted aggregate speed of ``js`` with a member of ``key`` (turn pairs)."""
    predict = state.interference
    if predict is None:
        return 0.0
    gpu_type = state.gpu_type(key[0])
    return max(
        (predict.outlook(gpu_type, js, m).aggregate for m in state.member_jobs(key)),
        default=0.0,
    )


def place(
    state: ClusterState, js: JobState, now: float, max_height: float, *, interference: bool = True
) -> list[Decision]:
    """Run Algorithm 1 for a pending job and commit the result to ``state``.

    With ``interference`` (and a predictor in ``state``), a job that must
    time-slice joins, among the sets equally good by Algorithm 1, the one
    holding its best predicted turn partner.
    """
    count = js.spec.gpus
    decisions: list[Decision] = []
    gpus = free_set(state, count, datasets=frozenset(js.spec.datasets))
    if gpus is not None:
        nodes = dict.fromkeys(n for n, _ in gpus)
        where = ",".join(nodes)
        if len(nodes) > 1:
            reason = f"no single node had {count} free GPUs; spread over {where}"
        else:
            reason = f"{count} free GPUs on {where} (affinity {state.nodes[where].affinity})"
        decisions.append(Place(js.id, gpus, ShareMode.EXCLUSIVE, reason))
    else:
        key = timeslice_group(state, js, max_height, interference=interference)
        if key is None:
            if js.reason.startswith("queued") and js.status is JobStatus.PENDING:
                return []
            free = state.total_free
            reason = f"queued: needs {count} GPUs, {free} free, no node to share"
            return state.commit([Queue(js.id, reason)], now)
        members = state.groups[key]
        by_checkpoint = not memory.all_frozen_fit(state, key, [*state.member_jobs(key), js])
        for m in members:
            other = state.jobs[m]
            if other.status is JobStatus.RUNNING:
                why = f"time slice handed to new job {js.id}"
                decisions.append(Suspend(m, why, by_checkpoint and other.spec.can_checkpoint))
        node = key[0][0]
        decisions.append(
            Place(
                js.id,
                key,
                ShareMode.TIMESLICED,
                f"no free GPUs; time-slicing with {len(members)} job(s) on {node}",
            )
        )
    return state.commit(decisions, now)
