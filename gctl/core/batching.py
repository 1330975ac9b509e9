"""Batch-size curves and per-worker batch balancing: the interference patent's second half.

A data-parallel job runs each step at the pace of its slowest worker. On
unequal GPUs (types, or one shared with another job) an equal split of the
global batch leaves the fast workers waiting. Each worker's compute time per
step is modelled as linear in its local batch, ``t(b) = alpha + beta * b``
(:class:`Curve`, fitted by least squares to measured ``(b, t)`` points,
:func:`fit`); :func:`balance` splits the global batch so every worker's
predicted time is equal: with ``t = alpha_i + beta_i * b_i`` for all ``i`` and
``sum(b_i) = B``, ``t = (B + sum(alpha_i / beta_i)) / sum(1 / beta_i)``.
The global batch never changes, so the job trains the same model as before.

:func:`profile_splits` gives the few splits a new job's first steps run at
so that each worker is measured at more than one batch size (same global
batch throughout).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

PROFILE_SKEW = 0.25
"""How far the profile's splits move each worker's batch from the equal share (±25 %)."""


@dataclass(frozen=True, slots=True)
class Curve:
    """Seconds of compute per step at local batch ``b``: ``alpha + beta * b``."""

    alpha: float
    beta: float

    def time(self, batch: float) -> float:
        """Predicted seconds per step at ``batch``."""
        return self.alpha + self.beta * batch

    def slowed(self, factor: float) -> Curve:
        """The curve of the same worker running ``factor`` times slower (a shared GPU)."""
        return Curve(self.alpha * factor, self.beta * factor)


def fit(points: Sequence[tuple[float, float]]) -> Curve | None:
    """Least-squares line through ``(batch, seconds)`` points; None without two distinct batches.

    The slope must come out positive (more samples never take less time);
    a negative intercept is clamped to 0 and the slope refitted through the
    origin, so the curve never predicts negative time.
    """
    pts = [(float(b), float(t)) for b, t in points if b > 0 and t > 0 and math.isfinite(t)]
    if len({b for b, _ in pts}) < 2:
        return None
    n = len(pts)
    mb = sum(b for b, _ in pts) / n
    mt = sum(t for _, t in pts) / n
    sbb = sum((b - mb) ** 2 for b, _ in pts)
    beta = sum((b - mb) * (t - mt) for b, t in pts) / sbb
    if beta <= 0:
        return None
    alpha = mt - beta * mb
    if alpha < 0:
        beta = sum(b * t for b, t in pts) / sum(b * b for b, _ in pts)
        alpha = 0.0
    return Curve(alpha, beta)


def equal_split(global_batch: int, workers: int) -> list[int]:
    """The global batch in ``workers`` shares differing by at most one sample."""
    base, extra = divmod(global_batch, workers)
    return [base + (1 if i < extra else 0) for i in range(workers)]


def balance(global_batch: int, curves: Sequence[Curve]) -> list[int]:
    """Local batches (summing to ``global_batch``, each at least 1) of equal predicted time.

    A worker so slow that its share would fall below one sample gets one,
    and the others are balanced among themselves. Fractions are rounded by
    largest remainder. Raises ValueError when there are more workers than
    samples or no curves.
    """
    n = len(curves)
    if n == 0 or global_batch < n:
        raise ValueError(f"cannot split a batch of {global_batch} over {n} worker(s)")
    pinned: set[int] = set()
    while True:
        free = [i for i in range(n) if i not in pinned]
        left = global_batch - len(pinned)
        t = (left + sum(curves[i].alpha / curves[i].beta for i in free)) / sum(
            1 / curves[i].beta for i in free
        )
        shares = {i: (t - curves[i].alpha) / curves[i].beta for i in free}
        # a share of exactly 1 can come out a rounding error below it: not low
        low = [i for i, b in shares.items() if b < 1 - 1e-9]
        if not low:
            break
        pinned.update(low)
    exact = [1.0 if i in pinned else shares[i] for i in range(n)]
    out = [max(1, math.floor(b)) for b in exact]
    by_remainder = sorted(range(n), key=lambda i: (-(exact[i] - out[i]), i))
    k = 0
    while sum(out) < global_batch:
        out[by_remainder[k % n]] += 1
        k += 1
    while sum(out) > global_batch:  # a floor raised to 1 took a sample too many
        i = max(range(n), key=lambda j: (out[j] - exact[j], out[j]))
        out[i] -= 1
    return out


def step_time(split: Sequence[int], curves: Sequence[Curve]) -> float:
    """Predicted seconds of a step under ``split``: the slowest worker's."""
    return max(c.time(b) for b, c in zip(split, curves, strict=True))


def profile_splits(global_batch: int, workers: int) -> list[list[int]]:
    """The splits a new job profiles at: equal, then skewed one way, then the other.

    Skewed: even workers take ``1 - PROFILE_SKEW`` of the equal share and
    odd ones the rest, then the reverse; so every worker is measured at two
    or three batch sizes while the global batch stays the same. A job of
    one worker, or too small a batch to skew, gets the equal split only.
    """
    equal = equal_split(global_batch, workers)
    if workers < 2:
        return [equal]
    out = [equal]
    for low in (0, 1):
        split = [
            max(1, round(b * (1 - PROFILE_SKEW))) if i % 2 == low else b
            for i, b in enumerate(equal)
        ]
        givers = [i for i in range(workers) if i % 2 != low]
        short = global_batch - sum(split)
        for k in range(short):
            split[givers[k % len(givers)]] += 1
        if split != equal and split not in out:
            out.append(split)
    return out
