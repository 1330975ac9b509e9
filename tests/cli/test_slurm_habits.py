"""Slurm habits with Slurm's meanings: squeue's -j/--me/-S/-l and fields, sinfo's -t/-o/-N,
scontrol show node without a name, and the time forms a Slurm user types."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest
from clikit import ok, run

FP = ("--host-key-fingerprint", "SHA256:" + "A" * 43)
ME = "alice"
"""Who the tests act as (the ``gdb`` fixture's operator acts for alice)."""


def _jobs() -> None:
    ok("submit", "--image", "i", "--name", "a", "--time", "1:00:00", "--", "x")
    ok("submit", "--image", "i", "--name", "b", "--priority", "low", "--", "x")
    ok("submit", "--image", "i", "--name", "c", "--class", "opportunistic", "--", "x")
    ok("cancel", "3")


def test_squeue_flags_and_fields(gdb: Path) -> None:
    _jobs()
    assert ok("queue", "-h", "-o", "%i").split() == ["1", "2"]  # not finished
    assert ok("queue", "-h", "-j", "3,1", "-o", "%i %T").splitlines() == [
        "1 PENDING",
        "3 CANCELLED",
    ]
    assert ok("queue", "-h", "-j", "3", "-t", "PD", "-o", "%i") == ""
    assert ok("queue", "-h", "--me", "-o", "%u").split() == [ME, ME]
    assert ok("queue", "-h", "-u", "nobody-else", "-o", "%i") == ""
    assert ok("queue", "-h", "-t", "all", "-S", "-p,-i", "-o", "%i %p").splitlines() == [
        "3 normal",
        "1 normal",
        "2 low",
    ]
    assert ok("queue", "-h", "-t", "all", "-S", "q,i", "-o", "%i %q").splitlines() == [
        "3 opportunistic",
        "1 production",
        "2 production",
    ]
    row = ok("queue", "-h", "-j", "1", "-o", "%i|%l|%L|%D|%e").strip()
    assert row == "1|01:00:00|01:00:00|0|-"
    assert ok("queue", "-h", "-j", "2", "-o", "%l").strip() == "UNLIMITED"
    header = ok("queue", "-l").splitlines()[0].split()
    assert header == [
        "JOBID",
        "PRIORITY",
        "NAME",
        "USER",
        "STATE",
        "TIME",
        "TIME_LIMIT",
        "GPUS",
        "NODES",
        "NODELIST(REASON)",
    ]
    assert ok("queue").splitlines()[0].split()[:2] == ["JOBID", "PRIORITY"]
    doc = json.loads(ok("queue", "-j", "1", "--json"))["jobs"][0]
    assert (doc["class"], doc["time_limit"]) == ("production", 3600.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["queue", "-o", "%.9P"], "%P is Slurm's partition, and gctl has none"),
        (["queue", "-S", "x"], "-S 'x': cannot sort by that"),
        (["queue", "-j", "1,x"], "--jobs 'x': not a job id"),
        (["node", "ls", "-t", "busy"], "-t 'busy': unknown node state"),
        (["node", "ls", "-o", "%Z"], "unknown field %Z"),
        (["events", "--since", "yesterday-ish"], "--since 'yesterday-ish': not a time"),
    ],
)
def test_slurm_look_alikes_that_mean_nothing_here_are_usage_errors(
    gdb: Path, args: list[str], message: str
) -> None:
    code, out, err = run(*args)
    assert (code, out) == (2, "")
    assert err.startswith("gctl: error: ") and message in err and err.count("\n") == 1


def test_sinfo_flags_and_show_node_without_a_name(gdb: Path) -> None:
    ok("node", "add", "n1", "--host", "h1", *FP, "--emulate-gpus", "2xV100-16GB")
    ok("node", "add", "n2", "--host", "h2", *FP, "--emulate-gpus", "4xA100-80GB")
    ok("node", "drain", "n2", "--reason", "bad fan")
    lines = ok("node", "ls", "-N", "-o", "%N|%T|%b|%E|%U|%n").splitlines()
    assert lines == [
        "NODELIST|STATE|GPUS|REASON|USER|HOSTNAMES",
        "n1|idle*|0/2|none|-|h1",
        f"n2|drained*|0/4|bad fan|{ME}|h2",
    ]
    assert ok("node", "ls", "-h", "-t", "drained,down", "-o", "%N").split() == ["n2"]
    assert ok("node", "ls", "-h", "-t", "IDLE", "-o", "%N").split() == ["n1"]
    shown = ok("node", "show")
    assert shown.count("NodeName=") == 2 and "NodeName=n1" in shown and "NodeName=n2" in shown
    assert [n["name"] for n in json.loads(ok("node", "show", "--json"))] == ["n1", "n2"]
    assert json.loads(ok("node", "show", "n1", "--json"))["name"] == "n1"


def test_since_takes_the_forms_a_slurm_user_types(gdb: Path) -> None:
    ok("submit", "--image", "i", "--", "x")
    today = datetime.now().strftime("%Y-%m-%d")
    for since in ("1h30m", "1-00:00:00", "90:00", today, "now-1hour", "2h"):
        events = json.loads(ok("events", "--since", since, "--json"))["events"]
        assert [e["kind"] for e in events] == ["job.submit"], since
    time.sleep(1.1)
    assert json.loads(ok("events", "--since", "now-1", "--json"))["events"] == []
