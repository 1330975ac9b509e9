from __future__ import annotations

import json
import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gctl.core.decisions import (
    Grow,
    Migrate,
    Pack,
    Place,
    Queue,
    Requeue,
    Resume,
    Shrink,
    Suspend,
    Unpack,
)
from gctl.core.model import ShareMode
from gctl.sim.metrics import (
    Counters,
    JobRecord,
    Metrics,
    compare,
    percentile,
    relative_change,
    summarize,
)

G0 = ("n0", 0)
G1 = ("n0", 1)

COUNTER_NAMES = [
    "places",
    "queues",
    "suspends",
    "resumes",
    "packs",
    "unpacks",
    "migrations",
    "grows",
    "shrinks",
    "requeues",
]


def rec(
    job_id: str,
    submit: float,
    first_run: float | None,
    finish: float | None,
    gpus: int = 1,
) -> JobRecord:
    return JobRecord(job_id=job_id, gpus=gpus, submit=submit, first_run=first_run, finish=finish)


# --- percentiles -----------------------------------------------------------


def test_percentile_hand_computed() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]  # unsorted on purpose
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 95) == pytest.approx(4.8)  # pos 0.95 * 4 = 3.8
    assert percentile(values, 99) == pytest.approx(4.96)  # pos 3.96
    assert percentile(values, 100) == 5.0
    assert percentile(values, 25) == 2.0


def test_percentile_even_count_median_interpolates() -> None:
    assert percentile([10.0, 20.0, 30.0, 40.0], 50) == 25.0


def test_percentile_single_and_empty() -> None:
    assert percentile([7.0], 50) == 7.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) == 0.0


def test_percentile_matches_statistics_inclusive() -> None:
    values = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    for q in (1, 25, 50, 75, 95, 99):
        assert percentile(values, q) == pytest.approx(cuts[q - 1])
    assert percentile(values, 50) == statistics.median(values)


@pytest.mark.parametrize("q", [-0.1, 100.5])
def test_percentile_rejects_out_of_range(q: float) -> None:
    with pytest.raises(ValueError):
        percentile([1.0], q)


# --- summarize ---------------------------------------------------------------


def test_summarize_hand_computed() -> None:
    records = [
        rec("a", submit=0.0, first_run=0.0, finish=10.0, gpus=2),  # jct 10, delay 0
        rec("b", submit=5.0, first_run=8.0, finish=20.0, gpus=1),  # jct 15, delay 3
        rec("c", submit=10.0, first_run=16.0, finish=None, gpus=4),  # cut off, delay 6
        rec("d", submit=12.0, first_run=None, finish=None, gpus=1),  # never ran
    ]
    counters = Counters(places=3, queues=1)
    m = summarize(records, counters, busy_gpu_seconds=40.0, total_gpus=4)

    assert m.jobs == 4
    assert m.finished == 2
    assert m.avg_jct == 12.5
    assert m.median_jct == 12.5
    assert m.p95_jct == pytest.approx(14.75)
    assert m.p99_jct == pytest.approx(14.95)
    assert m.makespan == 20.0  # last finish 20 - first submit 0
    assert m.avg_queueing_delay == 3.0  # (0 + 3 + 6) / 3, "d" never ran
    assert m.avg_time_to_first_progress == m.avg_queueing_delay
    assert m.gpu_utilisation == 0.5  # 40 / (4 GPUs * 20 s)
    assert m.counts == {**dict.fromkeys(COUNTER_NAMES, 0), "places": 3, "queues": 1}


def test_makespan_starts_at_first_submit_even_if_unfinished() -> None:
    records = [
        rec("early", submit=2.0, first_run=None, finish=None),
        rec("late", submit=5.0, first_run=6.0, finish=9.0),
    ]
    m = summarize(records, Counters(), busy_gpu_seconds=3.0, total_gpus=1)
    assert m.makespan == 7.0
    assert m.gpu_utilisation == pytest.approx(3.0 / 7.0)
    assert m.finished == 1
    assert m.avg_jct == m.median_jct == m.p95_jct == m.p99_jct == 4.0


def test_summarize_empty() -> None:
    m = summarize([], Counters(), busy_gpu_seconds=0.0, total_gpus=8)
    assert m.jobs == 0
    assert m.finished == 0
    for name in (
        "avg_jct",
        "median_jct",
        "p95_jct",
        "p99_jct",
        "makespan",
        "avg_queueing_delay",
        "avg_time_to_first_progress",
        "gpu_utilisation",
    ):
        assert getattr(m, name) == 0.0, name
    assert m.counts == dict.fromkeys(COUNTER_NAMES, 0)


def test_summarize_nothing_finished() -> None:
    records = [rec("a", 0.0, 1.0, None), rec("b", 0.0, None, None)]
    m = summarize(records, Counters(), busy_gpu_seconds=5.0, total_gpus=2)
    assert (m.jobs, m.finished) == (2, 0)
    assert m.avg_jct == m.p99_jct == m.makespan == m.gpu_utilisation == 0.0
    assert m.avg_queueing_delay == 1.0


def test_summarize_zero_gpus_does_not_divide_by_zero() -> None:
    m = summarize([rec("a", 0.0, 0.0, 5.0)], Counters(), busy_gpu_seconds=0.0, total_gpus=0)
    assert m.gpu_utilisation == 0.0


def test_summarize_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        summarize([rec("a", 0, 0, 1), rec("a", 0, 0, 2)], Counters(), 0.0, 1)
    with pytest.raises(ValueError):
        summarize([], Counters(), busy_gpu_seconds=-1.0, total_gpus=1)
    with pytest.raises(ValueError):
        summarize([], Counters(), busy_gpu_seconds=0.0, total_gpus=-1)


@pytest.mark.parametrize(
    ("submit", "first_run", "finish", "gpus"),
    [
        (5.0, 4.0, None, 1),  # runs before submit
        (0.0, 3.0, 2.0, 1),  # finishes before it runs
        (0.0, None, 2.0, 1),  # finishes without running
        (0.0, None, None, -1),  # negative GPUs
    ],
)
def test_job_record_rejects_impossible(
    submit: float, first_run: float | None, finish: float | None, gpus: int
) -> None:
    with pytest.raises(ValueError):
        rec("x", submit, first_run, finish, gpus)


def test_to_dict_is_json_ready_and_stable() -> None:
    counters = Counters()
    counters.count(Queue("a", "busy"))
    m = summarize([rec("a", 0.0, 1.0, 3.0)], counters, 2.0, 1)
    d = m.to_dict()
    assert list(d) == [
        "jobs",
        "finished",
        "avg_jct",
        "median_jct",
        "p95_jct",
        "p99_jct",
        "makespan",
        "avg_queueing_delay",
        "avg_time_to_first_progress",
        "gpu_utilisation",
        "counts",
    ]
    assert list(d["counts"]) == COUNTER_NAMES  # type: ignore[call-overload]
    assert json.loads(json.dumps(d)) == d
    d["counts"]["queues"] = 99  # type: ignore[index]
    assert m.counts["queues"] == 1  # to_dict hands out a copy


# --- counters ----------------------------------------------------------------

DECISIONS = [
    (Place("j", (G0,), ShareMode.EXCLUSIVE, "free GPU"), "places"),
    (Queue("j", "no room"), "queues"),
    (Suspend("j", "time slice over"), "suspends"),
    (Resume("j", "its turn"), "resumes"),
    (Pack("j", (G0,), ("k",), "low utilisation"), "packs"),
    (Unpack("j", "interference"), "unpacks"),
    (Migrate(job_id="j", src=(G0,), dst=(G1,), reason="defragment"), "migrations"),
    (Grow("j", (G0, G1), "idle GPUs"), "grows"),
    (Shrink("j", (G0,), "make room"), "shrinks"),
    (Requeue("j", "starving job"), "requeues"),
]


@pytest.mark.parametrize(("decision", "field"), DECISIONS)
def test_counters_count_each_decision(decision: object, field: str) -> None:
    c = Counters()
    c.count(decision)
    c.count(decision)
    expected = dict.fromkeys(COUNTER_NAMES, 0)
    expected[field] = 2
    assert c.as_dict() == expected


def test_counters_cover_every_decision_type() -> None:
    c = Counters()
    for decision, _ in DECISIONS:
        c.count(decision)
    assert c.as_dict() == dict.fromkeys(COUNTER_NAMES, 1)


@pytest.mark.parametrize("bad", [object(), "Place", None, 3, Place])
def test_counters_reject_unknown(bad: object) -> None:
    c = Counters()
    with pytest.raises(TypeError):
        c.count(bad)
    assert c.as_dict() == dict.fromkeys(COUNTER_NAMES, 0)


def test_counters_reject_lookalike_class() -> None:
    class Place:  # same name, not the real decision
        pass

    with pytest.raises(TypeError):
        Counters().count(Place())


def test_counters_tally_suspends_and_moves_per_job() -> None:
    c = Counters()
    for decision in (
        Suspend("a", "time slice over"),
        Suspend("a", "time slice over"),
        Migrate(job_id="a", src=(G0,), dst=(G1,), reason="defragment"),
        Requeue("b", "starving job"),
        Suspend("b", "time slice over"),
        # Neither a suspend nor a move:
        Grow("a", (G0, G1), "idle GPUs"),
        Shrink("b", (G0,), "make room"),
        Resume("a", "its turn"),
        Place("c", (G0,), ShareMode.EXCLUSIVE, "free GPU"),
        Pack("c", (G1,), ("d",), "low utilisation"),
        Unpack("c", "interference"),
    ):
        c.count(decision)
    assert (c.of_job("a"), c.of_job("b"), c.of_job("c"), c.of_job("nobody")) == (
        (2, 1),
        (1, 1),
        (0, 0),
        (0, 0),
    )
    assert c.as_dict()["suspends"] == 3, "the run-wide counters still count"
    assert "per_job" not in c.as_dict()


def test_counters_reject_unknown_without_tallying() -> None:
    c = Counters()
    with pytest.raises(TypeError):
        c.count(object())
    assert c.per_job == {}


def test_job_record_tallies_default_to_zero_and_reject_negatives() -> None:
    r = rec("a", 0.0, 1.0, 2.0)
    assert (r.suspends, r.moves) == (0, 0)
    assert JobRecord("a", 1, 0.0, 1.0, 2.0, suspends=3, moves=1).moves == 1
    with pytest.raises(ValueError, match="suspends and moves"):
        JobRecord("a", 1, 0.0, 1.0, 2.0, suspends=-1)
    with pytest.raises(ValueError, match="suspends and moves"):
        JobRecord("a", 1, 0.0, 1.0, 2.0, moves=-1)


# --- relative change and compare ----------------------------------------------


def test_relative_change() -> None:
    assert relative_change(100.0, 80.0) == pytest.approx(-0.2)
    assert relative_change(100.0, 150.0) == pytest.approx(0.5)
    assert relative_change(4.0, 4.0) == 0.0
    assert relative_change(0.0, 5.0) is None
    assert relative_change(0.0, 0.0) is None


def test_compare() -> None:
    base = summarize(
        [rec("a", 0.0, 0.0, 10.0), rec("b", 0.0, 10.0, 20.0)],
        Counters(places=2, queues=1),
        busy_gpu_seconds=20.0,
        total_gpus=1,
    )
    new = summarize(
        [rec("a", 0.0, 0.0, 10.0), rec("b", 0.0, 0.0, 10.0)],
        Counters(places=2, packs=1),
        busy_gpu_seconds=20.0,
        total_gpus=2,
    )
    cmp = compare(base, new)
    assert cmp["avg_jct"] == {"base": 15.0, "new": 10.0, "change": pytest.approx(-1 / 3)}
    assert cmp["makespan"] == {"base": 20.0, "new": 10.0, "change": -0.5}
    assert cmp["avg_queueing_delay"] == {"base": 5.0, "new": 0.0, "change": -1.0}
    assert cmp["gpu_utilisation"] == {"base": 1.0, "new": 1.0, "change": 0.0}
    assert cmp["jobs"] == {"base": 2.0, "new": 2.0, "change": 0.0}
    assert cmp["counts.queues"] == {"base": 1.0, "new": 0.0, "change": -1.0}
    assert cmp["counts.packs"] == {"base": 0.0, "new": 1.0, "change": None}
    assert "counts" not in cmp
    assert list(cmp)[:2] == ["jobs", "finished"]
    assert [k for k in cmp if k.startswith("counts.")] == [f"counts.{n}" for n in COUNTER_NAMES]
    json.dumps(cmp)


def test_compare_empty_runs() -> None:
    empty = summarize([], Counters(), 0.0, 0)
    assert all(v["change"] is None for v in compare(empty, empty).values())


# --- properties --------------------------------------------------------------

_time = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def job_records(draw: st.DrawFn) -> list[JobRecord]:
    n = draw(st.integers(min_value=0, max_value=30))
    out = []
    for i in range(n):
        submit = draw(_time)
        ran = draw(st.booleans())
        first_run = submit + draw(_time) if ran else None
        finish = first_run + draw(_time) if first_run is not None and draw(st.booleans()) else None
        gpus = draw(st.integers(min_value=1, max_value=8))
        out.append(JobRecord(f"j{i}", gpus, submit, first_run, finish))
    return out


@settings(max_examples=200, deadline=None)
@given(
    records=job_records(),
    total_gpus=st.integers(min_value=0, max_value=64),
    busy_fraction=st.floats(min_value=0.0, max_value=1.0),
    data=st.data(),
)
def test_summary_properties(
    records: list[JobRecord], total_gpus: int, busy_fraction: float, data: st.DataObject
) -> None:
    jcts = [r.finish - r.submit for r in records if r.finish is not None]
    delays = [r.first_run - r.submit for r in records if r.first_run is not None]
    finishes = [r.finish for r in records if r.finish is not None]
    makespan = max(finishes) - min(r.submit for r in records) if finishes else 0.0
    busy = busy_fraction * total_gpus * makespan

    m = summarize(records, Counters(), busy_gpu_seconds=busy, total_gpus=total_gpus)

    assert m.jobs == len(records)
    assert m.finished == len(jcts)
    assert m.makespan == makespan
    assert 0.0 <= m.gpu_utilisation <= 1.0
    if jcts:
        assert min(jcts) <= m.median_jct <= m.p95_jct <= m.p99_jct <= max(jcts)
        assert min(jcts) <= m.avg_jct <= max(jcts)
        assert m.median_jct == pytest.approx(statistics.median(jcts))
        assert math.isclose(m.avg_jct, statistics.fmean(jcts), rel_tol=1e-9, abs_tol=1e-6)
    else:
        assert m.avg_jct == m.median_jct == m.p95_jct == m.p99_jct == 0.0
    if delays:
        assert min(delays) <= m.avg_queueing_delay <= max(delays)
    else:
        assert m.avg_queueing_delay == 0.0
    assert m.avg_time_to_first_progress == m.avg_queueing_delay

    # Deterministic and independent of record order.
    shuffled = data.draw(st.permutations(records))
    again = summarize(shuffled, Counters(), busy_gpu_seconds=busy, total_gpus=total_gpus)
    assert again == m
    assert isinstance(again, Metrics)


@given(
    values=st.lists(
        st.floats(min_value=-1e9, max_value=1e9, allow_nan=False), min_size=1, max_size=50
    ),
    q1=st.floats(min_value=0.0, max_value=100.0),
    q2=st.floats(min_value=0.0, max_value=100.0),
)
def test_percentile_monotone_and_bounded(values: list[float], q1: float, q2: float) -> None:
    lo, hi = sorted((q1, q2))
    assert min(values) <= percentile(values, lo) <= percentile(values, hi) <= max(values)
