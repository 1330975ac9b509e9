"""Interference between jobs sharing a GPU: predicted slow-down, and partners chosen by it.

The first half of the interference patent (DESIGN §2.4). A job's
*slow-down* ``d = T'/T`` beside a partner is its iteration time packed over
its iteration time alone (1.0: unharmed; 2.0: half speed). Jobs are known
by their *kind*: the ``--profile`` name (in the simulator, the trace's model
name). :class:`Predictor` answers, best source first:

``observed``
    the mean (in log) of the slow-downs measured for that pair of kinds, from
    co-runs packing already measures;
``model``
    a low-rank model of log slow-down fitted to every co-run known (observed
    ones and, for known model kinds, the pair table):
    ``log d(a|b) = mu + s_a + p_b + u_a . v_b``, where ``s_a`` is how
    sensitive kind ``a`` is, ``p_b`` how aggressive ``b`` is and ``u_a . v_b``
    their rank-``r`` interaction; fitted by alternating ridge least squares
    (collaborative filtering, as Paragon and Gavel's estimator do). It
    predicts pairs never run from how each kind behaved beside others;
``neighbour``
    a kind the model never saw borrows the parameters of the known kind
    nearest in its features (GPU utilisation, GPU memory as a share of 16 GB)
    when one is near enough (:data:`NEIGHBOUR_RADIUS`); a pair with one side
    known and the other not is predicted from the known side's bias alone;
``default``
    nothing known: :data:`DEFAULT_SLOWDOWN` each.

Everything here is pure: the daemon and the simulator build a predictor from
what they know and hand it to the policy through
:attr:`gctl.core.state.ClusterState.interference`; :func:`best_partner` is
the placement mechanism any policy can call with it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from gctl.core.state import JobState

DEFAULT_SLOWDOWN = 1.0 / 0.6
"""Slow-down of each job of a pair nothing is known about (0.6 of its speed, as the simulator)."""

RANK = 5
"""Interaction rank of the model: the pair table's held-out error falls up to rank 5
(``bench/interference.py``)."""

RIDGE = 0.02
"""Ridge penalty of each parameter, per observation."""

NEIGHBOUR_RADIUS = 0.15
"""Farthest (in :meth:`Features.distance`) a known kind may be to lend an unknown one its
parameters: a job of 39 % utilisation is like neither a 14 % nor a 64 % one."""

SWEEPS = 40
"""Alternating least-squares sweeps of a fit."""

_MEMORY_SCALE_MB = 16384.0


@dataclass(frozen=True, slots=True)
class CoRun:
    """One measured slow-down: ``kind`` ran ``slowdown`` times slower beside ``partner``."""

    kind: str
    partner: str
    slowdown: float
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Features:
    """What is known of a kind besides its co-runs: GPU utilisation alone (0..1) and memory."""

    gpu_util: float
    gpu_mem_mb: float

    def distance(self, other: Features) -> float:
        """Euclidean distance, memory as a share of a 16 GB GPU."""
        return math.hypot(
            self.gpu_util - other.gpu_util,
            (self.gpu_mem_mb - other.gpu_mem_mb) / _MEMORY_SCALE_MB,
        )


@dataclass(frozen=True, slots=True)
class Prediction:
    """A predicted slow-down and where it came from (observed, model, neighbour, default)."""

    slowdown: float
    source: str

    @property
    def speed(self) -> float:
        """Speed relative to running alone (1 / slow-down)."""
        return 1.0 / self.slowdown


@dataclass(frozen=True, slots=True)
class _Params:
    """One kind's fitted parameters: as the victim (s, u) and as the partner (p, v)."""

    s: float
    u: tuple[float, ...]
    p: float
    v: tuple[float, ...]


@dataclass(frozen=True)
class Predictor:
    """Predicts the slow-down of a kind beside another (see the module docstring)."""

    mu: float = math.log(DEFAULT_SLOWDOWN)
    params: Mapping[str, _Params] = field(default_factory=dict)
    observed: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """Mean log slow-down of each measured (kind, partner)."""
    features: Mapping[str, Features] = field(default_factory=dict)
    _known: dict[tuple[str, str], Prediction] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Predictions of pairs of known kinds (features play no part), computed once."""

    @classmethod
    def fit(
        cls,
        prior: Iterable[CoRun] = (),
        observed: Iterable[CoRun] = (),
        features: Mapping[str, Features] | None = None,
        *,
        rank: int = RANK,
        ridge: float = RIDGE,
        sweeps: int = SWEEPS,
        seed: int = 0,
    ) -> Predictor:
        """Fit to ``prior`` (the pair table) and ``observed`` co-runs together.

        Observed co-runs are also answered directly for their pair. Raises
        ValueError for a slow-down that is not a positive finite number.
        """
        runs = list(prior)
        seen: dict[tuple[str, str], tuple[float, float]] = {}
        for run in observed:
            total, weight = seen.get((run.kind, run.partner), (0.0, 0.0))
            seen[(run.kind, run.partner)] = (
                total + run.weight * _log(run),
                weight + run.weight,
            )
            runs.append(run)
        mu, params = _fit(runs, rank, ridge, sweeps, seed)
        return cls(
            mu=mu,
            params=params,
            observed={k: t / w for k, (t, w) in seen.items() if w > 0},
            features=dict(features or {}),
        )

    def slowdown(
        self,
        kind: str | None,
        partner: str | None,
        kind_features: Features | None = None,
        partner_features: Features | None = None,
    ) -> Prediction:
        """Predicted slow-down of ``kind`` beside ``partner`` (features: for unknown kinds)."""
        got = self.known(kind, partner)
        if got is not None:
            return got
        return self._predict(kind, partner, kind_features, partner_features)

    def known(self, kind: str | None, partner: str | None) -> Prediction | None:
        """:meth:`slowdown` of two kinds observed together or both fitted (no features needed).

        None when a kind is unnamed, or the pair was neither observed nor fitted:
        then the jobs' features decide.
        """
        if kind is None or partner is None:
            return None
        got = self._known.get((kind, partner))
        if got is not None:
            return got
        seen = self.observed.get((kind, partner))
        if seen is not None:
            got = self._known[(kind, partner)] = Prediction(math.exp(seen), "observed")
            return got
        if kind in self.params and partner in self.params:
            got = self._known[(kind, partner)] = self._predict(kind, partner, None, None)
            return got
        return None

    def _predict(
        self,
        kind: str | None,
        partner: str | None,
        kind_features: Features | None,
        partner_features: Features | None,
    ) -> Prediction:
        """The model's (or a neighbour's, or the default) prediction."""
        a, a_near = self._params(kind, kind_features)
        b, b_near = self._params(partner, partner_features)
        if a is None and b is None:
            return Prediction(DEFAULT_SLOWDOWN, "default")
        log_d = self.mu
        if a is not None:
            log_d += a.s
        if b is not None:
            log_d += b.p
        if a is not None and b is not None:
            log_d += sum(x * y for x, y in zip(a.u, b.v, strict=True))
        source = "neighbour" if a_near or b_near else "model"
        return Prediction(math.exp(log_d), source)

    def _params(self, kind: str | None, features: Features | None) -> tuple[_Params | None, bool]:
        """The kind's parameters, else its nearest neighbour's (and whether it was borrowed)."""
        if kind is not None and kind in self.params:
            return self.params[kind], False
        if features is None:
            return None, False
        known = [(f.distance(features), k) for k, f in self.features.items() if k in self.params]
        if not known or min(known)[0] > NEIGHBOUR_RADIUS:
            return None, False
        return self.params[min(known)[1]], True


@dataclass(frozen=True, slots=True)
class PairOutlook:
    """Predicted speeds of two jobs sharing a GPU set, each relative to running alone."""

    first: Prediction
    second: Prediction

    @property
    def aggregate(self) -> float:
        """Sum of both speeds: above 1.0 the pair beats time slicing."""
        return self.first.speed + self.second.speed

    def pays(self, keep_above: float) -> bool:
        """Whether the pair is predicted to beat time slicing, as packing judges a measured pack."""
        return self.aggregate > keep_above and min(self.first.speed, self.second.speed) >= 0.5

    def describe(self) -> str:
        """``predicted slow-down 1.10x and 1.35x (model)``: for reasons and ``gctl why``."""
        sources = dict.fromkeys((self.first.source, self.second.source))
        return (
            f"predicted slow-down {self.first.slowdown:.2f}x and {self.second.slowdown:.2f}x"
            f" ({', '.join(sources)})"
        )


@dataclass(frozen=True)
class Interference:
    """Predictors per GPU type (keys lower-case), and one for every other type.

    Slow-downs differ by GPU: on gavel's table an A3C job beside ResNet-50
    keeps 0.58 of its speed on a K80 and 0.17 on a V100.
    """

    by_type: Mapping[str, Predictor] = field(default_factory=dict)
    other: Predictor = field(default_factory=Predictor)

    def predictor(self, gpu_type: str) -> Predictor:
        """The predictor of ``gpu_type`` (any case)."""
        return self.by_type.get(gpu_type.lower(), self.other)

    def outlook(self, gpu_type: str, a: JobState, b: JobState) -> PairOutlook:
        """Predicted speeds of jobs ``a`` and ``b`` sharing GPUs of ``gpu_type``."""
        model = self.predictor(gpu_type)
        ka, kb = a.spec.profile, b.spec.profile
        first, second = model.known(ka, kb), model.known(kb, ka)
        if first is None or second is None:  # only then are the jobs' features needed
            fa, fb = job_features(a), job_features(b)
            if first is None:
                first = model.slowdown(ka, kb, fa, fb)
            if second is None:
                second = model.slowdown(kb, ka, fb, fa)
        return PairOutlook(first, second)


def job_kind(profile: str | None, image: str, command: Sequence[str]) -> str:
    """What a job is known by: its ``--profile`` name, else its image and command."""
    return profile or " ".join((image, *map(str, command)))[:255]


def job_features(js: JobState) -> Features | None:
    """A job's features as last sampled (None before its first sample)."""
    obs = js.observed
    return None if obs is None else Features(obs.gpu_util, float(obs.gpu_mem_mb))


T = TypeVar("T")


def best_partner(
    outlooks: Sequence[tuple[T, PairOutlook]], keep_above: float
) -> tuple[T, PairOutlook] | None:
    """The partner with the least predicted interference among those predicted to pay.

    Least interference is the highest predicted aggregate speed; ties keep
    the earlier partner (callers list them in their own preference order).
    """
    best: tuple[T, PairOutlook] | None = None
    for partner, outlook in outlooks:
        if not outlook.pays(keep_above):
            continue
        if best is None or outlook.aggregate > best[1].aggregate:
            best = (partner, outlook)
    return best


def _log(run: CoRun) -> float:
    if not (run.slowdown > 0 and math.isfinite(run.slowdown)):
        raise ValueError(
            f"co-run of {run.kind} beside {run.partner}: slow-down {run.slowdown!r}"
            " is not a positive number"
        )
    return math.log(run.slowdown)


def _fit(
    runs: list[CoRun], rank: int, ridge: float, sweeps: int, seed: int
) -> tuple[float, dict[str, _Params]]:
    """Alternating ridge least squares of the model in the module docstring."""
    if not runs:
        return math.log(DEFAULT_SLOWDOWN), {}
    rows = [(r.kind, r.partner, _log(r), r.weight) for r in runs]
    total = sum(w for *_, w in rows)
    mu = sum(y * w for _, _, y, w in rows) / total
    kinds = sorted({k for k, *_ in rows} | {p for _, p, *_ in rows})
    rnd = random.Random(seed)
    s = dict.fromkeys(kinds, 0.0)
    p = dict.fromkeys(kinds, 0.0)
    u = {k: [rnd.gauss(0.0, 0.1) for _ in range(rank)] for k in kinds}
    v = {k: [rnd.gauss(0.0, 0.1) for _ in range(rank)] for k in kinds}
    as_kind: dict[str, list[tuple[str, float, float]]] = {k: [] for k in kinds}
    as_partner: dict[str, list[tuple[str, float, float]]] = {k: [] for k in kinds}
    for kind, partner, y, w in rows:
        as_kind[kind].append((partner, y - mu, w))
        as_partner[partner].append((kind, y - mu, w))
    for _ in range(sweeps):
        for k, obs in as_kind.items():
            if obs:
                s[k], u[k] = _solve([(v[b], y - p[b], w) for b, y, w in obs], ridge)
        for k, obs in as_partner.items():
            if obs:
                p[k], v[k] = _solve([(u[a], y - s[a], w) for a, y, w in obs], ridge)
    return mu, {k: _Params(s[k], tuple(u[k]), p[k], tuple(v[k])) for k in kinds}


def _solve(obs: list[tuple[list[float], float, float]], ridge: float) -> tuple[float, list[float]]:
    """Weighted ridge regression of ``y ~ bias + x . w``: returns (bias, w)."""
    n = len(obs[0][0]) + 1
    a = [[0.0] * n for _ in range(n)]
    b = [0.0] * n
    weight = 0.0
    for x, y, w in obs:
        row = [1.0, *x]
        weight += w
        for i in range(n):
            b[i] += w * row[i] * y
            for j in range(n):
                a[i][j] += w * row[i] * row[j]
    for i in range(n):
        a[i][i] += ridge * weight
    sol = _gauss(a, b)
    return sol[0], sol[1:]


def _gauss(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve ``a x = b`` (symmetric positive definite, small) by Gaussian elimination."""
    n = len(b)
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        b[col], b[pivot] = b[pivot], b[col]
        for r in range(col + 1, n):
            f = a[r][col] / a[col][col]
            for c in range(col, n):
                a[r][c] -= f * a[col][c]
            b[r] -= f * b[col]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (b[r] - sum(a[r][c] * x[c] for c in range(r + 1, n))) / a[r][r]
    return x
