"""Training the ``dl2`` policy in gctl's simulator: imitation of a teacher, then actor-critic.

1. **Imitation** (DL2's supervised warm-up): the teacher policy (gandiva,
   with grow and shrink, by default) runs episodes; at each of its
   decisions the GPU counts it chose become the sequence of actions the
   network should take (a uniform target over the jobs still short of
   their count, then stop), learned by cross-entropy.
2. **Actor-critic**: the network runs episodes itself, drawing its actions;
   the reward of a decision is the work done until the next one, summed
   over jobs as fractions of each job's total work (DL2's reward), and
   discounted by ``gamma`` per interval of simulated time. Samples go to a
   replay buffer (``replay``), from which minibatches train the policy on
   the advantage (return less the value head's estimate), PPO's clipped
   ratio keeping older samples from dragging it far (``clip``), with an
   entropy bonus (``entropy``), and the value head on the return.

An episode replays the jobs submitted in a window (``episode_days``) of
the training jobs, drawn at random (seeded). Every ``check_every`` episodes
the greedy policy is evaluated on fixed windows, the heaviest ``checks``
of ``checks * check_draws`` drawn, and the model with the best average JCT
there is the one written. The same seed gives the same model bytes on one
machine.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from gctl.core.decisions import Decision
from gctl.core.model import JobStatus
from gctl.core.policy import Policy, PolicyOptionError, Waking, load_policy
from gctl.core.state import ClusterState
from gctl.sim import profiles
from gctl.sim.engine import SimResult, Simulator
from gctl.sim.training import TrainError, TrainProgress, TrainRequest, TrainSummary
from gctl.sim.workload import TraceJob
from gctl_dl2.features import Layout, LayoutError
from gctl_dl2.network import PARAMS, Network
from gctl_dl2.plot import write_svg
from gctl_dl2.policy import INTERVAL, Dl2Policy, Round, make_round


@dataclass(frozen=True, slots=True)
class Options:
    """Trainer options (``gctl sim train dl2 -o KEY=VALUE``)."""

    imitation: int = 6
    """Teacher episodes for the warm-up."""
    imitation_epochs: int = 30
    episodes: int = 150
    """Actor-critic episodes."""
    episode_days: float = 14.0
    """Days of submissions an episode replays: two weeks hold a backlog's build-up and drain."""
    teacher: str = "gandiva"
    interval: float = INTERVAL
    lr: float = 1e-3
    entropy: float = 0.01
    gamma: float = 0.99
    batch: int = 128
    updates: int = 40
    """Minibatch updates after each actor-critic episode."""
    replay: int = 40000
    """Steps the replay buffer keeps (oldest dropped first)."""
    keep: float = 0.3
    """Fraction of each episode's steps stored in the buffer."""
    check_every: int = 5
    checks: int = 4
    """Fixed windows the greedy policy is evaluated on to pick the model written."""
    check_draws: int = 4
    """Windows drawn per check window kept: the heaviest (most GPU-hours asked) are kept."""
    hidden: int = 64
    clip: float = 0.2
    """PPO's clip of the policy ratio (0: the plain policy gradient)."""

    @classmethod
    def parse(cls, given: dict[str, Any]) -> Options:
        """Options from ``-o`` values, refusing unknown names and values of the wrong kind."""
        known = {f.name: f for f in fields(cls)}
        out: dict[str, Any] = {}
        for key, value in given.items():
            if key not in known:
                raise TrainError(f"unknown dl2 training option {key!r} (known: {', '.join(known)})")
            default = getattr(cls(), key)
            if isinstance(default, str):
                ok = isinstance(value, str)
            elif isinstance(default, int):
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            else:
                ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
                value = float(value) if ok else value
            if not ok:
                raise TrainError(f"dl2 training option {key}={value!r}: bad value")
            out[key] = value
        opts = cls(**out)
        if not 0 < opts.gamma <= 1 or not 0 < opts.keep <= 1:
            raise TrainError("dl2 training options gamma and keep must be in (0, 1]")
        return opts


@dataclass(slots=True)
class Sample:
    """One stored action: the inputs, and the action taken or the target distribution."""

    x: np.ndarray
    g: np.ndarray
    mask: np.ndarray
    action: int
    target: np.ndarray | None
    ret: float = 0.0
    prob: float = 1.0
    """The probability the acting policy gave ``action``."""


class Episode:
    """Records one simulated episode's decisions and the work done between them."""

    def __init__(self, rng: np.random.Generator, keep: float) -> None:
        """Keep a ``keep`` fraction of the steps, drawn with ``rng``."""
        self.rng, self.keep = rng, keep
        self.sim: Simulator | None = None
        """The simulator running the episode (set by :func:`simulate`)."""
        self.times: list[float] = []
        self.done: list[float] = []
        self.samples: list[tuple[int, Sample]] = []

    def begin(self, state: ClusterState, now: float) -> None:
        """A decision starts: note the time and the work done so far."""
        sim = self.sim
        assert sim is not None
        partial = sum(sim.work_done(j) or 0.0 for j in state.jobs)
        self.times.append(now)
        self.done.append(len(sim.records) + partial)

    def step(
        self, x: np.ndarray, g: np.ndarray, mask: np.ndarray, action: int, prob: float
    ) -> None:
        """An action the policy took, with the probability it had."""
        self.add(Sample(x, g, mask, action, None, prob=prob))

    def add(self, sample: Sample) -> None:
        """Keep a copy of a sample (a fraction of them, drawn at random)."""
        if self.rng.random() < self.keep:
            sample.x, sample.g = sample.x.astype(np.float32), sample.g.copy()
            self.samples.append((len(self.times) - 1, sample))

    def returns(self, end: float, finished: float, gamma: float, interval: float) -> np.ndarray:
        """Each decision's discounted return of work done (job fractions) until the end."""
        times = [*self.times, end]
        done = [*self.done, finished]
        out = np.zeros(len(self.times))
        ret = 0.0
        for k in range(len(self.times) - 1, -1, -1):
            ret = done[k + 1] - done[k] + gamma ** ((times[k + 1] - times[k]) / interval) * ret
            out[k] = ret
        for k, sample in self.samples:
            sample.ret = float(out[k])
        return out


class Imitator:
    """Runs the teacher policy, recording at each of dl2's decision points what it chose."""

    def __init__(self, teacher: Policy, layout: Layout, episode: Episode, interval: float):
        """Wrap ``teacher``; decisions are labelled with ``layout``'s rounds."""
        self.teacher, self.layout, self.episode, self.interval = teacher, layout, episode, interval
        self.name = teacher.name
        self.next_at: float | None = None

    def schedule(self, state: ClusterState, now: float) -> list[Decision]:
        """The teacher's reactive pass, labelled when jobs wait (dl2 decides then too)."""
        rnd = None
        if state.pending:
            self.next_at = now + self.interval
            rnd = make_round(self.layout, state, now)
        return self._label(rnd, state, now, self.teacher.schedule(state, now))

    def introspect(self, state: ClusterState, now: float) -> list[Decision]:
        """The teacher's introspective pass; at dl2's intervals, labelled."""
        rnd = None
        if self.next_at is None or now >= self.next_at:
            self.next_at = now + self.interval
            rnd = make_round(self.layout, state, now)
        return self._label(rnd, state, now, self.teacher.introspect(state, now))

    def wants_introspection(self, state: ClusterState) -> bool:
        """As the teacher, or for dl2's next interval."""
        return self.teacher.wants_introspection(state) or bool(state.jobs)

    def wake_at(self, state: ClusterState, now: float) -> float | None:
        """The teacher's next pass or dl2's next interval, whichever is first."""
        due = self.next_at if state.jobs else None
        if isinstance(self.teacher, Waking):
            mine = self.teacher.wake_at(state, now)
        else:
            mine = now if self.teacher.wants_introspection(state) else None
        known = [t for t in (due, mine) if t is not None]
        return max(min(known), now) if known else None

    def _label(
        self, rnd: Round | None, state: ClusterState, now: float, decided: list[Decision]
    ) -> list[Decision]:
        """Record the actions that reach the teacher's GPU counts from the round's start."""
        if rnd is None:
            return decided
        self.episode.begin(state, now)
        targets = np.array(
            [
                len(state.jobs[j.id].gpus)
                if j.id in state.jobs and state.jobs[j.id].status is JobStatus.RUNNING
                else 0
                for j in rnd.jobs
            ]
        )
        while True:
            mask = rnd.mask()
            if not mask.any():
                break
            short = mask & (rnd.given < targets) & ((rnd.given > 0) | (targets >= rnd.lo))
            target = np.zeros(len(rnd.jobs) + 1)
            if short.any():
                target[1:][short] = 1.0 / short.sum()
            else:
                target[0] = 1.0
            self.episode.add(Sample(rnd.x, rnd.g, mask, -1, target))
            if not short.any():
                break
            rnd.give(int(np.flatnonzero(short)[0]))
        return decided


class Adam:
    """The Adam optimiser over the network's parameters, with gradient-norm clipping."""

    def __init__(self, net: Network, lr: float, clip: float = 1.0) -> None:
        """Zero moments for every parameter."""
        self.net, self.lr, self.clip, self.t = net, lr, clip, 0
        self.m = {k: np.zeros_like(v) for k, v in net.params.items()}
        self.v = {k: np.zeros_like(v) for k, v in net.params.items()}

    def step(self, grads: dict[str, np.ndarray]) -> None:
        """One update."""
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        scale = min(1.0, self.clip / norm) if norm > 0 else 1.0
        self.t += 1
        b1, b2 = 0.9, 0.999
        for k in PARAMS:
            g = grads[k] * scale
            self.m[k] = b1 * self.m[k] + (1 - b1) * g
            self.v[k] = b2 * self.v[k] + (1 - b2) * g * g
            mhat = self.m[k] / (1 - b1**self.t)
            vhat = self.v[k] / (1 - b2**self.t)
            self.net.params[k] -= self.lr * mhat / (np.sqrt(vhat) + 1e-8)


def batch_arrays(
    samples: Sequence[Sample], width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pad a minibatch's rows into (B, N, F) inputs, their valid and action masks, and globals."""
    n = max(len(s.mask) for s in samples)
    b = len(samples)
    x = np.zeros((b, n, width))
    valid = np.zeros((b, n))
    mask = np.zeros((b, n), dtype=bool)
    for i, s in enumerate(samples):
        k = len(s.mask)
        x[i, :k] = s.x
        valid[i, :k] = 1.0
        mask[i, :k] = s.mask
    return x, valid, mask, np.stack([s.g for s in samples])


def update(
    net: Network,
    opt: Adam,
    samples: Sequence[Sample],
    entropy: float,
    value_weight: float = 0.5,
    clip: float = 0.0,
) -> tuple[float, float]:
    """One minibatch step; the policy and value losses before it.

    Samples with a target distribution (imitation) train by cross-entropy;
    the others by the policy gradient on the normalised advantage, with the
    entropy bonus. With ``clip``, PPO's: the gradient is weighted by the
    ratio of the action's probability now to when it was taken, and none
    flows from a sample whose ratio has already moved past ``1 +- clip`` in
    its advantage's direction, so samples of older policies in the buffer
    cannot drag the policy far. Every sample trains the value head on its
    return.
    """
    x, valid, mask, g = batch_arrays(samples, net.layout.width)
    pi, value, cache = net.batch_forward(x, valid, mask, g)
    b = len(samples)
    rets = np.array([s.ret for s in samples])
    onehot = np.zeros_like(pi)
    imitated = np.array([s.target is not None for s in samples])
    for i, s in enumerate(samples):
        if s.target is not None:
            onehot[i, : len(s.target)] = s.target
        else:
            onehot[i, s.action] = 1.0
    adv = rets - value
    if (~imitated).sum() > 1:
        a = adv[~imitated]
        adv[~imitated] = (a - a.mean()) / (a.std() + 1e-8)
    if clip > 0:
        taken = np.array([s.action if s.target is None else 0 for s in samples])
        ratio = pi[np.arange(b), taken] / np.array([s.prob for s in samples])
        adv = clipped_advantage(adv, ratio, clip)
    weight = np.where(imitated, 1.0, adv)
    dlogits = weight[:, None] * (pi - onehot)
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.where(pi > 0, np.log(pi), 0.0)
    ent = -(pi * logp).sum(axis=1)
    bonus = np.where(imitated, 0.0, entropy)
    dlogits += bonus[:, None] * pi * (logp + ent[:, None])
    dlogits /= b
    dvalue = value_weight * 2.0 * (value - rets) / b
    opt.step(net.backward(cache, dlogits, dvalue))
    chosen = (pi * onehot).sum(axis=1)
    policy_loss = float(-(np.log(np.maximum(chosen, 1e-12)) * np.abs(weight)).mean())
    return policy_loss, float(((value - rets) ** 2).mean())


def clipped_advantage(adv: np.ndarray, ratio: np.ndarray, clip: float) -> np.ndarray:
    """PPO's weight of each sample's policy gradient (the gradient of ``ratio * adv``).

    ``ratio`` is the taken action's probability now over when it was taken.
    A sample whose ratio has moved past ``1 + clip`` (a good action) or
    ``1 - clip`` (a bad one) gives no gradient: the policy has moved far
    enough on it.
    """
    past = ((adv > 0) & (ratio > 1 + clip)) | ((adv < 0) & (ratio < 1 - clip))
    out: np.ndarray = np.where(past, 0.0, adv * ratio)
    return out


def check_windows(
    jobs: Sequence[TraceJob], days: float, count: int, draws: int, rng: np.random.Generator
) -> list[list[TraceJob]]:
    """The windows the model is picked on: the ``count`` heaviest of ``count * draws`` drawn.

    On a lightly loaded window every policy gives about the same JCTs; where
    jobs queue is where a model's choices show.
    """
    drawn = windows(jobs, days, count * max(draws, 1), rng)
    return sorted(drawn, key=demand, reverse=True)[:count]


def demand(jobs: Sequence[TraceJob]) -> float:
    """GPU-seconds a window's jobs ask for: how heavily it loads the cluster."""
    return sum(j.spec.gpus * j.duration for j in jobs)


def windows(
    jobs: Sequence[TraceJob], days: float, count: int, rng: np.random.Generator
) -> list[list[TraceJob]]:
    """``count`` episode windows of ``days``: the jobs submitted in each, times from 0."""
    span = max(j.spec.submit_time for j in jobs) if jobs else 0.0
    length = days * 86400.0
    out = []
    for _ in range(count):
        start = float(rng.uniform(0.0, max(span - length, 0.0)))
        chosen = [j for j in jobs if start <= j.spec.submit_time < start + length]
        if chosen:
            base = chosen[0].spec.submit_time
            out.append(
                [
                    replace(j, spec=replace(j.spec, submit_time=j.spec.submit_time - base))
                    for j in chosen
                ]
            )
    return out


def simulate(
    request: TrainRequest, policy: Policy, jobs: Sequence[TraceJob], episode: Episode | None
) -> tuple[SimResult, float]:
    """Run ``policy`` on ``jobs`` (``episode`` records it); the result and the end's clock."""
    sim = Simulator(request.cluster, policy, request.perf, tick=request.tick)
    if episode is not None:
        episode.sim = sim
    result = sim.run(jobs)
    return result, sim.clock


def train(request: TrainRequest, progress: TrainProgress | None) -> TrainSummary:
    """Train dl2 on the request's jobs and write the best model (see the module docstring)."""
    started = time.perf_counter()
    opts = Options.parse(request.options)
    if not request.jobs:
        raise TrainError("no jobs to train on")
    if request.init is not None:
        try:
            net = Network.load(request.init)
        except LayoutError as exc:
            raise TrainError(str(exc)) from None
    else:
        kinds = sorted(
            set(profiles.known_models()) | {j.spec.profile for j in request.jobs if j.spec.profile}
        )
        net = Network.fresh(Layout(tuple(kinds), hidden=opts.hidden), request.seed)
    try:
        load_policy(opts.teacher)  # refused here, before any episode runs
    except (LookupError, PolicyOptionError) as exc:
        raise TrainError(f"teacher: {exc}") from None
    rng = np.random.default_rng(request.seed)
    layout = net.layout
    opt = Adam(net, opts.lr)
    log: list[dict[str, Any]] = []
    report = progress or (lambda *_: None)
    checks = check_windows(request.jobs, opts.episode_days, opts.checks, opts.check_draws, rng)
    if not checks:
        raise TrainError(f"no jobs in any {opts.episode_days:g}-day window: raise -o episode_days")

    def evaluate() -> float:
        jcts = []
        for jobs in checks:
            policy = Dl2Policy.from_network(net, opts.interval)
            jcts.append(simulate(request, policy, jobs, None)[0].metrics.avg_jct)
        return float(np.mean(jcts))

    # 1. imitation
    buffer: list[Sample] = []
    for e, jobs in enumerate(windows(request.jobs, opts.episode_days, opts.imitation, rng)):
        episode = Episode(rng, opts.keep)
        imitator = Imitator(load_policy(opts.teacher), layout, episode, opts.interval)
        result, end = simulate(request, imitator, jobs, episode)
        episode.returns(end, float(len(jobs)), opts.gamma, opts.interval)
        buffer += [s for _, s in episode.samples]
        log.append({"phase": "imitation", "episode": e, "avg_jct": result.metrics.avg_jct})
        report("imitation: teacher episodes", e + 1, opts.imitation, None)
    total_updates = opts.imitation_epochs * max(len(buffer) // opts.batch, 1) if buffer else 0
    loss = 0.0
    for u in range(total_updates):
        idx = rng.choice(len(buffer), size=min(opts.batch, len(buffer)), replace=False)
        loss, _ = update(net, opt, [buffer[i] for i in idx], 0.0)
        if u % 50 == 0 or u == total_updates - 1:
            report("imitation: learning", u + 1, total_updates, None)
    best_jct = evaluate()
    best = {k: v.copy() for k, v in net.params.items()}
    teacher_jct = float(
        np.mean(
            [
                simulate(request, load_policy(opts.teacher), j, None)[0].metrics.avg_jct
                for j in checks
            ]
        )
    )
    log.append(
        {
            "phase": "check",
            "episode": 0,
            "avg_jct": best_jct,
            "teacher_jct": teacher_jct,
            "imitation_loss": loss,
        }
    )

    # 2. actor-critic with replay
    replay: list[Sample] = [s for s in buffer if s.target is None]
    reward = None
    for e, jobs in enumerate(windows(request.jobs, opts.episode_days, opts.episodes, rng)):
        episode = Episode(rng, opts.keep)
        policy = Dl2Policy.from_network(net, opts.interval, rng, episode)
        result, end = simulate(request, policy, jobs, episode)
        rets = episode.returns(end, float(len(jobs)), opts.gamma, opts.interval)
        replay = (replay + [s for _, s in episode.samples])[-opts.replay :]
        per_job = float(rets[0]) / len(jobs) if len(rets) else 0.0
        reward = per_job if reward is None else 0.8 * reward + 0.2 * per_job
        losses = [
            update(
                net,
                opt,
                [
                    replay[i]
                    for i in rng.choice(len(replay), min(opts.batch, len(replay)), replace=False)
                ],
                opts.entropy,
                clip=opts.clip,
            )
            for _ in range(opts.updates if replay else 0)
        ]
        entry: dict[str, Any] = {
            "phase": "actor-critic",
            "episode": e + 1,
            "reward": per_job,
            "running_reward": reward,
            "avg_jct": result.metrics.avg_jct,
            "policy_loss": float(np.mean([p for p, _ in losses])) if losses else None,
            "value_loss": float(np.mean([v for _, v in losses])) if losses else None,
        }
        if (e + 1) % opts.check_every == 0:
            jct = evaluate()
            entry["check_jct"] = jct
            if jct < best_jct:
                best_jct, best = jct, {k: v.copy() for k, v in net.params.items()}
        log.append(entry)
        report("actor-critic episodes", e + 1, opts.episodes, reward)
    net.params = best
    net.save(request.out)
    log_path = request.log or request.out.with_suffix(".json")
    plot_path = request.plot or request.out.with_suffix(".svg")
    doc = {
        "source": request.source,
        "seed": request.seed,
        "options": {f.name: getattr(opts, f.name) for f in fields(opts)},
        "layout": json.loads(layout.to_json()),
        "best_check_jct": best_jct,
        "teacher_check_jct": teacher_jct,
        "episodes": log,
    }
    log_path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    write_svg(plot_path, log)
    figures = {"best check avg JCT (s)": best_jct, "teacher's check avg JCT (s)": teacher_jct}
    if reward is not None:
        figures["running reward"] = reward
    return TrainSummary(
        request.out, log_path, plot_path, len(log), time.perf_counter() - started, figures
    )
