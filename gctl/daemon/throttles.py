"""TGS rate control on the hosts: a controller for each opportunistic job beside a production job.

A *pair* is an opportunistic job running on exactly the GPUs of one
production job that runs alone there (what
:mod:`gctl.core.opportunistic` places). For each pair the daemon keeps a
:class:`gctl.core.tgs.RateControl` state; every new progress rate of the
production job is one control step (the job SDK's step rate, else its own
GPU utilisation from the node's GPU sample, an estimate; an SDK rate
measured partly before the guest's current beta took effect, by the host's
clock, is skipped: it would judge the new beta by the old one), and the beta it
gives is sent to the guest's throttle on the host (the agent's
``throttle-set``, :mod:`gctl.hosts.agent`) with the node's next
observation. A node holding a pair is observed fully every
``control_every`` seconds instead of every heartbeat: that is the control
period. A guest starts held (beta 0) while R is profiled. When a pair ends,
its throttle is stopped with the node's next observation; a throttle whose
daemon stopped setting beta thaws its container after ``lease`` seconds.

Significant changes only (a new phase, a new R, beta moved by at least
:data:`BETA_STEP`) are recorded (:meth:`Throttles.record`): a
``job.throttle`` event and the guest's reason, which ``gctl why`` and
``gctl show job`` give.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update

from gctl.core.tgs import Phase, RateControl, RateState
from gctl.daemon import jobfiles
from gctl.daemon.watch import Observation
from gctl.services import events
from gctl.services.db import Store
from gctl.store.engine import transaction
from gctl.store.models import JobRow

BETA_STEP = 0.1
"""A change of beta this large (or a new phase or R) is recorded; smaller ones are not."""


@dataclass(frozen=True, slots=True)
class Pair:
    """Opportunistic job ``guest`` (in its ``attempt``) on the GPUs of production job ``host``."""

    guest: int
    attempt: int
    host: int
    node: str
    """The node of the guest's first GPU, where its container and throttle are."""
    container: str
    tdir: str
    """The throttle's directory on that node's host."""


class Throttles:
    """The controllers of the current pairs, and what each node's next observation must carry."""

    def __init__(self, control: RateControl, *, lease: float, period: float = 0.1) -> None:
        """``lease``: how long a throttle keeps its last beta without news from the daemon."""
        self.control = control
        self.lease = lease
        self.period = period
        self.pairs: dict[int, Pair] = {}
        self.states: dict[int, RateState] = {}
        self._stop: dict[str, list[str]] = {}
        self._sampled: dict[int, float] = {}
        self._recorded: dict[int, tuple[Phase, float, float | None]] = {}

    def update(self, pairs: Iterable[Pair]) -> None:
        """Take the pairs the store has now: new ones start held, gone ones are stopped."""
        now = {p.guest: p for p in pairs}
        for guest, old in list(self.pairs.items()):
            if now.get(guest) != old:
                del self.pairs[guest]
                self.states.pop(guest, None)
                self._sampled.pop(guest, None)
                self._recorded.pop(guest, None)
                self._stop.setdefault(old.node, []).append(old.tdir)
        for guest, pair in now.items():
            if guest not in self.pairs:
                self.pairs[guest] = pair
                self.states[guest] = self.control.start()

    def feed(self, seen: Iterable[Observation]) -> None:
        """One control step for each pair whose production job has a new rate in ``seen``."""
        for o in seen:
            if not o.full or o.error is not None:
                continue
            for guest, pair in self.pairs.items():
                sample = _sample(o.reports.get(pair.host)) or _estimate(o, pair.host)
                if sample is None or sample[0] == self._sampled.get(guest):
                    continue
                self._sampled[guest] = sample[0]
                _, rate, began = sample
                since = o.throttled.get(pair.tdir)
                if began is not None and since is not None and began < since:
                    continue  # measured partly before the guest's beta took effect
                self.states[guest] = self.control.step(self.states[guest], rate)

    def fast(self) -> set[str]:
        """Nodes to observe fully every control period: with pairs, or a throttle to stop."""
        return {p.node for p in self.pairs.values()} | set(self._stop)

    def requests(self, node: str, docker: list[str]) -> list[dict[str, Any]]:
        """The throttle settings the node's next observation carries (stops are sent once)."""
        out: list[dict[str, Any]] = [{"dir": d, "stop": True} for d in self._stop.pop(node, [])]
        for guest, pair in self.pairs.items():
            if pair.node == node:
                out.append(
                    {
                        "dir": pair.tdir,
                        "container": pair.container,
                        "beta": self.states[guest].beta,
                        "period": self.period,
                        "lease": self.lease,
                        "docker": docker,
                    }
                )
        return out

    def record(self, store: Store) -> int:
        """Record each pair's significant changes since the last record (module docstring).

        Returns how many were recorded.
        """
        notes: list[tuple[Pair, RateState]] = []
        for guest, state in self.states.items():
            seen = (state.phase, state.beta, state.reference)
            last = self._recorded.get(guest)
            moved = last is not None and abs(last[1] - seen[1]) >= BETA_STEP
            if last is not None and last[0] == seen[0] and last[2] == seen[2] and not moved:
                continue
            notes.append((self.pairs[guest], state))
            self._recorded[guest] = seen
        if not notes:
            return 0
        with transaction(store.engine, write=True) as s:
            for pair, state in notes:
                why = f"beside production job {pair.host}: {self.summary(state)}"
                s.execute(update(JobRow).where(JobRow.id == pair.guest).values(reason=why))
                data = {
                    "host": pair.host,
                    "phase": str(state.phase),
                    "beta": state.beta,
                    "reference": state.reference,
                    "rate": state.rate,
                }
                text = f"job {pair.guest} throttled {why}"
                events.record(s, "job.throttle", text, job_id=pair.guest, data=data)
        return len(notes)

    def gauges(self) -> list[tuple[int, int, str, float, float | None]]:
        """``(job, production job, node, beta, slowdown)`` of every pair, for ``/metrics``."""
        out: list[tuple[int, int, str, float, float | None]] = []
        for guest, pair in self.pairs.items():
            state = self.states[guest]
            ref, rate = state.reference, state.rate
            slowdown = 1 - rate / ref if ref and rate is not None else None
            out.append((guest, pair.host, pair.node, state.beta, slowdown))
        return out

    def summary(self, state: RateState) -> str:
        """What the controller does now, in words: held while R is profiled, or beta and speed."""
        if state.reference is None or state.rate is None:
            return "held while the production job's rate alone (R) is measured"
        kept = state.rate / state.reference if state.reference else 1.0
        return (
            f"runs {state.beta:.0%} of the time ({state.phase}); production at {kept:.0%}"
            f" of R = {state.reference:.3g} (target {1 - self.control.epsilon:.0%})"
        )


Sample = tuple[float, float, float | None]
"""A production job's progress: ``(time, rate, began)``, the rate measured from ``began`` up
to ``time`` (the host's clock; None: unknown, :attr:`gctl.daemon.jobfiles.Report.rate_since`)."""


def _estimate(o: Observation, job_id: int) -> Sample | None:
    """A production job's progress without the SDK's rate: its utilisation in the GPU sample.

    Its own utilisation stands in for its rate, as in ``progress_rate``.
    """
    if o.sample is None:
        return None
    util = [j.util_percent for j in o.sample.jobs if j.job_id == job_id and j.util_percent]
    return (o.began, max(util) / 100, None) if util else None


def _sample(report: jobfiles.Report | None) -> Sample | None:
    """The production job's last step report, when it has a rate (a span from SDKs that say)."""
    if report is None or not report.progress:
        return None
    at, rate = report.progress.get("time"), report.progress.get("rate")
    if not isinstance(at, int | float) or not isinstance(rate, int | float) or rate < 0:
        return None
    return float(at), float(rate), report.rate_since
