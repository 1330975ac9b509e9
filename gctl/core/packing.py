"""Gandiva packing: run light jobs concurrently on one GPU set, and undo packs that do not pay.

Under overload, jobs waiting for their time slice are taken lowest GPU
utilisation first and packed onto the running exclusive job with the lowest
utilisation whose GPUs fit both jobs' memory. A pack is kept only while its
measured aggregate progress (each job's rate over its rate alone, summed)
beats time slicing, which gives the pair 1.0 at best; otherwise the job of
lower priority (the newer one between equals) is unpacked and the pair is not
tried again. Packing never takes a node above the height time slicing may
reach.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gctl.core.decisions import Decision, Pack, Unpack
from gctl.core.memory import all_frozen_fit
from gctl.core.model import JobStatus
from gctl.core.state import ClusterState, GroupKey, JobState


@dataclass(slots=True)
class PackingMemory:
    """Pairs already found not to pay, remembered across passes."""

    bad_pairs: set[frozenset[str]] = field(default_factory=set)

    def prune(self, live: Mapping[str, object]) -> None:
        """Drop pairs with a job that is gone."""
        if self.bad_pairs:
            self.bad_pairs = {p for p in self.bad_pairs if all(j in live for j in p)}


def aggregate_speed(state: ClusterState, key: GroupKey) -> float | None:
    """Sum of members' progress relative to running alone, once all were measured packed."""
    total = 0.0
    for m in state.groups[key]:
        js = state.jobs[m]
        obs = js.observed
        if obs is None or js.solo_rate is None or js.packed_at is None or obs.at < js.packed_at:
            return None
        if js.solo_rate <= 0:
            return None
        total += obs.progress_rate / js.solo_rate
    return total


def _height_allows(state: ClusterState, src: GroupKey, dst: GroupKey, max_height: float) -> bool:
    """Whether moving a job from ``src`` onto ``dst`` keeps every node at or below max height."""
    added: dict[str, int] = {}
    for n, _ in dst:
        added[n] = added.get(n, 0) + 1
    for n, _ in src:
        added[n] = added.get(n, 0) - 1
    return all(
        state.nodes[n].load + state.nodes[n].free + extra <= max_height * state.nodes[n].size
        for n, extra in added.items()
        if extra > 0
    )


def review_packs(
    state: ClusterState, now: float, memory: PackingMemory, keep_above: float
) -> list[Decision]:
    """Unpack every measured pack whose aggregate speed is not above ``keep_above``."""
    out: list[Decision] = []
    for key in list(state.shared):
        members = state.groups[key]
        if not all(state.jobs[m].status is JobStatus.RUNNING for m in members):
            continue
        agg = aggregate_speed(state, key)
        if agg is None or agg > keep_above:
            continue
        victim = min(members, key=lambda m: (state.jobs[m].spec.priority, -state.jobs[m].since))
        memory.bad_pairs.add(frozenset(members))
        reason = f"packed aggregate speed {agg:.2f} <= {keep_above:.2f} of time slicing"
        out += state.commit([Unpack(victim, reason)], now)
    return out


def pack_waiting(
    state: ClusterState,
    now: float,
    memory: PackingMemory,
    util_limit: float,
    max_packs: int,
    max_height: float,
) -> list[Decision]:
    """Greedy packing of time-sliced waiting jobs onto lightly used exclusive GPU sets."""
    candidates: list[JobState] = []
    for key in state.shared:
        for m in state.groups[key]:
            js = state.jobs[m]
            if (
                js.status is JobStatus.SUSPENDED
                and js.observed is not None
                and js.spec.can_checkpoint
            ):
                candidates.append(js)
    if not candidates:
        return []
    candidates.sort(key=lambda j: (j.observed.gpu_util if j.observed else 1.0, j.seq))
    targets: dict[int, list[JobState]] = {}
    for key, members in state.groups.items():
        if len(members) != 1:
            continue
        js = state.jobs[members[0]]
        if js.status is not JobStatus.RUNNING or js.observed is None:
            continue
        if all(state.nodes[n].open for n in dict.fromkeys(n for n, _ in key)):
            targets.setdefault(len(key), []).append(js)
    for group in targets.values():
        group.sort(key=lambda j: (j.observed.gpu_util if j.observed else 1.0, j.seq))
    out: list[Decision] = []
    for cand in candidates:
        if len(out) >= max_packs:
            break
        pool = targets.get(cand.held, [])
        cand_util = cand.observed.gpu_util if cand.observed else 1.0
        for i, tgt in enumerate(pool):
            tgt_util = tgt.observed.gpu_util if tgt.observed else 1.0
            if cand_util + tgt_util > util_limit:
                break
            if frozenset((cand.id, tgt.id)) in memory.bad_pairs:
                continue
            if not all_frozen_fit(state, tgt.gpus, (cand, tgt)):
                continue
            if not _height_allows(state, cand.gpus, tgt.gpus, max_height):
                continue
            reason = (
                f"utilisation {cand_util:.0%} + {tgt_util:.0%} fits one GPU set;"
                f" packing beats waiting for a time slice"
            )
            out += state.commit([Pack(cand.id, tgt.gpus, (tgt.id,), reason)], now)
            del pool[i]
            break
    return out
