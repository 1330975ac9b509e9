"""GPU topology inside a node: pair link scores and the best-connected GPU set.

Scores follow the Inspur table (DESIGN §2.5): GPUs on different CPU sockets
10, same socket across PCIe host bridges 20, behind one PCIe switch 50,
NVLink 100 per link (at most 500). A multi-GPU job gets the free set with the
highest summed pair score, so it lands on NVLink or switch peers when it can.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum
from itertools import combinations

from gctl.core.model import GPU

CROSS_SOCKET = 10
SAME_SOCKET = 20
SAME_SWITCH = 50
NVLINK_PER_LINK = 100
NVLINK_MAX = 500

_EXACT_SEARCH_LIMIT = 400
"""Above this many candidate sets, choose greedily instead of exhaustively."""


class Spread(IntEnum):
    """How far apart a job's GPUs are, from best to worst locality."""

    SINGLE = 0
    SAME_SWITCH = 1
    SAME_SOCKET = 2
    CROSS_SOCKET = 3
    CROSS_NODE = 4


def link_score(a: GPU, b: GPU) -> int:
    """Score of the link between two GPUs of one node (higher is better)."""
    links = sum(n for peer, n in a.nvlink if peer == b.index)
    if links:
        return min(NVLINK_PER_LINK * links, NVLINK_MAX)
    if a.socket != b.socket:
        return CROSS_SOCKET
    if a.pcie_switch != b.pcie_switch:
        return SAME_SOCKET
    return SAME_SWITCH


def pair_spread(a: GPU, b: GPU) -> Spread:
    """Locality class of one GPU pair on the same node."""
    if a.socket != b.socket:
        return Spread.CROSS_SOCKET
    if a.pcie_switch != b.pcie_switch and not any(p == b.index for p, _ in a.nvlink):
        return Spread.SAME_SOCKET
    return Spread.SAME_SWITCH


class Topology:
    """Link scores of one node layout, with a cache of best GPU sets.

    Nodes with identical GPU layouts share one instance, so the cache serves
    a whole homogeneous cluster.
    """

    def __init__(self, gpus: tuple[GPU, ...]) -> None:
        """Precompute the pair score matrix of ``gpus``."""
        self.gpus = gpus
        self.size = len(gpus)
        self.score = [[link_score(a, b) if a is not b else 0 for b in gpus] for a in gpus]
        self._best: dict[tuple[int, int], tuple[int, ...] | None] = {}
        self._spread: dict[tuple[int, ...], Spread] = {}

    def set_score(self, indices: tuple[int, ...]) -> int:
        """Summed pair score of a GPU set."""
        s = self.score
        return sum(s[a][b] for a, b in combinations(indices, 2))

    def spread(self, indices: tuple[int, ...]) -> Spread:
        """Worst locality class among the pairs of a GPU set on this node."""
        worst = self._spread.get(indices)
        if worst is None:
            worst = Spread.SINGLE
            for a, b in combinations(indices, 2):
                worst = max(worst, pair_spread(self.gpus[a], self.gpus[b]))
            self._spread[indices] = worst
        return worst

    def best_set(self, free_mask: int, count: int) -> tuple[int, ...] | None:
        """Best-connected ``count`` GPUs among those set in ``free_mask``, or None.

        Ties go to the lowest indices, which keeps single-GPU jobs packed
        towards the low switches and leaves whole switches free.
        """
        key = (free_mask, count)
        hit = self._best.get(key)
        if hit is not None or key in self._best:
            return hit
        free = [i for i in range(self.size) if free_mask >> i & 1]
        result: tuple[int, ...] | None
        sets: Iterable[tuple[int, ...]]
        if len(free) < count:
            result = None
        elif count == len(free):
            result = tuple(free)
        elif count == 1:
            result = (free[0],)
        elif _n_choose_k(len(free), count) <= _EXACT_SEARCH_LIMIT:
            sets = combinations(free, count)
            result = max(sets, key=self.set_score)
        else:
            result = self._greedy(free, count)
        self._best[key] = result
        return result

    def extend(self, held: tuple[int, ...], free_mask: int, extra: int) -> tuple[int, ...] | None:
        """``held`` plus the ``extra`` free GPUs best linked to it and each other, or None."""
        free = [i for i in range(self.size) if free_mask >> i & 1 and i not in held]
        if len(free) < extra:
            return None
        if _n_choose_k(len(free), extra) <= _EXACT_SEARCH_LIMIT:
            add = max(
                combinations(free, extra),
                key=lambda more: self.set_score(tuple(sorted(held + more))),
            )
            return tuple(sorted(held + add))
        chosen = list(held)
        for _ in range(extra):
            nxt = max(free, key=lambda i: sum(self.score[i][c] for c in chosen))
            chosen.append(nxt)
            free.remove(nxt)
        return tuple(sorted(chosen))

    def _greedy(self, free: list[int], count: int) -> tuple[int, ...]:
        """Grow a set from each seed by its best-linked GPU; keep the best set."""
        best: tuple[int, ...] = ()
        best_score = -1
        for seed in free:
            chosen = [seed]
            rest = [i for i in free if i != seed]
            while len(chosen) < count:
                nxt = max(rest, key=lambda i: sum(self.score[i][c] for c in chosen))
                chosen.append(nxt)
                rest.remove(nxt)
            cand = tuple(sorted(chosen))
            sc = self.set_score(cand)
            if sc > best_score:
                best, best_score = cand, sc
        return best


def _n_choose_k(n: int, k: int) -> int:
    """Binomial coefficient, small and exact."""
    out = 1
    for i in range(k):
        out = out * (n - i) // (i + 1)
    return out
