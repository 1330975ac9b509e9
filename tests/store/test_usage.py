"""What jobs used, from their rows: running stretches, GPU-seconds, most GPUs at once (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gctl.store.usage import Totals, gpu_seconds, most_at_once, run_times, stretches, totals


def test_stretches_are_the_running_states_to_the_next_row_of_the_same_job() -> None:
    rows = [
        (1, "PENDING", 0.0),
        (1, "RUNNING", 10.0),
        (1, "SUSPENDED", 40.0),
        (1, "RUNNING", 60.0),
        (1, "COMPLETING", 90.0),
        (1, "COMPLETED", 95.0),
        (2, "RUNNING", 5.0),  # still running: no closed stretch
        (3, "RUNNING", 7.0),
        (3, "FAILED", 7.0),  # no length: left out
    ]
    assert list(stretches(rows)) == [(1, 10.0, 40.0), (1, 60.0, 90.0), (1, 90.0, 95.0)]
    assert run_times(rows) == {1: 65.0}


def test_a_job_frozen_in_the_middle_of_its_allocation_is_charged_only_while_running() -> None:
    held = [(100.0, 500.0), (100.0, 500.0)]  # two GPUs kept while frozen from 200 to 300
    ran = [(100.0, 200.0), (300.0, 500.0)]
    assert gpu_seconds(held, ran) == 2 * 300.0
    assert most_at_once(held) == 2


def test_a_job_that_grew_from_one_gpu_to_two_is_charged_for_two_from_then() -> None:
    # one GPU from 100; at 200 the move gives it back and takes two; running again from 250
    held = [(100.0, 200.0), (200.0, 400.0), (200.0, 400.0)]
    ran = [(100.0, 250.0), (250.0, 400.0)]
    assert gpu_seconds(held, ran) == 100.0 + 2 * 200.0
    assert most_at_once(held) == 2


def test_time_before_the_job_runs_on_gpus_it_holds_is_not_charged() -> None:
    # GPUs taken for a move at 50, the job restarted on them at 80
    assert gpu_seconds([(50.0, 150.0)], [(80.0, 150.0)]) == 70.0
    assert gpu_seconds([(50.0, 150.0)], []) == 0.0


def test_totals_of_a_job_with_history_and_of_one_without() -> None:
    ran = [(100.0, 200.0), (300.0, 500.0)]
    assert totals(1, ran, [(100.0, 500.0), (250.0, 500.0)]) == Totals(300.0, 500.0, 2)
    # no allocation history: the GPUs asked for, whenever it ran; none if it never ran
    assert totals(3, ran, []) == Totals(300.0, 900.0, 3)
    assert totals(3, [], []) == Totals(0.0, 0.0, 0)


def test_most_at_once_counts_intervals_that_meet_end_to_end_once() -> None:
    assert most_at_once([(0.0, 5.0), (5.0, 10.0)]) == 1  # closed and reopened (a slice)
    assert most_at_once([(0.0, 5.0), (4.0, 10.0)]) == 2
    assert most_at_once([(3.0, 3.0)]) == 0
    assert most_at_once([]) == 0


intervals = st.lists(
    st.tuples(st.integers(0, 100), st.integers(1, 50)).map(lambda p: (float(p[0]), p[0] + p[1])),
    max_size=8,
)


@given(held=intervals, turns=st.lists(st.integers(0, 200), max_size=12))
def test_gpu_seconds_is_the_measure_of_each_interval_within_the_stretches(
    held: list[tuple[float, float]], turns: list[int]
) -> None:
    """Against counting each unit of time: stretches from alternating running/suspended rows."""
    cuts = sorted(set(turns))
    rows = [(1, "RUNNING" if i % 2 == 0 else "SUSPENDED", float(t)) for i, t in enumerate(cuts)]
    ran = [(a, b) for _, a, b in stretches(rows)]
    slots = {t for a, b in ran for t in range(int(a), int(b))}
    expected = sum(1 for since, until in held for t in range(int(since), int(until)) if t in slots)
    assert gpu_seconds(held, ran) == expected
    at_once = max(
        (sum(1 for s, u in held if s <= t < u) for t in range(0, 151)),
        default=0,
    )
    assert most_at_once(held) == at_once


def test_run_times_count_a_stretch_still_open_only_when_asked_up_to_when() -> None:
    rows = [
        (1, "RUNNING", 100.0),
        (1, "SUSPENDED", 110.0),
        (1, "RUNNING", 130.0),  # runs now
        (2, "RUNNING", 100.0),
        (2, "COMPLETED", 150.0),
        (3, "PENDING", 100.0),
    ]
    assert run_times(rows) == {1: 10.0, 2: 50.0}
    assert run_times(rows, at=145.0) == {1: 25.0, 2: 50.0}
