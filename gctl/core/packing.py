"""Gandiva packing: run light jobs concurrently on one GPU set, and undo packs that do not pay.

Under overload, jobs waiting for their time slice are taken lowest GPU
utilisation first and packed onto the running exclusive job with the lowest
utilisation whose GPUs fit both jobs' memory. Where no exclusive job is left
to pack onto, the jobs taking turns on one set take them in pairs when the
two fit together (:func:`turn_partner`), judged the same way. A pack is
kept only while its measured aggregate progress (each job's rate over its
rate alone, summed) beats time slicing, which gives the pair 1.0 at best,
and no job in it runs slower than its time slice would let it (:func:`pays`);
otherwise the job of lower priority (the newer one between equals) is
unpacked and the pair is not tried again. Packing never takes a node above
the height time slicing may reach.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gctl.core.decisions import Decision, Pack, Unpack
from gctl.core.memory import all_frozen_fit, can_run_together
from gctl.core.model import JobStatus
from gctl.core.state import ClusterState, GroupKey, JobState


@dataclass(slots=True)
class PackingMemory:
    """Pairs already found not to pay, remembered across passes."""

    bad_pairs: set[frozenset[str]] = field(default_factory=set)
    _pruned: int = 0

    def prune(self, live: Mapping[str, object]) -> None:
        """Drop pairs with a job that is gone, once the pairs have doubled since the last time.

        A pair of jobs gone is never looked up again, so keeping it a while
        costs memory only; pruning on every pass cost a scan of every pair.
        """
        if len(self.bad_pairs) > 2 * self._pruned + 64:
            self.bad_pairs = {p for p in self.bad_pairs if all(j in live for j in p)}
            self._pruned = len(self.bad_pairs)


@dataclass(frozen=True, slots=True)
class TurnPacking:
    """How time-sliced sets pack their turns: the limits and the pairs found not to pay."""

    memory: PackingMemory
    util_limit: float
    keep_above: float


def turn_partner(
    state: ClusterState, key: GroupKey, first: JobState, cand: JobState, packing: TurnPacking
) -> bool:
    """Whether ``cand`` may run its turn on set ``key`` beside ``first``, packed.

    Both must have been profiled, their utilisations fit ``util_limit``
    together, the pair not be known not to pay, and their memory fit beside
    what the waiting jobs hold.
    """
    a, b = first.observed, cand.observed
    return (
        a is not None
        and b is not None
        and a.gpu_util + b.gpu_util <= packing.util_limit
        and frozenset((first.id, cand.id)) not in packing.memory.bad_pairs
        and can_run_together(state, key, (first, cand))
    )


def judge_turn_pack(runners: list[JobState], packing: TurnPacking) -> None:
    """Remember a pair that ran its turn packed as not paying, once measured, if it did not.

    Measured means both were sampled after the later of them resumed.
    """
    if len(runners) != 2:
        return
    since = max(r.last_resumed for r in runners)
    rates = _rates(runners, lambda _: since)
    if rates is not None and not pays(rates, packing.keep_above):
        packing.memory.bad_pairs.add(frozenset(r.id for r in runners))


def pack_rates(state: ClusterState, key: GroupKey) -> list[float] | None:
    """Each member's progress relative to running alone, once all were measured packed."""
    return _rates(state.member_jobs(key), lambda js: js.packed_at)


def _rates(jobs: list[JobState], since: Callable[[JobState], float | None]) -> list[float] | None:
    out: list[float] = []
    for js in jobs:
        obs, start = js.observed, since(js)
        if obs is None or start is None or obs.at < start or not js.solo_rate:
            return None
        out.append(obs.progress_rate / js.solo_rate)
    return out


def pays(rates: list[float], keep_above: float) -> bool:
    """Whether a measured pack beats time slicing, for the pack and for each of its jobs.

    Its aggregate progress must be above ``keep_above`` (time slicing gives
    1.0 at best), and no job may progress slower than its time slice would
    let it (1/n of its speed alone): a pack where one job gains what the
    other loses would stretch the loser to the end of the queue.
    """
    return sum(rates) > keep_above and min(rates) >= 1.0 / len(rates)


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
    """Unpack every measured pack that does not pay (:func:`pays`)."""
    out: list[Decision] = []
    for key in list(state.shared):
        members = state.groups[key]
        if not all(state.jobs[m].status is JobStatus.RUNNING for m in members):
            continue
        rates = pack_rates(state, key)
        if rates is None or pays(rates, keep_above):
            continue
        victim = min(members, key=lambda m: (state.jobs[m].spec.priority, -state.jobs[m].since))
        memory.bad_pairs.add(frozenset(members))
        speeds = " + ".join(f"{r:.2f}" for r in rates)
        reason = (
            f"packed speeds {speeds} of alone do not beat time slicing"
            f" ({keep_above:.2f} in all, {1 / len(rates):.2f} each)"
        )
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
                if i == 0:  # the later candidates of its size are no lighter
                    pool.clear()
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
