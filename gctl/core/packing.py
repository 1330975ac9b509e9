"""Gandiva packing: run light jobs concurrently on one GPU set, and undo packs that do not pay.

Under overload, jobs waiting for their time slice are taken lowest GPU
utilisation first and packed onto the running exclusive job with the lowest
utilisation whose GPUs fit both jobs' memory; when the driver hands the
policy an interference predictor (:mod:`gctl.core.interference`), onto the
one of least predicted interference instead, and only where the pair is
predicted to pay. Where no exclusive job is left
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
from gctl.core.interference import Interference, PairOutlook, best_partner
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


PARTNER_CHOICES = 16
"""Most partners a waiting job's predicted interference is weighed against, per pass."""


@dataclass(frozen=True, slots=True)
class PackLimits:
    """How :func:`pack_waiting` packs: limits, and whether it weighs predicted interference."""

    util: float
    keep_above: float
    max_packs: int
    max_height: float
    interference: bool = True


@dataclass(frozen=True, slots=True)
class TurnPacking:
    """How time-sliced sets pack their turns: the limits and the pairs found not to pay."""

    memory: PackingMemory
    util_limit: float
    keep_above: float
    interference: bool = True
    """Whether the partner is the one of least predicted interference, when one is predicted."""


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


def choose_turn_partner(
    state: ClusterState,
    key: GroupKey,
    first: JobState,
    order: list[JobState],
    packing: TurnPacking,
) -> tuple[JobState, PairOutlook | None] | None:
    """The job to take its turn on set ``key`` beside ``first``, packed, or None.

    ``order`` is the other members in turn order. Without a predictor only
    the next in turn is considered (Gandiva's rule). With one, the member
    of least predicted interference among the first :data:`PARTNER_CHOICES`
    that may pack (:func:`turn_partner`) and are predicted to pay, with its
    outlook.
    """
    predict = state.interference if packing.interference else None
    if predict is None:
        return (
            (order[0], None)
            if order and turn_partner(state, key, first, order[0], packing)
            else None
        )
    fits: list[JobState] = []
    for cand in order:
        if turn_partner(state, key, first, cand, packing):
            fits.append(cand)
            if len(fits) >= PARTNER_CHOICES:
                break
    gpu_type = state.gpu_type(key[0])
    return best_partner(
        [(c, predict.outlook(gpu_type, first, c)) for c in fits], packing.keep_above
    )


def judge_turn_pack(runners: list[JobState], packing: TurnPacking) -> None:
    """Remember a pair that ran its turn packed as not paying, once measured, if it did not.

    Measured means both rates were measured from after the later of them resumed.
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
        if obs is None or start is None or obs.measured_from < start or not js.solo_rate:
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
    jobs, groups = state.jobs, state.groups
    for key in list(state.shared):
        members = groups[key]
        if not _all_running(jobs, members):
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
    limits: PackLimits,
) -> list[Decision]:
    """Greedy packing of time-sliced waiting jobs onto lightly used exclusive GPU sets.

    Waiting jobs go lightest first. Without a predictor
    (:attr:`ClusterState.interference`, or ``limits.interference`` off) each
    goes onto the lightest running job it fits beside (utilisation sum,
    memory, height). With one, it goes beside the partner of least predicted
    interference among the first :data:`PARTNER_CHOICES` it fits beside, and
    not at all where no pair is predicted to beat time slicing
    (:func:`gctl.core.interference.best_partner`).
    """
    candidates: list[JobState] = []
    jobs, groups, suspended = state.jobs, state.groups, JobStatus.SUSPENDED
    for key in state.shared:
        for m in groups[key]:
            js = jobs[m]
            if js.status is suspended and js.observed is not None and js.spec.can_checkpoint:
                candidates.append(js)
    if not candidates:
        return []
    candidates.sort(key=lambda j: (_util(j), j.seq))
    targets: dict[int, list[JobState]] = {}
    closed = {name for name, ns in state.nodes.items() if not ns.open}
    running = JobStatus.RUNNING
    for key, members in groups.items():
        if len(members) != 1:
            continue
        js = jobs[members[0]]
        if js.status is not running or js.observed is None:
            continue
        if not closed or not any(n in closed for n, _ in key):
            targets.setdefault(len(key), []).append(js)
    for group in targets.values():
        group.sort(key=lambda j: (_util(j), j.seq))
    predict = state.interference if limits.interference else None
    if predict is not None:
        return _pack_least_interference(state, now, memory, limits, candidates, targets, predict)
    out: list[Decision] = []
    for cand in candidates:
        if len(out) >= limits.max_packs:
            break
        pool = targets.get(cand.held, [])
        fits = _fitting(state, cand, pool, memory, limits, 1)
        if not fits:
            continue
        i, tgt = fits[0]
        reason = (
            f"utilisation {_util(cand):.0%} + {_util(tgt):.0%} fits one GPU set;"
            f" packing beats waiting for a time slice"
        )
        out += state.commit([Pack(cand.id, tgt.gpus, (tgt.id,), reason)], now)
        del pool[i]
    return out


def _pack_least_interference(
    state: ClusterState,
    now: float,
    memory: PackingMemory,
    limits: PackLimits,
    candidates: list[JobState],
    targets: dict[int, list[JobState]],
    predict: Interference,
) -> list[Decision]:
    """Pairs predicted to pay, least predicted interference first, each job in one pair.

    Each waiting job is weighed against the first :data:`PARTNER_CHOICES`
    running jobs it fits beside (lightest first); the pairs are then taken
    best first, so a good partner goes to the job it suits best rather than
    to the lightest waiting job.
    """
    options: list[tuple[float, int, int, JobState, JobState, PairOutlook, int]] = []
    for cand in candidates:
        fits = _fitting(state, cand, targets.get(cand.held, []), memory, limits, PARTNER_CHOICES)
        for _, tgt in fits:
            outlook = predict.outlook(state.gpu_type(tgt.gpus[0]), cand, tgt)
            if outlook.pays(limits.keep_above):
                options.append(
                    (-outlook.aggregate, cand.seq, tgt.seq, cand, tgt, outlook, len(fits))
                )
    options.sort(key=lambda o: o[:3])
    used: set[str] = set()
    out: list[Decision] = []
    for _, _, _, cand, tgt, outlook, choices in options:
        if len(out) >= limits.max_packs:
            break
        if cand.id in used or tgt.id in used:
            continue
        if not _height_allows(state, cand.gpus, tgt.gpus, limits.max_height):
            continue
        reason = (
            f"{outlook.describe()} beside job {tgt.id}: the least predicted interference"
            f" of {choices} GPU set(s) it fits; packing beats waiting for a time slice"
        )
        out += state.commit([Pack(cand.id, tgt.gpus, (tgt.id,), reason)], now)
        used.update((cand.id, tgt.id))
    return out


def _all_running(jobs: dict[str, JobState], members: list[str]) -> bool:
    """Whether every job of ``members`` runs (a plain loop: twice as fast as all() here)."""
    for m in members:  # noqa: SIM110
        if jobs[m].status is not JobStatus.RUNNING:
            return False
    return True


def _util(js: JobState) -> float:
    """The job's GPU utilisation as last sampled (1.0 before its first sample)."""
    return js.observed.gpu_util if js.observed else 1.0


def _fitting(
    state: ClusterState,
    cand: JobState,
    pool: list[JobState],
    memory: PackingMemory,
    limits: PackLimits,
    wanted: int,
) -> list[tuple[int, JobState]]:
    """The first ``wanted`` jobs of ``pool`` (lightest first) ``cand`` may pack beside.

    With their positions in ``pool``. Clears ``pool`` when even its lightest
    job is too heavy for ``cand``: the later candidates of its size are no
    lighter.
    """
    out: list[tuple[int, JobState]] = []
    room = limits.util - _util(cand)
    for i, tgt in enumerate(pool):
        if _util(tgt) > room:
            if i == 0:
                pool.clear()
            break
        if frozenset((cand.id, tgt.id)) in memory.bad_pairs:
            continue
        if not all_frozen_fit(state, tgt.gpus, (cand, tgt)):
            continue
        if not _height_allows(state, cand.gpus, tgt.gpus, limits.max_height):
            continue
        out.append((i, tgt))
        if len(out) >= wanted:
            break
    return out
