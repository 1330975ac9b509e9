"""``gctl defrag``: one defragmentation pass of the scheduler core over the stored cluster.

The store is read into the core's state (:mod:`gctl.store.snapshot`) and the
same ``defragment`` step the daemon and ``gctl sim`` use plans the moves:
the most-free busy node is emptied into fuller ones, only by jobs that keep
or improve their locality, until no node has ``threshold`` free GPUs. The
plan says what it gains: whole nodes free and the largest free block before
and after. Carrying it out means checkpoint-migrating running jobs, which is
the daemon's work, so the moves are recorded as ``migrate --to`` intents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gctl.core import migration
from gctl.core.decisions import Migrate
from gctl.core.policies.gandiva import GandivaConfig
from gctl.core.state import ClusterState
from gctl.services import access, jobs
from gctl.services.db import Store
from gctl.services.errors import ServiceError
from gctl.store.models import now
from gctl.store.snapshot import read


@dataclass(frozen=True, slots=True)
class Move:
    """One planned migration: a job from its GPUs to a fuller node's."""

    job_id: int
    src: str
    dst: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form with stable keys."""
        return {"job_id": self.job_id, "from": self.src, "to": self.dst, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Plan:
    """The moves of one pass and what they gain."""

    moves: tuple[Move, ...]
    free_nodes_before: int
    free_nodes_after: int
    largest_free_before: int
    largest_free_after: int
    recorded: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON form with stable keys."""
        return {
            "moves": [m.to_dict() for m in self.moves],
            "free_nodes": {"before": self.free_nodes_before, "after": self.free_nodes_after},
            "largest_free_block": {
                "before": self.largest_free_before,
                "after": self.largest_free_after,
            },
            "recorded": self.recorded,
        }


def _gpus(refs: tuple[tuple[str, int], ...]) -> str:
    """GPU refs of one node as ``NODE:I,J`` (the form ``gctl migrate --to`` takes)."""
    return f"{refs[0][0]}:" + ",".join(str(i) for _, i in refs)


def _free(state: ClusterState) -> tuple[int, int]:
    """Whole open nodes free, and the most free GPUs on one open node."""
    open_nodes = [n for n in state.nodes.values() if n.open]
    whole = sum(1 for n in open_nodes if n.free == n.size)
    return whole, max((n.free for n in open_nodes), default=0)


def plan(
    store: Store,
    *,
    threshold: int | None = None,
    max_moves: int | None = None,
    record: bool = False,
) -> Plan:
    """Plan one pass; with ``record`` (operators), store each move as a migrate intent."""
    if record:
        access.operator_only(store, "gctl defrag")
    cfg = GandivaConfig()
    threshold = cfg.defrag_threshold if threshold is None else threshold
    max_moves = cfg.max_moves_per_pass if max_moves is None else max_moves
    if threshold < 1 or max_moves < 1:
        raise ServiceError("--threshold and --max-moves must be at least 1")
    at = now()
    snap = read(store.engine, now=at)
    before = _free(snap.state)
    decisions = migration.defragment(snap.state, at, threshold, max_moves)
    after = _free(snap.state)
    moves = tuple(
        Move(snap.job_ids[d.job_id], _gpus(d.src), _gpus(d.dst), d.reason)
        for d in decisions
        if isinstance(d, Migrate)
    )
    for m in moves if record else ():
        jobs.act(store, m.job_id, "migrate", to=m.dst, reason=m.reason)
    return Plan(moves, before[0], after[0], before[1], after[1], recorded=record and bool(moves))
