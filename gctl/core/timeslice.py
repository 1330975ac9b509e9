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
    """The member whose turn is next: best-ranked with ``rank``, else round robin.

    Round robin: the top-priority member after ``after`` in cyclic order
    (the first one when None). Members in ``skip`` (and ``after``) are
    passed over.
    """
    members = state.groups[key]
    if rank is not None and after is None and not skip:
        return rank.best(state, key)
    if rank is not None:
        jobs = [state.jobs[m] for m in members if m != after and m not in skip]
        return min(jobs, key=rank).id if jobs else None
    top = max(int(state.jobs[m].spec.priority) for m in members)
    start = members.index(after) + 1 if after in members else 0
    for i in range(len(members)):
        cand = members[(start + i) % len(members)]
        if cand != after and cand not in skip and int(state.jobs[cand].spec.priority) == top:
            return cand
    return None


def turn_order(state: ClusterState, key: GroupKey, first: str, rank: Rank | None) -> list[JobState]:
    """The members other than ``first`` in the order their turns come (as :func:`next_in_turn`).

    Best-ranked first with ``rank``; else the top-priority members, cyclic after ``first``.
    """
    members = state.groups[key]
    others = [state.jobs[m] for m in members if m != first]
    if rank is not None:
        return sorted(others, key=rank)
    top = max(int(state.jobs[m].spec.priority) for m in members)
    at = members.index(first) if first in members else -1
    cyclic = {m: (i - at - 1) % len(members) for i, m in enumerate(members)}
    return sorted(
        (js for js in others if int(js.spec.priority) == top), key=lambda js: cyclic[js.id]
    )


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
    jobs = state.jobs
    for key in list(state.shared):
        members = state.groups[key]
        if rank is not None and jobs[rank.best(state, key)].status is JobStatus.RUNNING:
            continue
        runners = [jobs[m] for m in members if jobs[m].status is JobStatus.RUNNING]
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
