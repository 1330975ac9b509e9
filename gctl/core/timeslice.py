"""Round-robin time slicing of jobs that share a GPU set, with priorities.

Only the jobs of the highest priority present on a set take turns; lower
ones wait, so a high-priority job is never suspended for a lower one. A
running job keeps its turn for at least one quantum. A job that can
checkpoint waits for its turn checkpointed when the set's jobs do not fit in
its GPU memory all at once (:mod:`gctl.core.memory`).
"""

from __future__ import annotations

from gctl.core import memory
from gctl.core.decisions import Decision, Resume, Suspend
from gctl.core.model import JobStatus
from gctl.core.state import ClusterState, GroupKey


def next_in_turn(state: ClusterState, key: GroupKey, after: str | None) -> str | None:
    """The top-priority member after ``after`` in cyclic order (the first one when None)."""
    members = state.groups[key]
    top = max(int(state.jobs[m].spec.priority) for m in members)
    start = members.index(after) + 1 if after in members else 0
    for i in range(len(members)):
        cand = members[(start + i) % len(members)]
        if cand != after and int(state.jobs[cand].spec.priority) == top:
            return cand
    return None


def resume_idle_sets(state: ClusterState, now: float) -> list[Decision]:
    """Give the turn to a waiting job on every shared set whose runner left."""
    out: list[Decision] = []
    for key in list(state.dirty):
        members = state.groups.get(key)
        if members and not any(state.jobs[m].status is JobStatus.RUNNING for m in members):
            nxt = next_in_turn(state, key, None)
            if nxt is not None:
                out += state.commit([Resume(nxt, "its turn: the job before it left the GPUs")], now)
    state.dirty.clear()
    return out


def rotate(
    state: ClusterState, now: float, quantum: float, checkpoint_quantum: float
) -> list[Decision]:
    """Hand each time-sliced set to its next job once the runner has used its quantum.

    The quantum is ``checkpoint_quantum`` for a runner that will wait
    checkpointed: its next turn is a restart, which costs seconds where a
    thaw costs milliseconds, so its turns are longer to keep the cost as
    small a share of them.
    """
    out: list[Decision] = []
    jobs = state.jobs
    for key in list(state.shared):
        members = state.groups[key]
        current = None
        for m in members:
            js = jobs[m]
            if js.status is JobStatus.RUNNING:
                if current is not None:
                    current = None
                    break
                current = js
        if current is None:
            continue
        by_checkpoint = memory.suspend_by_checkpoint(state, current)
        turn = checkpoint_quantum if by_checkpoint else quantum
        if now - current.last_resumed < turn:
            continue
        nxt = next_in_turn(state, key, current.id)
        if nxt is None:
            continue
        waiting = len(members) - 1
        why = f"quantum {turn:g}s used; {waiting} job(s) share its GPUs"
        out += state.commit(
            [
                Suspend(current.id, why, by_checkpoint),
                Resume(nxt, f"round-robin turn on {key[0][0]}"),
            ],
            now,
        )
    return out
