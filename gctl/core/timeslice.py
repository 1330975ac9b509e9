"""Time slicing of jobs that share a GPU set: round robin or least attained service first.

Only the jobs of the highest priority present on a set take turns; lower
ones wait, so a high-priority job is never suspended for a lower one. In
round robin the members take turns in cyclic order. With a *rank* (least
attained service, :mod:`gctl.core.las`) the best-ranked member runs and a
runner is only suspended for a member that outranks it. A running job keeps
its turn for at least one quantum. Light jobs take their
turns two at a time, packed, when Gandiva's packing rules let the pair run
together (:mod:`gctl.core.packing`). A job that can checkpoint waits for its
turn checkpointed when the set's jobs do not fit in its GPU memory all at
once (:mod:`gctl.core.memory`).
"""

from __future__ import annotations

from collections.abc import Collection

from gctl.core import memory
from gctl.core.decisions import Decision, Resume, Suspend
from gctl.core.las import Ranking as Rank
from gctl.core.model import JobStatus
from gctl.core.packing import TurnPacking, choose_turn_partner, judge_turn_pack
from gctl.core.state import ClusterState, GroupKey, JobState


def next_in_turn(
    state: ClusterState,
    key: GroupKey,
    after: str | None,
    skip: Collection[str] = (),
    rank: Rank | None = None,
) -> str | None:
    """The member whose turn is next (:func:`turn_order`), members in ``skip`` passed over."""
    if rank is not None and after is None and not skip:
        return rank.best(state, key)
    for js in turn_order(state, key, after, rank):
        if js.id not in skip:
            return js.id
    return None


def turn_order(
    state: ClusterState, key: GroupKey, after: str | None, rank: Rank | None
) -> list[JobState]:
    """The members other than ``after`` in the order their turns come.

    Best-ranked first with ``rank``; else round robin: the top-priority
    members in cyclic order after ``after`` (from the first when None).
    """
    members = state.groups[key]
    jobs = state.jobs
    if rank is not None:
        return sorted((jobs[m] for m in members if m != after), key=rank)
    top = max(int(jobs[m].spec.priority) for m in members)
    start = members.index(after) + 1 if after in members else 0
    cyclic = (members[(start + i) % len(members)] for i in range(len(members)))
    return [jobs[m] for m in cyclic if m != after and int(jobs[m].spec.priority) == top]


def resume_idle_sets(state: ClusterState, now: float, rank: Rank | None = None) -> list[Decision]:
    """Give the turn to a waiting job on every shared set whose runner left."""
    out: list[Decision] = []
    for key in list(state.dirty):
        members = state.groups.get(key)
        if members and not any(state.jobs[m].status is JobStatus.RUNNING for m in members):
            nxt = next_in_turn(state, key, None, rank=rank)
            if nxt is not None:
                why = "its turn: the job before it left the GPUs"
                if rank is not None:
                    why += f"; {rank.describe(state.jobs[nxt])}"
                out += state.commit([Resume(nxt, why)], now)
    state.dirty.clear()
    return out


def rotate(
    state: ClusterState,
    now: float,
    quantum: float,
    checkpoint_quantum: float,
    packing: TurnPacking | None = None,
    rank: Rank | None = None,
    dues: list[float] | None = None,
) -> list[Decision]:
    """Hand each time-sliced set to its next job(s) once the runners have used their quantum.

    With ``rank``, a set changes hands only when a waiting member outranks
    every runner; round robin hands it on every quantum. ``dues`` gets the
    moments sets that will change hands (a runner still in its quantum) do.

    The quantum is ``checkpoint_quantum`` when a runner will wait
    checkpointed: its next turn is a restart, which costs seconds where a
    thaw costs milliseconds, so its turns are longer to keep the cost as
    small a share of them. With ``packing``, the next job takes its turn
    together with the one after it when the two may pack
    (:func:`gctl.core.packing.turn_partner`).
    """
    out: list[Decision] = []
    jobs, groups, running = state.jobs, state.groups, JobStatus.RUNNING
    best = rank.best if rank is not None else None
    for key in list(state.shared):
        members = groups[key]
        if best is not None and jobs[best(state, key)].status is running:
            continue
        runners = [jobs[m] for m in members if jobs[m].status is running]
        if not runners or len(runners) == len(members):
            continue
        by_checkpoint = {r.id: memory.suspend_by_checkpoint(state, r) for r in runners}
        turn = checkpoint_quantum if any(by_checkpoint.values()) else quantum
        latest = max(runners, key=lambda r: r.last_resumed)
        if now - latest.last_resumed < turn:
            if dues is not None:
                dues.append(latest.last_resumed + turn)
            continue
        first = next_in_turn(state, key, latest.id, {r.id for r in runners}, rank)
        if first is None:
            continue
        cohort = [jobs[first]]
        predicted = ""
        if packing is not None:
            judge_turn_pack(runners, packing)
            order = turn_order(state, key, first, rank)
            chosen = choose_turn_partner(state, key, cohort[0], order, packing)
            if chosen is not None:
                cohort.append(chosen[0])
                if chosen[1] is not None:
                    predicted = f" ({chosen[1].describe()})"
        why = f"quantum {turn:g}s used; {len(members) - 1} job(s) share its GPUs"
        if rank is not None:
            why = f"job {first} goes first by least attained service ({rank.describe(jobs[first])})"
        decisions: list[Decision] = [
            Suspend(r.id, why, by_checkpoint[r.id]) for r in runners if r not in cohort
        ]
        for c in cohort:
            if c.status is not JobStatus.RUNNING:
                partner = [o.id for o in cohort if o is not c]
                extra = f", packed with job {partner[0]}{predicted}" if partner else ""
                if rank is None:
                    turn_why = f"round-robin turn on {key[0][0]}"
                else:
                    turn_why = f"least attained service on {key[0][0]}: {rank.describe(c)}"
                decisions.append(Resume(c.id, turn_why + extra))
        out += state.commit(decisions, now)
    return out
