"""The daemon's rate controllers: pairs come and go, samples step them, settings go out once."""

from __future__ import annotations

from gctl.core.tgs import Phase, RateControl
from gctl.daemon.jobfiles import Report
from gctl.daemon.throttles import Pair, Throttles
from gctl.daemon.watch import Observation
from gctl.services.telemetry import JobSample, NodeSample

PAIR = Pair(guest=2, attempt=0, host=1, node="h1", container="gctl-s-2-0", tdir="/w/throttles/2")
DOCKER = ["docker"]


def _look(
    at: float,
    rate: float | None = None,
    util: float | None = None,
    span: float | None = None,
    since: float | None = None,
) -> Observation:
    reports = {}
    if rate is not None:
        progress = {"step": 1, "time": at, "rate": rate}
        reports[1] = Report(progress if span is None else {**progress, "span": span}, None, None)
    sample = None
    if util is not None:
        job = JobSample(1, "c", "running", (0,), util, 100, True)
        sample = NodeSample("h1", None, "emulated", (), (job,))
    throttled = {} if since is None else {PAIR.tdir: since}
    return Observation("h1", at, 0, True, sample=sample, reports=reports, throttled=throttled)


def test_a_new_pair_starts_held_and_each_new_rate_is_one_control_step() -> None:
    control = RateControl(profile_steps=2)
    throttles = Throttles(control, lease=5.0)
    throttles.update([PAIR])
    [setting] = throttles.requests("h1", DOCKER)
    assert setting["beta"] == 0.0 and setting["container"] == "gctl-s-2-0"
    assert setting["lease"] == 5.0 and throttles.fast() == {"h1"}
    throttles.feed([_look(1.0, rate=10.0)])
    throttles.feed([_look(1.0, rate=10.0)])  # the same report again: no step
    assert throttles.states[2].steps == 1
    throttles.feed([_look(2.0, rate=10.0)])
    state = throttles.states[2]
    assert state.phase is Phase.SLOW_START and state.reference == 10.0
    assert throttles.requests("h1", DOCKER)[0]["beta"] == control.beta_min
    assert throttles.gauges() == [(2, 1, "h1", control.beta_min, 0.0)]
    assert throttles.requests("h2", DOCKER) == []


def test_without_the_sdk_the_production_jobs_utilisation_is_the_signal() -> None:
    throttles = Throttles(RateControl(profile_steps=1), lease=5.0)
    throttles.update([PAIR])
    throttles.feed([_look(1.0, util=60.0)])
    assert throttles.states[2].reference == 0.6


def test_a_pair_that_ends_has_its_throttle_stopped_once() -> None:
    throttles = Throttles(RateControl(), lease=5.0)
    throttles.update([PAIR])
    throttles.update([])
    assert throttles.pairs == {} and throttles.fast() == {"h1"}
    assert throttles.requests("h1", DOCKER) == [{"dir": "/w/throttles/2", "stop": True}]
    assert throttles.requests("h1", DOCKER) == [] and throttles.fast() == set()
    assert throttles.gauges() == []


def test_a_rate_measured_partly_before_the_guests_beta_took_effect_is_not_judged() -> None:
    """A 1 s rate window reported 0.5 s after the beta was set mixes the old beta in: skipped."""
    throttles = Throttles(RateControl(profile_steps=1), lease=5.0)
    throttles.update([PAIR])
    throttles.feed([_look(10.5, rate=10.0, span=1.0, since=10.0)])
    assert throttles.states[2].steps == 0
    throttles.feed([_look(11.2, rate=10.0, span=1.0, since=10.0)])  # measured wholly after
    assert throttles.states[2].steps == 1 and throttles.states[2].reference == 10.0
    throttles.feed([_look(12.0, rate=5.0)])  # an SDK that does not say its span: judged
    assert throttles.states[2].steps == 2
