"""The Gandiva policy: reactive Algorithm 1 placement plus the introspective pass.

Reactive (:meth:`GandivaPolicy.schedule`, on every submit, finish or node
change): hand freed time slices on, shrink elastic jobs when queued work
needs GPUs, make room (requeuing smaller jobs) for a job of a size held
below its share of the cluster that waited past the limit
(:mod:`gctl.core.starvation`), place pending jobs by Algorithm 1 (high
priority first, then in arrival order), then move time-sliced jobs onto GPUs
that came free. The starvation check also runs every quantum, so a quiet
cluster does not leave a starving job waiting for the next event.

Introspective (:meth:`GandivaPolicy.introspect`, every quantum): review
packs, rotate time slices, pack light waiting jobs, regroup jobs spread over
nodes, defragment while work waits, and grow elastic jobs after an idle
period. Each mechanism can be switched off for comparisons.

Order (``order``): by default least attained service (:mod:`gctl.core.las`)
decides which member of a time-sliced set runs, which pending job is placed
first, and which jobs a waiting job that cannot share may displace; waiting
jobs are promoted after long waits, and every hour the longest jobs whose
remaining work outlasts the backlog have their service counted from zero
again (the tail guard, :mod:`gctl.core.tail`). ``round-robin`` gives
Gandiva's turns.
Partners (``interference``, on by default): when the driver hands the
policy an interference predictor (:attr:`ClusterState.interference`), a
waiting job packs beside, and a job taking its turn pairs with, the partner
of least predicted slow-down, and never where the pair is predicted not to
beat time slicing (:mod:`gctl.core.interference`); off, or without a
predictor, Gandiva's utilisation-sum rule chooses.
:meth:`GandivaPolicy.wake_at` tells a simulator when the next pass could
decide anything, so it skips the passes between.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from operator import itemgetter
from typing import Any

from gctl.core import elastic, las, migration, packing, placement, starvation, tail, timeslice
from gctl.core.decisions import Decision
from gctl.core.model import JobStatus
from gctl.core.policy import PolicyOptionError
from gctl.core.state import ClusterState, JobState

ORDERS = ("las", "round-robin")
"""How jobs taking turns are ordered: least attained service first, or in cyclic turns."""


_Ranked = tuple[tuple[int, ...], JobState]
"""A waiting job with its sort key."""


@dataclass(frozen=True, slots=True)
class GandivaConfig:
    """Tunables, with Gandiva's published choices as defaults where it gives them."""

    quantum: float = 60.0
    checkpoint_quantum: float = 300.0
    reconsider_every: float = 300.0
    max_height: float = 4.0
    timeslicing: bool = True
    packing: bool = True
    pack_util_limit: float = 1.0
    pack_keep_above: float = 1.0
    interference: bool = True
    max_packs_per_pass: int = 32
    migration: bool = True
    max_moves_per_pass: int = 32
    defrag_threshold: int = 2
    elastic: bool = True
    grow_idle_period: float = 600.0
    starvation_guard: bool = True
    starvation_limit: float = 259200.0
    order: str = "las"
    levels: int = 3
    level_base: float = 3600.0
    level_factor: float = 10.0
    promote_after: float = 8.0
    smaller_first: bool = False
    tail_guard: bool = True
    """Every ``tail_every``, count again from zero the service of the jobs whose remaining
    work outlasts the backlog (:mod:`gctl.core.tail`), so the last of them do not set the
    makespan."""
    tail_share: float = 0.05
    """The most of the GPUs the jobs the tail guard chooses may hold (the longest always)."""
    tail_every: float = 3600.0
    """Seconds between two choices of the tail guard; a job with less work left than that is
    never chosen."""

    def __post_init__(self) -> None:
        """Refuse values of the wrong type or outside their range, naming the option."""
        for f in fields(self):
            value = getattr(self, f.name)
            kind = type(f.default)
            ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                ok = True
            if not ok:
                raise PolicyOptionError(
                    f"gandiva option {f.name}={value!r}: expected {kind.__name__}"
                )
        for name, low, strict in _LOWER_BOUNDS:
            value = getattr(self, name)
            if value < low or (strict and value == low):
                bound = f"> {low:g}" if strict else f">= {low:g}"
                raise PolicyOptionError(f"gandiva option {name}={value!r}: must be {bound}")
        if self.order not in ORDERS:
            raise PolicyOptionError(
                f"gandiva option order={self.order!r}: must be one of {', '.join(ORDERS)}"
            )
        if self.level_factor <= 1:
            raise PolicyOptionError(
                f"gandiva option level_factor={self.level_factor!r}: must be > 1"
            )

    def ranking(self) -> las.Levels | None:
        """The least-attained-service levels when ``order`` is ``las``, else None."""
        if self.order != "las":
            return None
        return las.Levels(
            self.levels,
            self.level_base,
            self.level_factor,
            self.promote_after,
            smaller_first=self.smaller_first,
        )


_LOWER_BOUNDS: tuple[tuple[str, float, bool], ...] = (
    ("quantum", 0.0, True),
    ("checkpoint_quantum", 0.0, True),
    ("reconsider_every", 0.0, False),
    ("max_height", 1.0, False),
    ("pack_util_limit", 0.0, True),
    ("pack_keep_above", 0.0, False),
    ("max_packs_per_pass", 0.0, False),
    ("max_moves_per_pass", 0.0, False),
    ("defrag_threshold", 1.0, False),
    ("grow_idle_period", 0.0, False),
    ("starvation_limit", 0.0, False),
    ("levels", 1.0, False),
    ("level_base", 0.0, True),
    ("promote_after", 0.0, False),
    ("tail_share", 0.0, False),
    ("tail_every", 0.0, True),
)
"""(option, lower bound, whether the bound itself is refused)."""


class GandivaPolicy:
    """Gandiva introspective scheduling (DESIGN §2.1), least attained service first by default."""

    name = "gandiva"

    def __init__(self, config: GandivaConfig | None = None, **options: Any) -> None:
        """Build from a config, or from keyword overrides of the default config."""
        known = {f.name for f in fields(GandivaConfig)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise PolicyOptionError(
                f"gandiva has no option {unknown[0]!r} (options: {', '.join(sorted(known))})"
            )
        base = config or GandivaConfig()
        self.config = replace(base, **options)
        self.levels = self.config.ranking()
        self._memory = packing.PackingMemory()
        cfg = self.config
        self._turns = (
            packing.TurnPacking(
                self._memory, cfg.pack_util_limit, cfg.pack_keep_above, cfg.interference
            )
            if cfg.packing
            else None
        )
        """How turns pack (None: they do not); the same every pass."""
        self._idle_since: float | None = None
        self._reconsider_at = 0.0
        self._reconsidered_at: tuple[ClusterState, int, int] | None = None
        self._passed: tuple[float, ClusterState, int] | None = None
        self._due: list[float] = []
        self._waiting: las.Waiting = {}
        self._promotions = None if self.levels is None else las.Promotions(self.levels)
        self._displaced: tuple[ClusterState, int, int, float | None] | None = None
        self._standings = None if self.levels is None else las.Standings()
        self._orders: dict[tuple[int, int], las.Order] = {}
        """Pending buckets in rank order, by priority and size."""
        self._tail_notes: dict[str, str] = {}
        """The jobs the tail guard chose at its last check, and why."""
        self._tail_bases: dict[str, float] = {}
        """Their service at that check: it counts from there (:meth:`_keep_tail`)."""
        self._tail_model: ClusterState | None = None
        """The model that got them last."""
        self._tail_at = 0.0

    def _rank(self, state: ClusterState, now: float) -> las.Ranking | None:
        if self.levels is None:
            return None
        self._waiting = las.forget_finished(self._waiting, state)
        return las.Ranking(self.levels, now, self._waiting, self._standings, self._tail_notes)

    def _keep_tail(self, state: ClusterState, now: float, *, choose: bool = False) -> None:
        """Count the service of the jobs the tail guard chose from its last check, as a promotion.

        With ``choose``, at most every ``tail_every`` seconds, the guard
        chooses the critical jobs (:mod:`gctl.core.tail`) and their service
        counts again from zero, so they go back to the first level. A model
        gets that once: the daemon loads a fresh one every pass, a simulator
        keeps its own; a later promotion is never undone.
        """
        cfg, promotions = self.config, self._promotions
        if not cfg.tail_guard or self.levels is None or promotions is None:
            return
        if choose and now >= self._tail_at:
            self._tail_at = now + cfg.tail_every
            chosen = tail.critical(state, now, cfg.tail_share, cfg.tail_every)
            self._tail_notes = {j: c.describe() for j, c in chosen.items()}
            self._tail_bases = {j: state.jobs[j].attained_at(now) for j in chosen}
            self._tail_model = None
        if state is self._tail_model:
            return
        self._tail_model = state
        for job_id, base in self._tail_bases.items():
            js = state.jobs.get(job_id)
            if js is not None and js.service_base < base:
                js.service_base = base
                promotions.promoted += 1
                self._reranked(js)

    def _reranked(self, js: JobState) -> None:
        """Rank ``js`` again where the policy keeps ranks: it was promoted."""
        if js.status is JobStatus.PENDING:
            order = self._orders.get((int(js.spec.priority), js.spec.gpus))
            if order is not None:
                order.rerank(js)
        elif js.gpus and self._standings is not None:
            self._standings.forget(js.gpus)

    def schedule(self, state: ClusterState, now: float) -> list[Decision]:
        """Reactive pass: hand on freed slices, shrink on demand, place, un-slice, unpack."""
        cfg = self.config
        self._keep_tail(state, now)
        rank = self._rank(state, now)
        out = timeslice.resume_idle_sets(state, now, rank)
        if cfg.elastic and state.elastic and state.pending:
            demand = sum(g for (_, g), jobs in state.pending.items() for _ in jobs)
            if demand > state.total_free:
                out += elastic.shrink(state, now, demand - state.total_free)
        out += self._unstarve(state, now)
        out += self._place_pending(state, now, rank)
        if cfg.migration:
            out += migration.unslice(state, now)
            out += migration.unpack(state, now)
            out += timeslice.resume_idle_sets(state, now, rank)
        if self._promotions is not None:
            self._promotions.watch(state, (d.job_id for d in out))
        return out

    def _unstarve(self, state: ClusterState, now: float) -> list[Decision]:
        """Make room for the first job of a size below its share that waited past the limit."""
        if not self.config.starvation_guard or not state.pending:
            return []
        starved = starvation.starving(state, now, self.config.starvation_limit)
        return [] if starved is None else starvation.unstarve(state, *starved, now)

    def _place_pending(
        self, state: ClusterState, now: float, rank: las.Ranking | None
    ) -> list[Decision]:
        """Algorithm 1 for each pending job: best-ranked first (priority, then arrival).

        With least attained service the rank is priority, then level, then
        arrival (fewer GPUs first with ``smaller_first``). A job that cannot
        be placed holds back the later jobs of its bucket (same priority and
        size): they would get the same answer.
        """
        height = self.config.max_height if self.config.timeslicing else 1.0
        heads: list[tuple[tuple[int, ...], str, tuple[int, int]]] = []
        iters: dict[tuple[int, int], Iterator[_Ranked]] = {}
        for key in state.pending:
            iters[key] = it = self._in_order(state, key)
            rank_of, first = next(it)
            heads.append((rank_of, first.id, key))
        heapq.heapify(heads)
        out: list[Decision] = []
        while heads:
            _, job_id, key = heapq.heappop(heads)
            js = state.jobs[job_id]
            out += placement.place(state, js, now, height, interference=self.config.interference)
            if not js.gpus:
                continue
            nxt = next(iters[key], None)
            if nxt is not None:
                heapq.heappush(heads, (nxt[0], nxt[1].id, key))
        return out

    def _in_order(self, state: ClusterState, key: tuple[int, int]) -> Iterator[_Ranked]:
        """The jobs of pending bucket ``key`` with their ranks, best first.

        A bucket holds one priority in arrival order; by least attained
        service its order is by level, then that order (:class:`las.Order`).
        """
        prio = -key[0]
        if self.levels is None:
            for j in list(state.pending[key]):
                js = state.jobs[j]
                yield (prio, js.seq), js
            return
        order = self._orders.get(key)
        if order is None:
            order = self._orders[key] = las.Order(self.levels)
        size = self.levels.size_term(key[1])
        for level, seq, j in list(order.entries(state, key)):
            yield (prio, level, size, seq), state.jobs[j]

    def _displace(self, state: ClusterState, now: float, rank: las.Ranking) -> list[Decision]:
        """Requeue jobs of a higher level for waiting jobs, best-ranked first.

        A bucket (priority and size) whose best-ranked job finds no room is
        passed over for the rest of the pass: its later jobs would not either.

        Only jobs that can checkpoint, of lower priority or of the same
        priority and a higher level (more attained service) than the waiting
        job are displaced, those of the highest levels first; they wait in
        the queue with their progress kept. (Within a level jobs are not
        displaced: each displacement costs a checkpoint and restore.)
        """
        out: list[Decision] = []
        sets = self._standings
        assert sets is not None
        sets.update(state, rank)
        top = sets.top()
        if not top:
            return out
        lowest = min(top)
        stuck: set[tuple[int, int]] = set()  # a bucket whose best job found no room
        room: dict[tuple[int, int], tuple[int, int]] = {}  # starvation.room by priority, level

        def candidates(key: tuple[int, int]) -> Iterator[_Ranked]:
            """The bucket's jobs that some job on GPUs ranks below, best first, until stuck."""
            prio = key[0]
            for ranked in self._in_order(state, key):
                if key in stuck or (prio <= lowest and top.get(prio, -1) <= ranked[0][1]):
                    return  # later jobs of the bucket have no lower level
                yield ranked

        merged = heapq.merge(*(candidates(k) for k in list(state.pending)), key=itemgetter(0))
        for _, js in merged:
            bucket = (int(js.spec.priority), js.spec.gpus)
            if bucket in stuck or js.status is not JobStatus.PENDING:
                continue
            level = rank.level(js)
            yields = sets.yielding_to(bucket[0], level)
            bound = room.get((bucket[0], level))
            if bound is None:
                bound = room[bucket[0], level] = starvation.room(state, yields)
            if js.spec.gpus > bound[js.spec.gpus > state.max_size]:
                stuck.add(bucket)
                continue
            because = f"it has had less GPU time ({rank.describe(js)})"
            made = starvation.make_room(state, js, yields, sets.weight, now, because)
            if made:
                room.clear()  # the GPUs taken no longer yield as they did
                sets.update(state, rank)
            else:
                stuck.add(bucket)
            out += made
        return out

    def introspect(self, state: ClusterState, now: float) -> list[Decision]:
        """Introspective pass: rotate time slices every quantum; reconsider placements less often.

        With least attained service, waiting jobs due for promotion are
        promoted first, and the best-ranked waiting job of each size may
        displace jobs of higher levels. Pack reviews, packing, regrouping and
        defragmentation run at most every ``reconsider_every`` seconds, and
        only when the cluster changed since the last time they ran: they
        scan every GPU set, and their inputs (profiles, free GPUs) change far
        more slowly than a quantum.
        """
        cfg = self.config
        self._keep_tail(state, now, choose=True)
        rank = self._rank(state, now)
        if self._promotions is not None:
            for js in self._promotions.promote(state, now):
                self._reranked(js)
        turns_due: list[float] = []
        out = timeslice.resume_idle_sets(state, now, rank)
        freed = self._unstarve(state, now)
        if rank is not None and state.pending and self._may_displace(state, now):
            freed += self._displace(state, now, rank)
        if freed or (state.pending and state.total_free):
            out += freed + self._place_pending(state, now, rank)
        if cfg.timeslicing:
            out += timeslice.rotate(
                state, now, cfg.quantum, cfg.checkpoint_quantum, self._turns, rank, turns_due
            )
        if self._reconsider_due(state, now):
            self._reconsider_at = now + self.config.reconsider_every
            out += self._reconsider(state, now)
            self._reconsidered_at = self._version(state)
        if cfg.elastic and state.elastic:
            out += self._grow_when_idle(state, now)
        out += timeslice.resume_idle_sets(state, now, rank)
        self._passed = (now, state, state.changes)
        if rank is not None:
            self._note_dues(state, rank, out, turns_due)
        return out

    def _note_dues(
        self, state: ClusterState, rank: las.Ranking, out: list[Decision], turns_due: list[float]
    ) -> None:
        """Note when the next pass could decide something by least attained service.

        Runners cross levels and waiting jobs come due for promotion at
        scattered moments: they are looked at together, at most one pass per
        ``reconsider_every`` seconds, a small delay next to a level or to a
        wait of hours.
        """
        assert self._promotions is not None and self._standings is not None
        self._promotions.watch(state, (d.job_id for d in out))
        grid = max(self.config.reconsider_every, self.config.quantum)
        due: list[float] = []
        if state.pending or state.shared:  # nobody waiting: no crossing matters
            self._standings.update(state, rank)
            crossing = self._standings.next_crossing()
            if crossing is not None:
                due.append(math.ceil(crossing / grid) * grid)
        promoted = self._promotions.promoted
        self._displaced = (state, state.changes, promoted, min(due, default=None))
        promotion = self._promotions.next_due(state)
        if promotion is not None:
            due.append(math.ceil(promotion / grid) * grid)
        self._due = turns_due + due

    def _may_displace(self, state: ClusterState, now: float) -> bool:
        """Whether a displacement could be found that the last pass did not find.

        Not while the model, its jobs' promotions and the levels of the jobs
        on GPUs (no runner crossed into a higher level) are as they were.
        """
        if self._displaced is None:
            return True
        seen, changes, promoted, crossing = self._displaced
        now_promoted = self._promotions.promoted if self._promotions else 0
        if seen is not state or changes != state.changes or promoted != now_promoted:
            return True
        return crossing is not None and crossing <= now

    @staticmethod
    def _version(state: ClusterState) -> tuple[ClusterState, int, int]:
        """What the cluster looks like, as far as reconsidering goes: the same model unchanged.

        A model the daemon loads afresh each pass counts as changed.
        """
        return (state, state.changes, state.samples)

    def _reconsider_due(self, state: ClusterState, now: float) -> bool:
        """At most once per ``reconsider_every`` seconds, after a change."""
        if self._version(state) == self._reconsidered_at:
            return False
        return now >= self._reconsider_at

    def _reconsider(self, state: ClusterState, now: float) -> list[Decision]:
        """Review packs, pack waiting jobs, un-slice, unpack, regroup spread jobs, defragment."""
        cfg = self.config
        out: list[Decision] = []
        if cfg.packing:
            self._memory.prune(state.jobs)
            out += packing.review_packs(state, now, self._memory, cfg.pack_keep_above)
            if state.shared:
                limits = packing.PackLimits(
                    cfg.pack_util_limit,
                    cfg.pack_keep_above,
                    cfg.max_packs_per_pass,
                    cfg.max_height,
                    cfg.interference,
                )
                out += packing.pack_waiting(state, now, self._memory, limits)
        if cfg.migration:
            out += migration.unslice(state, now)
            out += migration.unpack(state, now)
            out += migration.regroup(state, now, cfg.max_moves_per_pass)
            if state.pending or state.shared:
                out += migration.defragment(
                    state, now, cfg.defrag_threshold, cfg.max_moves_per_pass
                )
        return out

    def _grow_when_idle(self, state: ClusterState, now: float) -> list[Decision]:
        idle = state.total_free > 0 and not state.pending and not state.shared
        if not idle:
            self._idle_since = None
            return []
        if self._idle_since is None:
            self._idle_since = now
        if now - self._idle_since < self.config.grow_idle_period:
            return []
        return elastic.grow(state, now, self.config.grow_idle_period)

    def wants_introspection(self, state: ClusterState) -> bool:
        """Whether a pass could change anything: shared sets, queued, spread or elastic jobs."""
        return bool(state.shared or state.pending or state.scattered or state.elastic)

    def steady(self) -> bool:
        """Yes: with nobody waiting it only unpacks and hands turns on, on what changed."""
        return True

    def wake_at(self, state: ClusterState, now: float) -> float | None:
        """The earliest time a pass could decide anything if no event comes first; None: never.

        Round robin hands turns on every quantum, so it is always due. With
        least attained service, nothing changes between events except at
        known moments: a runner entering a higher level, a waiting job due
        for promotion or for the size-share guard, the next reconsideration
        after a change, elastic growth after an idle period. Simulators use
        this to jump the clock over passes that would decide nothing.
        """
        cfg = self.config
        levels = self.levels
        if not self.wants_introspection(state):
            return None
        passed = self._passed
        if levels is None or (cfg.elastic and state.elastic):
            return now
        if passed is None or passed[1] is not state or passed[2] != state.changes:
            return now
        due: list[float] = []
        if self._version(state) != self._reconsidered_at:
            due.append(self._reconsider_at)
        if cfg.starvation_guard:
            due += [
                state.jobs[next(iter(b))].since + cfg.starvation_limit
                for (_, count), b in state.pending.items()
                if count > 1
            ]
        due += self._due
        # What was due by the last pass was looked at then, and nothing changed since.
        due = [t for t in due if t > passed[0]]
        return max(min(due), now) if due else None
