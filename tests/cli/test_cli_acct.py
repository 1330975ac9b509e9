"""``gctl acct`` over a real SQLite store: the sacct-like table, JSON, CSV, summary, bad input."""

from __future__ import annotations

import csv
import io
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from clikit import ok, run, unsafe
from sqlalchemy import delete

from gctl.cli.errors import UsageError
from gctl.cli.parse import parse_time
from gctl.cli.render import ACCT_CSV
from gctl.services import jobs, specs
from gctl.services.db import connect
from gctl.store.engine import transaction
from gctl.store.models import AllocationHistoryRow, JobRow, JobStateRow

HOUR = 3600.0
NOW = time.time()


def _ran(
    db: Path,
    user: str,
    gpus: list[tuple[str, int]],
    start: float,
    end: float,
    *,
    state: str = "COMPLETED",
    name: str = "train",
) -> int:
    """A job that ran on ``gpus`` from ``start`` to ``end``, as the daemon records it.

    The name is written as stored, past what ``--name`` takes (a job's
    default name is its command, which may hold anything).
    """
    store = connect(str(db))
    [job] = jobs.submit(store, [specs.build(image="i", command=["t"], gpus=len(gpus))])
    with transaction(store.engine, write=True) as s:
        row = s.get(JobRow, job)
        assert row is not None
        s.execute(delete(JobStateRow).where(JobStateRow.job_id == job))
        s.add_all(
            JobStateRow(job_id=job, state=st, at=at, reason="test")
            for st, at in (("PENDING", start - 60), ("RUNNING", start), (state, end))
        )
        s.add_all(
            AllocationHistoryRow(
                job_id=job,
                node=node,
                gpu_index=index,
                gpu_model="V100",
                mode="exclusive",
                since=start,
                until=end,
            )
            for node, index in gpus
        )
        row.name, row.user, row.state = name, user, state
        row.exit_code = int(state != "COMPLETED")
        row.submit_time, row.start_time, row.end_time = start - 60, start, end
    store.engine.dispose()
    return job


@pytest.fixture
def ran(gdb: Path) -> dict[str, int]:
    """Alice's 2-node job and Bob's failed one in the last day; an older one of Alice's."""
    return {
        "alice": _ran(gdb, "alice", [("n1", 0), ("n2", 0)], NOW - 3 * HOUR, NOW - HOUR),
        "bob": _ran(gdb, "bob", [("n3", 1)], NOW - 2 * HOUR, NOW - HOUR / 2, state="FAILED"),
        "old": _ran(gdb, "alice", [("n1", 0)], NOW - 4 * 86400, NOW - 3 * 86400),
    }


def test_the_table_lists_finished_jobs_like_sacct(ran: dict[str, int]) -> None:
    out = ok("acct", "-S", "now-1day").splitlines()
    assert out[0].split() == [
        "JOBID",
        "NAME",
        "USER",
        "STATE",
        "EXITCODE",
        "START",
        "END",
        "ELAPSED",
        "GPUS",
        "GPU_HOURS",
        "NODELIST",
    ]
    assert [line.split()[0] for line in out[1:]] == [str(ran["alice"]), str(ran["bob"])]
    alice = out[1].split()
    assert alice[2:5] == ["alice", "COMPLETED", "0"]
    assert alice[7:] == ["2:00:00", "2", "4.00", "n[1-2]"]
    assert out[2].split()[7:] == ["1:30:00", "1", "1.50", "n3"]
    # columns line up: each header starts where its values do
    at = out[0].index("GPU_HOURS")
    assert all(line[at - 1] == " " for line in out[1:])


def test_json_and_csv_give_the_same_rows(ran: dict[str, int]) -> None:
    doc = json.loads(ok("acct", "-S", "now-1day", "-u", "alice,bob", "--json"))
    assert [j["id"] for j in doc["jobs"]] == [ran["alice"], ran["bob"]]
    alice = doc["jobs"][0]
    assert alice["gpu_hours"] == pytest.approx(4.0) and alice["elapsed_s"] == pytest.approx(
        2 * HOUR
    )
    assert (alice["nodes"], alice["gpus"], alice["state_code"]) == ("n[1-2]", 2, "CD")
    assert datetime.fromisoformat(alice["end_time"]).timestamp() == pytest.approx(NOW - HOUR)
    assert datetime.fromisoformat(doc["start"]).timestamp() == pytest.approx(NOW - 86400, abs=60)
    rows = list(csv.reader(io.StringIO(ok("acct", "-S", "now-1day", "--csv"))))
    assert tuple(rows[0]) == ACCT_CSV
    by_key = [dict(zip(ACCT_CSV, r, strict=True)) for r in rows[1:]]
    assert [int(r["id"]) for r in by_key] == [ran["alice"], ran["bob"]]
    assert float(by_key[1]["gpu_hours"]) == pytest.approx(1.5)
    assert by_key[1]["state"] == "FAILED" and by_key[1]["exit_code"] == "1"
    assert datetime.fromisoformat(by_key[1]["end_time"]).tzinfo == UTC


def test_users_window_and_states_choose_the_jobs(ran: dict[str, int]) -> None:
    def listed(*args: str) -> list[int]:
        return [j["id"] for j in json.loads(ok("acct", *args, "--json"))["jobs"]]

    assert listed("-S", "now-1day", "-u", "bob") == [ran["bob"]]
    assert listed("-S", "now-1day", "-s", "F") == [ran["bob"]]
    assert listed("-a", "-S", "now-7days", "-E", "now-1day") == [ran["old"]]
    day = datetime.fromtimestamp(NOW - 3 * 86400).strftime("%Y-%m-%d")
    assert ran["old"] in listed("-S", day, "-E", "now")
    assert listed("-S", "now-1day", "-u", "carol") == []


def test_the_summary_totals_gpu_hours_per_user_and_month(ran: dict[str, int]) -> None:
    doc = json.loads(ok("acct", "-S", "now-1day", "--summary", "--json"))
    month = datetime.fromtimestamp(NOW - HOUR, UTC).strftime("%Y-%m")
    assert [(t["user"], t["month"], t["jobs"]) for t in doc["summary"]] == [
        ("alice", month, 1),
        ("bob", month, 1),
    ]
    assert doc["summary"][1]["gpu_hours"] == pytest.approx(1.5)
    table = ok("acct", "-S", "now-1day", "--summary").splitlines()
    assert table[0].split() == ["USER", "MONTH", "JOBS", "GPU_HOURS"]
    assert table[1].split() == ["alice", month, "1", "4.00"]
    assert ok("acct", "-S", "now-1day", "--summary", "--csv").splitlines()[0] == (
        "user,month,jobs,gpu_hours"
    )


def test_an_empty_window_is_a_header_and_no_rows(gdb: Path) -> None:
    assert ok("acct").splitlines()[0].startswith("JOBID")
    assert json.loads(ok("acct", "--json"))["jobs"] == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-S", "yesterday"], "--starttime 'yesterday': not a time"),
        (["-E", "2026-13-01"], "--endtime '2026-13-01': no such date or time"),
        (["-S", "now-3fortnights"], "unknown unit 'fortnights'"),
        (["-S", "now", "-E", "now-1hour"], "--endtime 'now-1hour' is not after --starttime 'now'"),
        (["-s", "R"], "RUNNING is not a finished state"),
        (["--json", "--csv"], "give --json or --csv, not both"),
    ],
)
def test_bad_input_is_one_line_exit_2(gdb: Path, args: list[str], says: str) -> None:
    code, out, err = run("acct", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and says in err, err


def test_hostile_names_print_inert(gdb: Path) -> None:
    _ran(gdb, "alice", [("n1", 0)], NOW - HOUR, NOW - 60, name="\x1b]0;pwned\x07")
    for extra in ([], ["--csv"]):
        out = ok("acct", "-S", "now-1day", *extra)
        assert not unsafe(out) and "\\x1b]0;pwned\\x07" in out
    assert json.loads(ok("acct", "-S", "now-1day", "--json"))["jobs"][0]["name"] == (
        "\x1b]0;pwned\x07"
    )


def test_times_as_sacct_takes_them() -> None:
    now = datetime(2026, 11, 26, 15, 30).timestamp()
    assert parse_time("now", now, "-S") == now
    assert parse_time("now-7days", now, "-S") == now - 7 * 86400
    assert parse_time("NOW-1hour", now, "-S") == now - HOUR
    assert parse_time("now+2weeks", now, "-S") == now + 14 * 86400
    assert parse_time("now-90", now, "-S") == now - 90
    assert parse_time("30m", now, "-S") == now - 1800  # a duration ago, as gctl events --since
    assert parse_time("today", now, "-S") == datetime(2026, 11, 26).timestamp()
    assert parse_time("2026-11-01", now, "-S") == datetime(2026, 11, 1).timestamp()
    assert parse_time("2026-11-01T10:00", now, "-S") == datetime(2026, 11, 1, 10).timestamp()
    assert (
        parse_time("2026-11-01T10:00:00Z", now, "-S")
        == datetime(2026, 11, 1, 10, tzinfo=UTC).timestamp()
    )
    for bad in ("", "1e9", "now-", "2026-11-01T25:00", "0001-01-01", "now-999999999999days"):
        with pytest.raises(UsageError):
            parse_time(bad, now, "-S")
