"""The dl2 trainer's parts: PPO's clipped weights, the windows a model is picked on, draws."""

from __future__ import annotations

import numpy as np
from gctl_dl2.policy import Dl2Policy
from gctl_dl2.training import check_windows, clipped_advantage, demand, windows

from gctl.core.model import JobSpec
from gctl.sim.workload import TraceJob


def test_a_sample_whose_ratio_moved_past_the_clip_the_way_its_advantage_pushes_is_dropped() -> None:
    adv = np.array([1.0, 1.0, -1.0, -1.0, 2.0, -2.0])
    ratio = np.array([1.1, 1.3, 0.9, 0.7, 0.7, 1.5])
    got = clipped_advantage(adv, ratio, 0.2)
    # inside the clip: adv * ratio; past it the way the advantage pushes: 0; past it the
    # other way (a good action made rarer, a bad one likelier): still adv * ratio, to undo it
    assert got.tolist() == [1.1, 0.0, -0.9, 0.0, 1.4, -3.0]


def _job(i: int, day: float, gpus: int, hours: float) -> TraceJob:
    spec = JobSpec(f"j{i}", gpus, submit_time=day * 86400.0)
    return TraceJob(spec, hours * 3600.0)


def test_the_model_is_picked_on_the_heaviest_of_the_windows_drawn() -> None:
    # Ten days: an 8-GPU, 10-hour job on each of days 6 to 9, a 1-GPU, 1-hour one on the others.
    jobs = [_job(i, i + 0.5, 8 if i >= 6 else 1, 10.0 if i >= 6 else 1.0) for i in range(10)]
    drawn = windows(jobs, 2.0, 12, np.random.default_rng(3))
    kept = check_windows(jobs, 2.0, 2, 6, np.random.default_rng(3))
    heaviest = sorted((demand(w) for w in drawn), reverse=True)[:2]
    assert [demand(w) for w in kept] == heaviest == [160 * 3600.0] * 2  # two heavy days each
    plain = windows(jobs, 2.0, 2, np.random.default_rng(3))  # what one draw each would pick
    assert [demand(w) for w in plain] == [2 * 3600.0] * 2


def test_a_drawn_action_comes_with_the_probability_the_policy_gave_it() -> None:
    rng = np.random.default_rng(0)
    stop, logits = 0.5, np.array([1.0, -np.inf, 2.0])
    p = np.exp(np.array([stop, 1.0, 2.0]))
    p /= p.sum()
    expected = {0: p[0], 1: p[1], 3: p[2]}  # job 1 may not take a GPU: never drawn
    seen = {Dl2Policy._draw(rng, stop, logits) for _ in range(200)}
    assert {a for a, _ in seen} == set(expected)
    assert all(np.isclose(prob, expected[a]) for a, prob in seen)
