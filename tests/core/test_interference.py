"""Interference prediction (observed, model, neighbour, default) and placement by least of it."""

from __future__ import annotations

import math
import random

import pytest
from corekit import gandiva, new_state, observe, of_type, submit

from gctl.core.decisions import Pack, Resume
from gctl.core.interference import (
    DEFAULT_SLOWDOWN,
    CoRun,
    Features,
    Interference,
    PairOutlook,
    Prediction,
    Predictor,
    best_partner,
)
from gctl.core.model import JobStatus
from gctl.core.state import ClusterState


def _synthetic(kinds: int, seed: int) -> dict[tuple[str, str], float]:
    """Slow-downs from a known rank-2 model with biases: what the fit should recover."""
    rnd = random.Random(seed)
    names = [f"k{i}" for i in range(kinds)]
    s = {k: rnd.uniform(0.0, 0.5) for k in names}
    p = {k: rnd.uniform(0.0, 0.5) for k in names}
    u = {k: [rnd.uniform(-0.6, 0.6) for _ in range(2)] for k in names}
    v = {k: [rnd.uniform(-0.6, 0.6) for _ in range(2)] for k in names}
    return {
        (a, b): math.exp(0.2 + s[a] + p[b] + sum(x * y for x, y in zip(u[a], v[b], strict=True)))
        for a in names
        for b in names
    }


def test_fit_predicts_pairs_it_never_saw() -> None:
    """Held-out pairs of a low-rank world are predicted within a few per cent."""
    truth = _synthetic(12, seed=3)
    pairs = sorted({tuple(sorted(k)) for k in truth})
    random.Random(1).shuffle(pairs)
    held = set(pairs[: len(pairs) // 5])
    train = [CoRun(a, b, d) for (a, b), d in truth.items() if tuple(sorted((a, b))) not in held]
    model = Predictor.fit(prior=train)

    def median_error(fitted: Predictor) -> float:
        errors = sorted(
            abs(fitted.slowdown(a, b).slowdown - d) / d
            for (a, b), d in truth.items()
            if tuple(sorted((a, b))) in held
        )
        return errors[len(errors) // 2]

    assert median_error(model) < 0.05
    assert model.slowdown("k1", "k2").source == "model"
    # without the interaction term the same fit misses by far more: the rank is what recovers it
    assert median_error(Predictor.fit(prior=train, rank=0)) > 2 * median_error(model)


def test_observed_pair_is_answered_from_what_was_measured() -> None:
    model = Predictor.fit(
        prior=[CoRun("a", "b", 1.2), CoRun("b", "a", 1.3)],
        observed=[CoRun("a", "b", 2.0), CoRun("a", "b", 8.0)],
    )
    got = model.slowdown("a", "b")
    assert got.source == "observed"
    assert got.slowdown == pytest.approx(4.0)  # geometric mean of 2 and 8
    assert model.slowdown("b", "a").source == "model"


def test_unknown_kind_borrows_its_nearest_neighbour() -> None:
    features = {"light": Features(0.1, 1000), "heavy": Features(0.9, 12000)}
    runs = [
        CoRun("light", "light", 1.1),
        CoRun("light", "heavy", 1.6),
        CoRun("heavy", "light", 1.2),
        CoRun("heavy", "heavy", 2.5),
    ]
    model = Predictor.fit(prior=runs, features=features)
    like_heavy = model.slowdown("new", "heavy", Features(0.85, 11000), None)
    assert like_heavy.source == "neighbour"
    assert like_heavy.slowdown == pytest.approx(model.slowdown("heavy", "heavy").slowdown)
    like_light = model.slowdown("new", "heavy", Features(0.05, 800), None)
    assert like_light.slowdown == pytest.approx(model.slowdown("light", "heavy").slowdown)
    # like neither: only the known side's bias says anything
    between = model.slowdown("new", "heavy", Features(0.5, 6000), None)
    assert between.source == "model"
    assert between.slowdown not in (like_heavy.slowdown, like_light.slowdown)
    assert model.slowdown("new", "other", Features(0.5, 6000), None).source == "default"


def test_nothing_known_gives_the_default() -> None:
    empty = Predictor.fit()
    assert empty.slowdown("x", "y") == Prediction(DEFAULT_SLOWDOWN, "default")
    assert empty.slowdown(None, None, Features(0.5, 100), Features(0.5, 100)).source == "default"


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_a_slowdown_that_is_not_a_positive_number_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="not a positive number"):
        Predictor.fit(observed=[CoRun("a", "b", bad)])


def _outlook(a: float, b: float) -> PairOutlook:
    return PairOutlook(Prediction(a, "model"), Prediction(b, "model"))


def test_best_partner_is_the_highest_predicted_aggregate_that_pays() -> None:
    options = [("x", _outlook(2.1, 2.1)), ("y", _outlook(1.2, 1.3)), ("z", _outlook(1.1, 2.5))]
    # z has the best first speed but its second job would run below half speed
    assert best_partner(options, 1.0) == options[1]
    assert best_partner([options[0], options[2]], 1.0) is None  # neither pays


def _kinds_state() -> ClusterState:
    """One 4-GPU node: a, b, c, d alone, then e and f time-slice onto a's and b's GPUs.

    Waiting: a (kind A, util 0.3) and b (kind B, util 0.2). Running alone:
    c (kind C, util 0.4) and d (kind D, util 0.1).
    """
    state = new_state(4)
    policy = gandiva()
    for j in "abcd":
        submit(state, j, 1, profile=j.upper())
    policy.schedule(state, 0.0)
    for j, util in zip("abcd", (0.3, 0.2, 0.4, 0.1), strict=True):
        observe(state, j, 1.0, util=util, rate=10.0)
    for j in "ef":
        submit(state, j, 1, 5.0, profile=j.upper())
    policy.schedule(state, 5.0)
    assert state.jobs["a"].status is JobStatus.SUSPENDED
    return state


def _predicting(state: ClusterState, slowdowns: dict[tuple[str, str], float]) -> None:
    observed = [CoRun(a, b, d) for (a, b), d in slowdowns.items()]
    state.interference = Interference({"v100": Predictor.fit(observed=observed)})


# b (the lightest waiting job) beside d (the lightest runner) is a bad pair; beside c it is good
_PAIRS = {("B", "D"): 3.0, ("D", "B"): 3.0, ("B", "C"): 1.1, ("C", "B"): 1.2}


def test_waiting_job_packs_beside_the_partner_of_least_predicted_interference() -> None:
    state = _kinds_state()
    _predicting(state, _PAIRS)
    out = gandiva().introspect(state, 10.0)
    packs = {p.job_id: p for p in of_type(out, Pack)}
    assert packs["b"].with_jobs == ("c",)
    assert "predicted slow-down 1.10x and 1.20x (observed)" in packs["b"].reason


def test_without_the_predictor_packing_takes_the_lightest_partner() -> None:
    """``interference=false``: Gandiva's utilisation-sum packing, the bad pair included."""
    state = _kinds_state()
    _predicting(state, _PAIRS)
    out = gandiva(interference=False).introspect(state, 10.0)
    packs = {p.job_id: p for p in of_type(out, Pack)}
    assert packs["b"].with_jobs == ("d",)
    assert "utilisation 20% + 10%" in packs["b"].reason


def test_a_pair_predicted_not_to_pay_is_not_packed() -> None:
    state = _kinds_state()
    bad = {(x, y): 2.5 for x in "ABCDEF" for y in "ABCDEF"}
    _predicting(state, bad)
    assert of_type(gandiva().introspect(state, 10.0), Pack) == []


def _turn_pair(predicted: bool) -> dict[str, Resume]:
    """Four light jobs take turns on one GPU; who resumes when z's quantum is over."""
    state = new_state(1)
    policy = gandiva(quantum=10.0)
    for j in "wxyz":
        submit(state, j, 1, profile=j.upper())
    policy.schedule(state, 0.0)
    for j in "wxyz":
        observe(state, j, 1.0, util=0.2, rate=10.0)
    assert [j for j in "wxyz" if state.jobs[j].status is JobStatus.RUNNING] == ["z"]
    if predicted:
        slow = {(a, b): 2.2 for a in "WXYZ" for b in "WXYZ" if a != b}
        slow.update({("W", "Y"): 1.05, ("Y", "W"): 1.1})
        _predicting(state, slow)
    return {r.job_id: r for r in of_type(policy.introspect(state, 20.0), Resume)}


def test_turn_partner_is_the_member_of_least_predicted_interference() -> None:
    resumed = _turn_pair(predicted=True)
    assert set(resumed) == {"w", "y"}  # w is next in turn; y, not x, goes beside it
    assert "packed with job y (predicted slow-down 1.05x and 1.10x (observed))" in (
        resumed["w"].reason
    )


def test_without_the_predictor_the_next_two_in_turn_pair_up() -> None:
    assert set(_turn_pair(predicted=False)) == {"w", "x"}


def _time_sliced_onto(predicted: bool, aware: bool = True) -> tuple[str, str]:
    """Two 1-GPU nodes running x (kind X) and y (kind Y): where a Z job time-slices, and y's node.

    The pair table says Z is a bad partner for X and a good one for Y.
    """
    state = new_state(1, 1)
    policy = gandiva(interference=aware)
    submit(state, "x", 1, profile="X")
    submit(state, "y", 1, profile="Y")
    policy.schedule(state, 0.0)
    if predicted:
        _predicting(state, {("Z", "X"): 3.0, ("X", "Z"): 3.0, ("Z", "Y"): 1.1, ("Y", "Z"): 1.2})
    submit(state, "z", 1, 2.0, profile="Z")
    policy.schedule(state, 2.0)
    return state.jobs["z"].gpus[0][0], state.jobs["y"].gpus[0][0]


def test_a_job_time_slices_beside_its_best_predicted_turn_partner() -> None:
    where, y_node = _time_sliced_onto(predicted=True)
    assert where == y_node
    first_by_height, x_node = (
        _time_sliced_onto(predicted=False)[0],
        "n0" if y_node == "n1" else "n1",
    )
    assert first_by_height == x_node  # without a prediction Algorithm 1 would have chosen x's
    assert _time_sliced_onto(predicted=True, aware=False)[0] == x_node
