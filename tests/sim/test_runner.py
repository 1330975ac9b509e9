"""The ``gctl sim`` use-case layer: the per-job CSV rows and how they are written."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gctl.sim.engine import SimResult
from gctl.sim.metrics import Counters, JobRecord, summarize
from gctl.sim.runner import PER_JOB_HEADER, SimReport, per_job_rows, write_per_job


def _report(*runs: tuple[str, tuple[JobRecord, ...]]) -> SimReport:
    results = tuple(
        SimResult(name, summarize(records, Counters(), 0.0, 8), (), (), 0, 0.0)
        for name, records in runs
    )
    return SimReport("t.csv", "1x8", 8, 2, results, {}, tuple(records for _, records in runs))


def test_rows_leave_what_did_not_happen_empty() -> None:
    records = (
        JobRecord("done", 2, 10.0, 15.0, 40.5, suspends=3, moves=1),
        JobRecord("running", 1, 20.0, 25.0, None),
        JobRecord("waiting", 4, 30.0, None, None),
    )
    assert per_job_rows(_report(("p", records))) == [
        ["p", "done", "2", "10.0", "15.0", "40.5", "30.5", "5.0", "3", "1"],
        ["p", "running", "1", "20.0", "25.0", "", "", "5.0", "0", "0"],
        ["p", "waiting", "4", "30.0", "", "", "", "", "0", "0"],
    ]


def test_rows_come_policy_by_policy_in_report_order() -> None:
    a = (JobRecord("x", 1, 0.0, 0.0, 1.0), JobRecord("y", 1, 0.0, 0.0, 2.0))
    b = (JobRecord("x", 1, 0.0, 1.0, 3.0), JobRecord("y", 1, 0.0, 0.0, 2.0))
    rows = per_job_rows(_report(("a", a), ("b", b)))
    assert [(r[0], r[1]) for r in rows] == [("a", "x"), ("a", "y"), ("b", "x"), ("b", "y")]


def test_times_keep_full_precision() -> None:
    rows = per_job_rows(_report(("p", (JobRecord("j", 1, 0.1, 0.2, 1 / 3),))))
    assert float(rows[0][5]) == 1 / 3


def test_write_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("old\n")
    write_per_job(path, [["p", "j,1", "1", "0.0", "", "", "", "", "0", "0"]])
    with path.open(newline="") as fh:
        assert list(csv.reader(fh)) == [
            list(PER_JOB_HEADER),
            ["p", "j,1", "1", "0.0", "", "", "", "", "0", "0"],
        ]
    assert [p.name for p in tmp_path.iterdir()] == ["jobs.csv"]


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "a-folder"
    target.mkdir()
    (target / "inside").write_text("kept")
    with pytest.raises(OSError):
        write_per_job(target, [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-folder"]
    assert (target / "inside").read_text() == "kept"
