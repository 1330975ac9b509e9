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
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, fields, replace
from typing import Any

from gctl.core import elastic, migration, packing, placement, starvation, timeslice
from gctl.core.decisions import Decision
from gctl.core.policy import PolicyOptionError
from gctl.core.state import ClusterState


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
    max_packs_per_pass: int = 32
    migration: bool = True
    max_moves_per_pass: int = 32
    defrag_threshold: int = 2
    elastic: bool = True
    grow_idle_period: float = 600.0
    starvation_guard: bool = True
    starvation_limit: float = 259200.0

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
)
"""(option, lower bound, whether the bound itself is refused)."""


class GandivaPolicy:
    """Gandiva introspective scheduling (DESIGN §2.1)."""

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
        self._memory = packing.PackingMemory()
        self._idle_since: float | None = None
        self._reconsidered: float | None = None

    def schedule(self, state: ClusterState, now: float) -> list[Decision]:
        """Reactive pass: hand on freed slices, shrink on demand, place pending, un-slice."""
        cfg = self.config
        out = timeslice.resume_idle_sets(state, now)
        if cfg.elastic and state.elastic and state.pending:
            demand = sum(g for (_, g), jobs in state.pending.items() for _ in jobs)
            if demand > state.total_free:
                out += elastic.shrink(state, now, demand - state.total_free)
        out += self._unstarve(state, now)
        out += self._place_pending(state, now)
        if cfg.migration:
            out += migration.unslice(state, now)
            out += timeslice.resume_idle_sets(state, now)
        return out

    def _unstarve(self, state: ClusterState, now: float) -> list[Decision]:
        """Make room for the first job of a size below its share that waited past the limit."""
        if not self.config.starvation_guard or not state.pending:
            return []
        starved = starvation.starving(state, now, self.config.starvation_limit)
        return [] if starved is None else starvation.make_room(state, *starved, now)

    def _place_pending(self, state: ClusterState, now: float) -> list[Decision]:
        """Algorithm 1 for each pending job, high priority first, then in arrival order.

        A job that cannot be placed holds back the later jobs of its bucket
        (same priority and size): they would get the same answer.
        """
        height = self.config.max_height if self.config.timeslicing else 1.0
        iters = {key: iter(list(bucket)) for key, bucket in state.pending.items()}
        heads: list[tuple[int, int, str, tuple[int, int]]] = []
        for key, it in iters.items():
            first = next(it)
            heads.append((-key[0], state.jobs[first].seq, first, key))
        heapq.heapify(heads)
        out: list[Decision] = []
        while heads:
            _, _, job_id, key = heapq.heappop(heads)
            js = state.jobs[job_id]
            out += placement.place(state, js, now, height)
            if not js.gpus:
                continue
            nxt = next(iters[key], None)
            if nxt is not None:
                heapq.heappush(heads, (-key[0], state.jobs[nxt].seq, nxt, key))
        return out

    def introspect(self, state: ClusterState, now: float) -> list[Decision]:
        """Introspective pass: rotate time slices every quantum; reconsider placements less often.

        Pack reviews, packing, regrouping and defragmentation run at most
        every ``reconsider_every`` seconds: they scan every GPU set, and their
        inputs (profiles, free GPUs) change far more slowly than a quantum.
        """
        cfg = self.config
        out = timeslice.resume_idle_sets(state, now)
        freed = self._unstarve(state, now)
        if freed:
            out += freed + self._place_pending(state, now)
        if cfg.timeslicing:
            turns = (
                packing.TurnPacking(self._memory, cfg.pack_util_limit, cfg.pack_keep_above)
                if cfg.packing
                else None
            )
            out += timeslice.rotate(state, now, cfg.quantum, cfg.checkpoint_quantum, turns)
        if self._reconsidered is None or now - self._reconsidered >= cfg.reconsider_every:
            self._reconsidered = now
            out += self._reconsider(state, now)
        if cfg.elastic and state.elastic:
            out += self._grow_when_idle(state, now)
        return out + timeslice.resume_idle_sets(state, now)

    def _reconsider(self, state: ClusterState, now: float) -> list[Decision]:
        """Review packs, pack waiting jobs, regroup spread jobs, defragment."""
        cfg = self.config
        out: list[Decision] = []
        if cfg.packing:
            self._memory.prune(state.jobs)
            out += packing.review_packs(state, now, self._memory, cfg.pack_keep_above)
            if state.shared:
                out += packing.pack_waiting(
                    state,
                    now,
                    self._memory,
                    cfg.pack_util_limit,
                    cfg.max_packs_per_pass,
                    cfg.max_height,
                )
        if cfg.migration:
            out += migration.unslice(state, now)
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
