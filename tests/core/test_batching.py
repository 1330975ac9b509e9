"""Batch-size curves and balancing the global batch over unequal workers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gctl.core.batching import (
    Curve,
    balance,
    equal_split,
    fit,
    profile_splits,
    step_time,
)


def test_fit_recovers_a_line_and_refuses_what_is_no_curve() -> None:
    got = fit([(32, 0.05 + 0.002 * 32), (64, 0.05 + 0.002 * 64), (48, 0.05 + 0.002 * 48)])
    assert got is not None
    assert (got.alpha, got.beta) == (pytest.approx(0.05), pytest.approx(0.002))
    assert fit([(32, 0.1), (32, 0.12)]) is None  # one batch size says nothing of the slope
    assert fit([(32, 0.2), (64, 0.1)]) is None  # more samples in less time: not a curve
    through_origin = fit([(10, 0.1), (20, 0.3)])  # the line would cross below zero
    assert through_origin is not None and through_origin.alpha == 0.0
    assert through_origin.time(20) == pytest.approx(0.28)


def test_balance_equalises_a_k80_and_a_v100() -> None:
    v100 = Curve(0.01, 0.001)
    k80 = v100.slowed(3.0)
    equal = equal_split(256, 2)
    split = balance(256, [k80, v100])
    assert sum(split) == 256 and split[0] < split[1]
    times = [c.time(b) for b, c in zip(split, [k80, v100], strict=True)]
    assert max(times) / min(times) - 1 < 0.02
    assert step_time(split, [k80, v100]) < 0.6 * step_time(equal, [k80, v100])


def test_a_worker_too_slow_for_one_sample_keeps_one() -> None:
    split = balance(4, [Curve(0.0, 1.0), Curve(0.0, 1.0), Curve(10.0, 1000.0)])
    assert split == [2, 1, 1] or split == [1, 2, 1]
    with pytest.raises(ValueError, match="cannot split a batch of 2 over 3"):
        balance(2, [Curve(0, 1)] * 3)


@given(
    st.integers(2, 4096),
    st.lists(st.tuples(st.floats(0.0, 0.5), st.floats(1e-5, 1e-1)), min_size=1, max_size=16),
)
def test_balance_keeps_the_global_batch_and_never_loses_to_equal(
    batch: int, params: list[tuple[float, float]]
) -> None:
    curves = [Curve(a, b) for a, b in params]
    if batch < len(curves):
        return
    split = balance(batch, curves)
    assert sum(split) == batch and min(split) >= 1
    # rounding costs at most one sample's time on the slowest worker
    slack = max(c.beta for c in curves)
    assert step_time(split, curves) <= step_time(equal_split(batch, len(curves)), curves) + slack


def test_profile_splits_measure_every_worker_at_two_sizes_with_the_same_global_batch() -> None:
    splits = profile_splits(256, 2)
    assert splits == [[128, 128], [96, 160], [160, 96]]
    three = profile_splits(90, 3)
    assert all(sum(s) == 90 for s in three)
    assert all(len({s[i] for s in three}) >= 2 for i in range(3))
    assert profile_splits(64, 1) == [[64]]
