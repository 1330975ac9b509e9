"""Gandiva migration: to freed GPUs (out of time slicing and packs), for locality, to defragment.

Every move restores a job from a checkpoint onto a free GPU set, so it costs
the job a short pause; these passes only move a job when it gains from it.
"""

from __future__ import annotations

from gctl.core.decisions import Decision, Migrate
from gctl.core.model import JobStatus
from gctl.core.placement import free_set, node_set
from gctl.core.state import ClusterState, GroupKey, JobState, NodeState


def _move(state: ClusterState, job_id: str, dst: GroupKey, now: float, why: str) -> list[Decision]:
    src = state.jobs[job_id].gpus
    return state.commit([Migrate(job_id, src, dst, why)], now)


def _movable(js: JobState) -> bool:
    """A running job that can checkpoint (a job that cannot is never moved)."""
    return js.status is JobStatus.RUNNING and js.spec.can_checkpoint


def unslice(state: ClusterState, now: float) -> list[Decision]:
    """Move time-sliced jobs onto free GPUs, highest priority and oldest first.

    The job moved may be the one whose turn it is: the oldest jobs leave
    time slicing first, so long jobs are not stretched to the end of the
    trace while younger ones get the freed GPUs.
    """
    out: list[Decision] = []
    while state.total_free and state.shared:
        best: JobState | None = None
        for size in state.waiting_sizes():
            if size > state.total_free:
                break
            js = state.next_waiting(size)
            if js is None or not js.spec.can_checkpoint:
                continue
            if next(state.nodes_with_free(size), None) is None:
                continue
            if best is None or (-js.spec.priority, js.seq) < (-best.spec.priority, best.seq):
                best = js
        if best is None:
            break
        dst = free_set(state, best.held, span=False, datasets=frozenset(best.spec.datasets))
        if dst is None:
            break
        where = best.gpus[0][0]
        why = f"was taking turns on {where}; GPUs freed"
        out += _move(state, best.id, dst, now, why)
    return out


def unpack(state: ClusterState, now: float) -> list[Decision]:
    """Split packs onto free GPUs once nobody waits for them, oldest pack first.

    A pack is kept while it beats time slicing, but on an idle GPU set each
    of its jobs runs at full speed: when the queue has drained (a trace's
    tail), a long job left packed would set the makespan at a fraction of
    its speed. The newer job of the pair moves; the older one keeps its GPUs.
    Nothing moves while a job waits: a move would take GPUs it waits for.
    """
    out: list[Decision] = []
    if state.pending:
        return out
    jobs = state.jobs
    packs: list[tuple[int, int, JobState]] = []
    for key in state.shared:
        members = [jobs[m] for m in state.groups[key]]
        if not all(_movable(js) for js in members):
            continue
        oldest = min(members, key=lambda j: (-j.spec.priority, j.seq))
        mover = max(members, key=lambda j: (-j.spec.priority, j.seq))
        packs.append((-oldest.spec.priority, oldest.seq, mover))
    packs.sort(key=lambda p: p[:2])
    for _, _, js in packs:
        if state.total_free < js.held:
            continue  # a smaller job of a newer pack may still fit
        dst = free_set(state, js.held, span=False, datasets=frozenset(js.spec.datasets))
        if dst is None:
            continue
        why = f"was packed on {js.gpus[0][0]}; GPUs free and nobody waiting"
        out += _move(state, js.id, dst, now, why)
    return out


def regroup(state: ClusterState, now: float, max_moves: int) -> list[Decision]:
    """Bring jobs spread over several nodes onto one node once one has room."""
    out: list[Decision] = []
    for key in list(state.scattered):
        if len(out) >= max_moves:
            break
        members = state.groups[key]
        if len(members) != 1 or not _movable(state.jobs[members[0]]):
            continue
        spec = state.jobs[members[0]].spec
        dst = free_set(state, len(key), span=False, datasets=frozenset(spec.datasets))
        if dst is None:
            continue
        nodes = len({n for n, _ in key})
        why = f"spread over {nodes} nodes; {dst[0][0]} now has {len(key)} free GPUs together"
        out += _move(state, members[0], dst, now, why)
    return out


def defragment(state: ClusterState, now: float, threshold: int, max_moves: int) -> list[Decision]:
    """Empty the most-free non-idle node into fuller ones, until none has ``threshold`` free.

    Only exclusive running jobs move, only to a node with fewer free GPUs,
    and only onto a set whose locality is no worse; a node none of whose jobs
    can move is left alone and the next one is tried.
    """
    out: list[Decision] = []
    skip: set[str] = set()
    while len(out) < max_moves:
        src = _most_free_busy(state, threshold, skip)
        if src is None:
            break
        moved = False
        for key in sorted(src.groups, key=len):
            members = state.groups[key]
            if len(members) != 1 or key[0][0] != key[-1][0]:
                continue
            if not _movable(state.jobs[members[0]]):
                continue
            dst = _fuller_home(state, src, key)
            if dst is None:
                continue
            why = f"defragment: {src.name} had {src.free} free GPUs; moved to {dst[0][0]}"
            out += _move(state, members[0], dst, now, why)
            moved = True
            break
        if not moved:
            skip.add(src.name)
    return out


def _most_free_busy(state: ClusterState, threshold: int, skip: set[str]) -> NodeState | None:
    for ns in state.nodes_with_free(max(threshold, 1), most_free_first=True):
        if ns.load > 0 and ns.name not in skip:
            return ns
    return None


def _fuller_home(state: ClusterState, src: NodeState, key: GroupKey) -> GroupKey | None:
    count = len(key)
    spread = state.spread(key)
    for ns in state.nodes_with_free(count):
        if ns.free >= src.free:
            break
        if ns.load == 0 or ns.name == src.name:
            continue
        dst = node_set(ns, count)
        if dst is not None and state.spread(dst) <= spread:
            return dst
    return None
