"""The ``dl2`` policy: a trained network decides, GPU by GPU, how many GPUs each job holds.

Every scheduling interval (``interval``, seconds) the policy reallocates:
the GPUs of the jobs it may move (running jobs that checkpoint, alone on
their GPUs) and the free GPUs are handed out again, one action at a time,
as DL2 does: the network picks a job to get one more GPU (a job that waits
gets its minimum at once: all of its GPUs when it is not elastic) or stops,
and is asked again until it stops or no GPU is left. A job given fewer GPUs
than it holds shrinks, one given none returns to the queue at a checkpoint,
one given more grows (on its node when it can, else on a new set), and a
waiting job given GPUs is placed; gctl's own placement code
(:func:`gctl.core.placement.free_set`: affinity, link score) chooses the
GPUs, so only the counts are learned. A job arriving, or a job ending
while others wait, brings the next reallocation forward to that moment, so
a short job does not wait out the interval.

Three guards keep a learned policy from thrashing or leaving work undone.
A job started or resized less than ``hold`` seconds ago keeps its GPUs
(each move is a checkpoint and a restart). A job that has waited
``starve_after`` seconds gets its minimum before the network acts (as
Gandiva's starvation guard). GPUs the network leaves when it stops go to
jobs it gave nothing, in arrival order, at their minimum: no GPU idles
while a job that fits waits, and a stop means "grow nobody further". The
guards run in training too, so the network learns under them.

Jobs it cannot move (suspended by an operator, packed, unable to
checkpoint) keep their GPUs; opportunistic jobs are left to TGS
(:mod:`gctl.core.opportunistic`), as with every policy.
"""

from __future__ import annotations

from importlib.resources import files
from operator import attrgetter
from pathlib import Path
from typing import Protocol

import numpy as np

from gctl.core.decisions import Decision, Grow, Place, Queue, Requeue, Shrink
from gctl.core.model import GpuRef, JobStatus, ShareMode
from gctl.core.placement import free_set
from gctl.core.policy import PolicyOptionError
from gctl.core.state import ClusterState, GroupKey, JobState
from gctl_dl2.features import (
    GLOBAL_FEATURES,
    Layout,
    LayoutError,
    left_estimate,
    log_scaled,
    rows,
)
from gctl_dl2.network import Network

BUNDLED = "philly-103959.npz"
"""The model shipped with the plugin, used when no ``model`` option is given."""

INTERVAL = 300.0
"""Default seconds between full reallocations."""

STARVE_AFTER = 259200.0
"""Default seconds a job waits before it is given its minimum whatever the network says."""

HOLD = 600.0
"""Default seconds a job keeps the GPUs it was just given, whatever the network says."""


def bundled_model() -> Path:
    """Path of the model shipped with the plugin."""
    return Path(str(files("gctl_dl2").joinpath("models", BUNDLED)))


class Recorder(Protocol):
    """Watches a policy's decisions, for training."""

    def begin(self, state: ClusterState, now: float) -> None:
        """A decision (a round of actions) starts."""
        ...

    def step(
        self, x: np.ndarray, g: np.ndarray, mask: np.ndarray, action: int, prob: float
    ) -> None:
        """One action: 0 is stop, ``1 + i`` gives a GPU to the round's job ``i``.

        ``prob`` is the probability the policy gave the action (1 when
        greedy). ``x`` and ``g`` are the round's own arrays, changed by the
        next action: a recorder copies what it keeps.
        """
        ...


class Round:
    """One decision's working state: the jobs, their feature rows, who may take a GPU, budget."""

    def __init__(
        self,
        layout: Layout,
        state: ClusterState,
        now: float,
        jobs: list[JobState],
        budget: int,
    ) -> None:
        """Build the rows of ``jobs``, every one of them given nothing yet."""
        self.layout, self.jobs = layout, jobs
        self.left = budget
        total = sum(ns.size for ns in state.nodes.values()) or 1
        self.total = total
        n = len(jobs)
        done_of = state.work_done
        raw = np.array(
            [
                (
                    len(j.gpus) if j.status is JobStatus.RUNNING else 0,
                    j.spec.elastic_min or j.spec.gpus,
                    j.spec.elastic_max or j.spec.gpus,
                    j.spec.gpus,
                    j.attained_at(now),
                    j.spec.submit_time,
                    int(j.spec.priority) - 1,
                    np.nan if done_of is None else _or_nan(done_of(j.id)),
                )
                for j in jobs
            ],
            dtype=np.float64,
        ).reshape(n, 8)
        held = raw[:, 0].astype(np.int64)
        self.held = held
        self.lo, self.hi = raw[:, 1].astype(np.int64), raw[:, 2].astype(np.int64)
        self.given = np.zeros(n, dtype=np.int64)
        self.why: dict[int, str] = {}
        """Jobs given GPUs by a guard rather than the network, and which guard."""
        x = rows(layout, n)
        x[np.arange(n), [layout.kind_index(j.spec.profile) for j in jobs]] = 1.0
        col = layout.column
        service = raw[:, 4]
        left = left_estimate(service, raw[:, 7])
        x[:, col("asked")] = np.log2(raw[:, 3]) / 3.0
        x[:, col("held")] = held / 8.0
        x[:, col("elastic")] = self.lo != self.hi
        x[:, col("waiting")] = held == 0
        x[:, col("service")] = log_scaled(service / 3600.0)
        x[:, col("age")] = log_scaled((now - raw[:, 5]) / 3600.0)
        x[:, col("left_known")] = ~np.isnan(left)
        x[:, col("left")] = np.where(np.isnan(left), 0.0, log_scaled(np.nan_to_num(left) / 3600.0))
        x[:, col("share")] = held / total
        x[:, col("priority")] = raw[:, 6]
        self.x = x
        self._given_col, self._room_col = col("given"), col("room")
        self._update_rows(np.arange(n))
        self.g = np.array(
            [budget / total, np.log2(total) / 8.0, float(log_scaled(np.array(n), 6.0))],
            dtype=np.float64,
        )
        assert len(self.g) == len(GLOBAL_FEATURES)

    def _update_rows(self, idx: np.ndarray | int) -> None:
        self.x[idx, self._given_col] = self.given[idx] / 8.0
        self.x[idx, self._room_col] = (self.hi[idx] - self.given[idx]) / 8.0

    def unit(self) -> np.ndarray:
        """GPUs the next action on each job would give: its minimum first, then one."""
        return np.where(self.given == 0, self.lo, 1)

    def mask(self) -> np.ndarray:
        """Which jobs may be given a GPU now."""
        return (self.given < self.hi) & (self.unit() <= self.left)

    def fill(self, order: list[int], why: str, upto: np.ndarray | None = None) -> None:
        """Give each job of ``order`` its minimum (or ``upto[i]`` GPUs), while they fit."""
        for i in order:
            want = int(self.lo[i] if upto is None else upto[i])
            while self.given[i] < want and self._unit(i) <= self.left:
                self.give(i)
                self.why[i] = why

    def _unit(self, i: int) -> int:
        """GPUs the next action on job ``i`` gives (:meth:`unit` for one job)."""
        return int(self.lo[i]) if self.given[i] == 0 else 1

    def give(self, i: int) -> None:
        """Apply the action that gives job ``i`` its next GPU(s)."""
        step = self._unit(i)
        self.given[i] += step
        self.left -= step
        self._update_rows(i)
        self.g[0] = self.left / self.total


class Dl2Policy:
    """DL2: GPU counts per job from a trained network, placement by gctl's own code."""

    name = "dl2"

    def __init__(
        self,
        model: str | None = None,
        interval: float = INTERVAL,
        starve_after: float = STARVE_AFTER,
        hold: float = HOLD,
    ) -> None:
        """Load ``model`` (default: the bundled one); reallocate every ``interval`` seconds."""
        checked = (("interval", interval), ("starve_after", starve_after), ("hold", hold))
        for name, value in checked:
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise PolicyOptionError(f"dl2 option {name}={value!r}: must be a number > 0")
        if model is not None and not isinstance(model, str):
            raise PolicyOptionError(f"dl2 option model={model!r}: must be a file path")
        path = Path(model).expanduser() if model else bundled_model()
        try:
            net = Network.load(path)
        except LayoutError as exc:
            raise PolicyOptionError(f"dl2 option model: {exc}") from None
        self._setup(net, float(interval), None, None, float(starve_after), float(hold))

    @classmethod
    def from_network(
        cls,
        net: Network,
        interval: float = INTERVAL,
        sample: np.random.Generator | None = None,
        recorder: Recorder | None = None,
    ) -> Dl2Policy:
        """A policy over an in-memory network; ``sample`` draws actions instead of the best one."""
        policy = cls.__new__(cls)
        policy._setup(net, interval, sample, recorder, STARVE_AFTER, HOLD)
        return policy

    def _setup(
        self,
        net: Network,
        interval: float,
        sample: np.random.Generator | None,
        recorder: Recorder | None,
        starve_after: float,
        hold: float,
    ) -> None:
        self.net, self.interval = net, interval
        self.sample, self.recorder = sample, recorder
        self.starve_after, self.hold = starve_after, hold
        self.next_at: float | None = None

    # ---- the policy interface ------------------------------------------

    def schedule(self, state: ClusterState, now: float) -> list[Decision]:
        """While jobs wait, reallocate now (an arrival or an end brings the interval forward)."""
        return self._reallocate(state, now) if state.pending else []

    def introspect(self, state: ClusterState, now: float) -> list[Decision]:
        """At each interval, reallocate every GPU of the jobs that can move."""
        if self.next_at is not None and now < self.next_at:
            return []
        return self._reallocate(state, now)

    def _reallocate(self, state: ClusterState, now: float) -> list[Decision]:
        self.next_at = now + self.interval
        rnd = make_round(self.net.layout, state, now)
        if rnd is None:
            return []
        fresh = [i for i, j in enumerate(rnd.jobs) if rnd.held[i] and now - j.since < self.hold]
        rnd.fill(fresh, f"started or resized under {self.hold:g}s ago: kept", rnd.held)
        waited = [
            i
            for i, j in enumerate(rnd.jobs)
            if not rnd.held[i] and now - j.since >= self.starve_after
        ]
        rnd.fill(
            waited, f"waited over {self.starve_after:g}s: given its minimum (starvation guard)"
        )
        value = self.choose(rnd, state, now)
        idle = [i for i in range(len(rnd.jobs)) if not rnd.held[i]] + list(range(len(rnd.jobs)))
        rnd.fill(idle, "dl2 stopped with GPUs left: given its minimum so that none idles")
        return apply_counts(state, now, rnd, value)

    def wants_introspection(self, state: ClusterState) -> bool:
        """Whenever there are jobs to reallocate."""
        return any(not j.opportunistic for j in state.jobs.values())

    def wake_at(self, state: ClusterState, now: float) -> float | None:
        """The next interval, while there are jobs."""
        if not self.wants_introspection(state):
            return None
        return max(self.next_at if self.next_at is not None else now, now)

    # ---- one round -------------------------------------------------------

    def choose(self, rnd: Round, state: ClusterState, now: float) -> float:
        """Run the network action by action until it stops or nothing more can be given.

        Greedy (the best action) unless the policy samples (training). Returns
        the network's value estimate of the round's start.
        """
        net, rec = self.net, self.recorder
        if rec is not None:
            rec.begin(state, now)
        h = net.hidden(rnd.x)
        s = net.score(h)
        head = net.tracker(h, rnd.g)
        value = head.scores(rnd.g[0])[1]
        while True:
            mask = rnd.mask()
            logits = np.where(mask, s, -np.inf)
            i = int(logits.argmax())
            if logits[i] == -np.inf:
                return value
            stop = head.scores(rnd.g[0])[0]
            if self.sample is None:
                action, prob = (0 if stop >= logits[i] else i + 1), 1.0
            else:
                action, prob = self._draw(self.sample, stop, logits)
            if rec is not None:
                rec.step(rnd.x, rnd.g, mask, action, prob)
            if action == 0:
                return value
            i = action - 1
            rnd.give(i)
            new = net.hidden(rnd.x[i])
            head.row_changed(h[i], new)
            h[i] = new
            s[i] = net.score(new)

    @staticmethod
    def _draw(rng: np.random.Generator, stop: float, logits: np.ndarray) -> tuple[int, float]:
        """An action drawn from the softmax over stop and ``logits``, and its probability."""
        top = max(stop, float(logits.max()))
        p = np.exp(logits - top)
        p_stop = float(np.exp(stop - top))
        total = p_stop + float(p.sum())
        r = rng.random() * total
        if r < p_stop:
            return 0, p_stop / total
        i = min(int(np.searchsorted(np.cumsum(p), r - p_stop)), len(p) - 1)
        return 1 + i, float(p[i]) / total


def _or_nan(value: float | None) -> float:
    return np.nan if value is None else value


def make_round(layout: Layout, state: ClusterState, now: float) -> Round | None:
    """The round a decision works on now, or None when it has nothing to decide.

    Its jobs are the running jobs that can move and the waiting ones; it
    hands out every GPU they hold and every free GPU.
    """
    jobs = sorted(
        (
            j
            for j in state.jobs.values()
            if not j.opportunistic and (j.status is JobStatus.PENDING or _movable(state, j))
        ),
        key=attrgetter("seq"),
    )
    if not jobs:
        return None
    return Round(layout, state, now, jobs, state.total_free + sum(len(j.gpus) for j in jobs))


def _movable(state: ClusterState, js: JobState) -> bool:
    """Whether a running job's GPUs are the policy's to hand out again this interval."""
    return (
        js.status is JobStatus.RUNNING
        and js.spec.can_checkpoint
        and len(state.groups.get(js.gpus, ())) == 1
        and all(state.nodes[node].open for node, _ in js.gpus)
    )


# ---- counts into decisions ---------------------------------------------


def apply_counts(state: ClusterState, now: float, rnd: Round, value: float) -> list[Decision]:
    """Turn a round's counts into decisions, committed as taken: frees, then grows, then starts.

    ``value`` is the network's value estimate, given in the reasons ``gctl why`` shows.
    """
    out: list[Decision] = []
    said = f"value estimate {value:.2f}"
    for i, js in enumerate(rnd.jobs):
        target, held = int(rnd.given[i]), int(rnd.held[i])
        if not held or target >= held:
            continue
        if target == 0:
            why = f"dl2 gave it no GPU this interval; back to the queue at a checkpoint ({said})"
            out += state.commit([Requeue(js.id, why)], now)
        else:
            chose = rnd.why.get(i, f"dl2 chose {target} GPUs for it")
            why = f"{chose}, down from {held} ({said})"
            out += state.commit([Shrink(js.id, _keep(state, js.gpus, target), why)], now)
    for i, js in enumerate(rnd.jobs):
        target, held = int(rnd.given[i]), int(rnd.held[i])
        if held and target > held:
            gpus = _grown(state, js, target)
            if gpus is not None:
                why = f"dl2 chose {target} GPUs for it, up from {held} ({said})"
                out += state.commit([Grow(js.id, gpus, why)], now)
    starts = [i for i in range(len(rnd.jobs)) if not rnd.held[i]]
    starts.sort(key=lambda i: -int(rnd.given[i]))
    for i in starts:
        js, target = rnd.jobs[i], int(rnd.given[i])
        gpus = None
        for count in range(target, int(rnd.lo[i]) - 1, -1):
            gpus = free_set(state, count, datasets=frozenset(js.spec.datasets))
            if gpus is not None:
                break
        if gpus is not None:
            why = rnd.why.get(i, f"dl2 chose {len(gpus)} GPUs for it") + f" ({said})"
            out += state.commit([Place(js.id, gpus, ShareMode.EXCLUSIVE, why)], now)
            continue
        # no value estimate here: it changes every round, and a waiting job's reason
        # is stored only when it changes
        if target:
            why = f"dl2 chose {target} GPUs for it but no free set of them fits"
        else:
            why = "dl2 gave it no GPU: they went to the jobs it ranked higher"
        if js.reason != why:
            out += state.commit([Queue(js.id, why)], now)
    return out


def _keep(state: ClusterState, gpus: GroupKey, count: int) -> GroupKey:
    """The best-linked ``count`` of a job's GPUs, from the nodes holding most of them."""
    by_node: dict[str, int] = {}
    for node, i in gpus:
        by_node[node] = by_node.get(node, 0) | 1 << i
    kept: list[GpuRef] = []
    for node, mask in sorted(by_node.items(), key=lambda kv: -kv[1].bit_count()):
        take = min(count - len(kept), mask.bit_count())
        if take <= 0:
            break
        idx = state.nodes[node].topo.best_set(mask, take)
        kept += [(node, i) for i in idx or ()]
    return tuple(sorted(kept))


def _grown(state: ClusterState, js: JobState, target: int) -> GroupKey | None:
    """``target`` GPUs for a running job: its own plus free ones of its node, else a free set."""
    node = js.gpus[0][0]
    ns = state.nodes[node]
    extra = target - len(js.gpus)
    if js.gpus[-1][0] == node and ns.open and ns.free >= extra:
        chosen = ns.topo.extend(tuple(i for _, i in js.gpus), ns.free_mask, extra)
        if chosen is not None:
            return tuple((node, i) for i in chosen)
    return free_set(state, target, datasets=frozenset(js.spec.datasets))
