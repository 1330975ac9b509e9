"""Adaptive rate control for transparent GPU sharing: how much an opportunistic job may run.

Two job classes share a GPU. A *production* job must keep its speed; an
*opportunistic* job gets what is left, as a rate limit ``beta`` in [0, 1]
(the fraction of time it may run, applied elsewhere by duty-cycling its
container). The feedback signal is the production job's progress rate,
measured once per control period and fed to :meth:`RateControl.step`; the
answer is the ``beta`` for the next period. The idea and the outline of the
algorithm are TGS' (Wu et al., "Transparent GPU Sharing in Container Clouds
for Deep Learning Workloads", NSDI 2023, Algorithm 1); this module restates
it for rates sampled once per period, with the details below.

The production rate ``f(beta)`` is flat (= R, its rate alone) while ``beta``
is small and falls once the opportunistic job starts to compete. The goal
is the *tipping point* ``beta*``: the largest ``beta`` with
``f(beta) >= (1 - epsilon) * R`` (a sample that high is *on target*, a lower
one a *miss*). The controller goes through three phases:

1. **Profiling**: ``beta = 0`` (the opportunistic job is held) until the last
   ``profile_steps`` samples agree (all within ``shift`` of their mean, or
   after ``4 * profile_steps`` samples regardless); their mean is R.
2. **Slow start**: ``beta`` starts at ``beta_min`` and doubles after each
   sample on target. The first miss, or ``beta`` reaching 1, ends it.
3. **AIMD**: on a miss ``beta`` is multiplied by ``decrease``; on target it
   grows by ``increase``. Plain AIMD's sawtooth averages only about 3/4 of
   the tipping point, so two betas are remembered to settle closer to it:
   the *ceiling*, where the last miss happened, and the *floor*, the highest
   beta on target below it. After a miss ``beta`` doubles back to the floor,
   as in slow start. Within ``2 * increase`` of the ceiling, ``beta`` holds at
   the floor for ``patience`` more samples, then probes half-way to the
   ceiling (by at least ``resolution``): the gap is bisected and probes past
   the tipping point stay rare. A miss at the floor itself moves the floor
   down by ``resolution``, twice as far at each further such miss (never
   below ``beta * decrease``), until the floor holds again; a sample on
   target at or above the ceiling forgets the ceiling, and plain additive
   increase resumes. A miss *below* the floor, while beta doubles back to
   it, would move floor and ceiling down to there; it counts only when the
   mean of two samples misses, so one noisy sample cannot undo the floor.

While ``beta`` holds, what is compared with the target is the mean of the
samples taken since ``beta`` last changed (TGS smooths its rate estimate with
a moving average), so one noisy sample does not end a hold.

**Shifts of R** (the production job changed its pattern; R is stale). The
last ``window`` samples taken with the opportunistic job running are kept
with their betas. When the window is full and

* its mean rate is above ``(1 + shift) * R`` (R rose: the job runs faster
  *beside* the opportunistic job than R says it runs alone), or
* every beta in it is at most ``beta_min`` and its mean rate is below
  ``(1 - shift) * R`` (R fell: the target is missed with the opportunistic
  job all but held),

the opportunistic job is held (``beta = 0``), R is profiled again and slow
start begins anew. A window mean decides, not one sample, so noise of a few
percent does not trip it. While the rate judged is above ``(1 + shift) * R``
beta holds, so a rise seen at a small beta is not hidden by raising beta
until the production job slows back to the old R. A rise that comes with
heavier interference can still go unseen where beta settles; and a job
that no ``beta_min`` leaves on target gets profiled again now and then,
with beta near 0 all along.

Everything here is pure: a sample in, a new immutable :class:`RateState` out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum


class Phase(StrEnum):
    """Where the controller is: measuring R, doubling beta, or AIMD around the tipping point."""

    PROFILING = "profiling"
    SLOW_START = "slow-start"
    AIMD = "aimd"


@dataclass(frozen=True, slots=True)
class RateState:
    """The controller's state after a sample: what surfaces show, and what the next step needs.

    ``beta`` is the rate limit to apply to the opportunistic job until the
    next sample. The first state comes from :meth:`RateControl.start`.
    """

    phase: Phase
    beta: float
    """Fraction of time the opportunistic job may run, in [0, 1]."""
    reference: float | None = None
    """R, the production rate alone (the last one profiled; None before the first)."""
    rate: float | None = None
    """The last production rate fed in."""
    steps: int = 0
    """Samples fed in so far."""
    shifts: int = 0
    """How many shifts of R were detected (each sent the controller back to profiling)."""
    profile: tuple[float, ...] = ()
    """Profiling: the last ``profile_steps`` samples taken with beta = 0."""
    profiled: int = 0
    """Profiling: samples taken in this profile so far."""
    floor: float = 0.0
    """The highest beta on target below the ceiling: where beta returns to after a miss."""
    ceiling: float | None = None
    """The beta of the last miss, until a sample at or above it is on target."""
    backoff: float = 0.0
    """How far the next miss at the floor moves it down (0: ``resolution``)."""
    held: int = 0
    """Samples taken at the current beta (their mean is what is judged)."""
    held_sum: float = 0.0
    """Sum of the rates taken at the current beta."""
    recent: tuple[tuple[float, float], ...] = ()
    """The last (beta, rate) samples taken with the opportunistic job running, oldest first."""

    def describe(self, options: RateControl) -> str:
        """One line for ``show`` / ``why``: the phase, beta, R, the target and the last rate."""
        last = "none yet" if self.rate is None else f"{self.rate:.4g}"
        if self.phase is Phase.PROFILING or self.reference is None:
            done = f"{len(self.profile)}/{options.profile_steps}"
            return f"{self.phase}: opportunistic job held, {done} samples, last rate {last}"
        target = options.target(self.reference)
        return (
            f"{self.phase}: beta {self.beta:.3f}, R {self.reference:.4g},"
            f" target {target:.4g}, last rate {last}"
        )


@dataclass(frozen=True, slots=True)
class RateControl:
    """Options of the adaptive rate controller, and its step function.

    The defaults follow TGS: a 5 % slowdown budget for the production job,
    slow start from 1/64, additive steps of 1/32 (B = 32 steps across
    [0, 1]) and halving on a miss.
    """

    epsilon: float = 0.05
    """Slowdown the production job tolerates: on target is ``rate >= (1 - epsilon) * R``."""
    profile_steps: int = 8
    """Samples averaged, with the opportunistic job held, to measure R."""
    beta_min: float = 1 / 64
    """Where slow start begins; also the largest beta that counts as 'near 0' for a fall of R."""
    increase: float = 1 / 32
    """Additive increase after a sample on target (AIMD)."""
    decrease: float = 0.5
    """Multiplicative decrease after a miss (AIMD)."""
    shift: float = 0.05
    """Relative change of R (a window mean against R) that sends the controller to profiling."""
    window: int = 8
    """Samples whose mean decides a shift of R."""
    resolution: float = 1 / 128
    """Smallest probe towards the ceiling: how finely the tipping point is resolved."""
    patience: int = 16
    """Extra samples beta holds at the floor, near the ceiling, before it probes again."""
    confirm: int = 1
    """Samples at a beta whose mean must miss before it counts as a miss: above 1 where the
    rates are measured and one sample may be noise (the daemon), 1 where they are exact."""

    def __post_init__(self) -> None:
        """Refuse options the controller cannot work with, saying which and why."""
        if not 0 < self.epsilon < 1:
            raise ValueError(f"epsilon must be in (0, 1), got {self.epsilon}")
        if self.profile_steps < 1:
            raise ValueError(f"profile_steps must be >= 1, got {self.profile_steps}")
        if not 0 < self.beta_min <= 1:
            raise ValueError(f"beta_min must be in (0, 1], got {self.beta_min}")
        if not 0 < self.increase <= 1:
            raise ValueError(f"increase must be in (0, 1], got {self.increase}")
        if not 0 < self.decrease < 1:
            raise ValueError(f"decrease must be in (0, 1), got {self.decrease}")
        if not 0 < self.shift < 1:
            raise ValueError(f"shift must be in (0, 1), got {self.shift}")
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")
        if not 0 < self.resolution <= self.increase:
            raise ValueError(
                f"resolution must be in (0, increase={self.increase}], got {self.resolution}"
            )
        if self.patience < 0:
            raise ValueError(f"patience must be >= 0, got {self.patience}")
        if self.confirm < 1:
            raise ValueError(f"confirm must be >= 1, got {self.confirm}")

    def target(self, reference: float) -> float:
        """The lowest production rate on target, given R."""
        return (1 - self.epsilon) * reference

    def start(self) -> RateState:
        """The first state: profiling R with the opportunistic job held."""
        return RateState(phase=Phase.PROFILING, beta=0.0)

    def step(self, state: RateState, rate: float) -> RateState:
        """Feed the production rate measured under ``state.beta``; the state for the next period.

        ``rate`` may be in any unit (mini-batches or kernels per second), the
        same for every sample. Raises ValueError for a negative or non-finite rate.
        """
        if not math.isfinite(rate) or rate < 0:
            raise ValueError(f"a production rate must be finite and >= 0, got {rate}")
        state = replace(state, rate=rate, steps=state.steps + 1)
        reference = state.reference
        if state.phase is Phase.PROFILING or reference is None:
            return self._profile(state, rate)
        recent = (*state.recent, (state.beta, rate))[-self.window :]
        if self._shifted(reference, recent):
            return self._reprofile(state)
        held, held_sum = state.held + 1, state.held_sum + rate
        state = replace(state, recent=recent, held=held, held_sum=held_sum)
        mean = held_sum / held
        if mean > (1 + self.shift) * reference:  # R looks stale: hold, let the window decide
            return state
        on_target = mean >= self.target(reference)
        if not on_target and held < self._confirming(state):  # one noisy sample is no miss yet
            return state
        if state.phase is Phase.SLOW_START:
            return self._slow_start(state, on_target)
        return self._aimd(state, on_target)

    def _confirming(self, state: RateState) -> int:
        """Samples whose mean must miss at ``state.beta`` before the miss counts.

        Below the floor (beta doubling back to it after a miss) a miss contradicts
        the samples that made the floor, and it would pull the floor and ceiling
        down to there: at least two samples decide, so one noisy one cannot.
        """
        below = state.phase is Phase.AIMD and state.beta < state.floor
        return max(self.confirm, 2) if below else self.confirm

    def _profile(self, state: RateState, rate: float) -> RateState:
        """One sample with beta = 0; once the last ``profile_steps`` agree, R and slow start."""
        profile = (*state.profile, rate)[-self.profile_steps :]
        profiled = state.profiled + 1
        mean = sum(profile) / len(profile)
        steady = all(abs(r - mean) <= self.shift * mean for r in profile)
        done = len(profile) == self.profile_steps and (steady or profiled >= 4 * self.profile_steps)
        if not done:
            return replace(
                state, phase=Phase.PROFILING, beta=0.0, profile=profile, profiled=profiled
            )
        return RateState(
            phase=Phase.SLOW_START,
            beta=self.beta_min,
            reference=mean,
            rate=rate,
            steps=state.steps,
            shifts=state.shifts,
        )

    def _shifted(self, reference: float, recent: tuple[tuple[float, float], ...]) -> bool:
        """Whether the window says R moved: rose above, or fell below, R by more than shift."""
        if len(recent) < self.window:
            return False
        mean = sum(r for _, r in recent) / len(recent)
        if mean > (1 + self.shift) * reference:
            return True
        near_zero = all(b <= self.beta_min for b, _ in recent)
        return near_zero and mean < (1 - self.shift) * reference

    @staticmethod
    def _reprofile(state: RateState) -> RateState:
        """Hold the opportunistic job and profile R again (the old R stays shown meanwhile)."""
        return RateState(
            phase=Phase.PROFILING,
            beta=0.0,
            reference=state.reference,
            rate=state.rate,
            steps=state.steps,
            shifts=state.shifts + 1,
        )

    @staticmethod
    def _move(state: RateState, beta: float, floor: float, ceiling: float | None) -> RateState:
        """``state`` with beta (clamped to [0, 1]), floor and ceiling; a new beta, a fresh mean."""
        beta = min(max(beta, 0.0), 1.0)
        if beta != state.beta:
            state = replace(state, held=0, held_sum=0.0)
        return replace(state, beta=beta, floor=floor, ceiling=ceiling)

    def _slow_start(self, state: RateState, on_target: bool) -> RateState:
        """Double beta while on target; the first miss, or beta at 1, hands over to AIMD."""
        b = state.beta
        if not on_target:
            aimd = replace(state, phase=Phase.AIMD)
            return self._move(aimd, b * self.decrease, state.floor, b)
        if b >= 1.0:
            return replace(state, phase=Phase.AIMD, floor=b)
        return self._move(state, 2 * b, b, None)

    def _aimd(self, state: RateState, on_target: bool) -> RateState:
        """Multiplicative decrease on a miss; on target, back to the floor, then up or hold."""
        b, floor, ceiling = state.beta, state.floor, state.ceiling
        if not on_target:
            if b <= floor:  # the floor itself missed: back it off, twice as far each time
                backoff = max(state.backoff, self.resolution)
                floor = max(b - backoff, b * self.decrease)
                state = replace(state, backoff=2 * backoff)
            return self._move(state, b * self.decrease, floor, b)
        if b < floor:  # recovering from a miss: double back to the floor
            return self._move(state, min(2 * b, floor), floor, ceiling)
        if ceiling is None or b >= ceiling:  # no miss above: plain additive increase
            return self._move(state, b + self.increase, b, None)
        gap = ceiling - b
        if gap > 2 * self.increase:
            return self._move(state, b + self.increase, b, ceiling)
        if state.held <= self.patience:  # near the ceiling: hold at the floor a while
            return replace(state, floor=b)
        probe = replace(state, backoff=0.0)  # the floor held: the next backoff starts small
        return self._move(probe, b + max(gap / 2, self.resolution), b, ceiling)
