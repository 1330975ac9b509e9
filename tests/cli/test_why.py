"""``gctl why`` over a real SQLite store holding what the daemon would have recorded."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from clikit import run
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gctl.daemon import lease
from gctl.services import events
from gctl.services.db import open_store
from gctl.store.engine import transaction
from gctl.store.models import (
    AllocationRow,
    DaemonLeaseRow,
    EventRow,
    GpuRow,
    IntentRow,
    JobRow,
    JobStateRow,
    NodeRow,
)

FP = ("--host-key-fingerprint", "SHA256:" + "A" * 43)
T = 1767268984.0
"""A fixed moment for recorded times, so the output can be checked exactly."""


@pytest.fixture
def gdb(gdb: Path) -> Path:
    """The CLI tests' store with two 4-GPU nodes h1 and h2."""
    for name in ("h1", "h2"):
        _ok("node", "add", name, "--host", name, *FP, "--emulate-gpus", "4xV100-16GB")
    return gdb


def _ok(*args: str) -> str:
    code, out, err = run(*args)
    assert code == 0, f"gctl {' '.join(args)}: {err}"
    return out


def _submit(*args: str) -> int:
    return int(_ok("submit", "--parsable", "--image", "train:1", *args, "--", "python", "t.py"))


@contextmanager
def _daemon() -> Iterator[Session]:
    """A write transaction standing in for the daemon, which holds the store's lease."""
    with transaction(open_store().engine, write=True) as s:
        at = time.time()
        s.merge(
            DaemonLeaseRow(
                id=1, holder=lease.me(), pid=os.getpid(), epoch=1, started_at=at, heartbeat_at=at
            )
        )
        yield s


def _when(at: float) -> str:
    return datetime.fromtimestamp(at).strftime("%Y-%m-%dT%H:%M:%S")


def _enter(s: Session, job_id: int, state: str, reason: str, **fields: Any) -> None:
    """The job enters ``state`` at ``T`` with ``reason``, as the daemon records it."""
    row = s.get(JobRow, job_id)
    assert row is not None
    row.state, row.reason = state, reason
    for key, value in fields.items():
        setattr(row, key, value)
    s.add(JobStateRow(job_id=job_id, state=state, at=T, reason=reason))


def _hold(s: Session, job_id: int, gpus: str, mode: str = "exclusive", since: float = T) -> None:
    """The job holds ``gpus`` (``NODE:I,J``) in ``mode`` since ``since``, and nothing else."""
    s.execute(delete(AllocationRow).where(AllocationRow.job_id == job_id))
    node, _, indices = gpus.partition(":")
    for index in indices.split(","):
        gpu_id = s.scalar(
            select(GpuRow.id).join(NodeRow).where(NodeRow.name == node, GpuRow.index == int(index))
        )
        s.add(AllocationRow(job_id=job_id, gpu_id=gpu_id, mode=mode, since=since))


def _answer(job_id: int) -> str:
    return _ok("why", str(job_id)).splitlines()[0]


def _doc(job_id: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(_ok("why", str(job_id), "--json"))
    return doc


def test_a_pending_job_says_what_it_waits_for(gdb: Path) -> None:
    job = _submit("--gpus", "4")
    assert _ok("why", str(job)).splitlines() == [  # no decisions yet, and nobody to decide
        f"job {job} is PENDING: no reason recorded yet",
        "note: no daemon holds this store now: nothing happens until one runs (gctl daemon)",
    ]
    with _daemon() as s:
        row = s.get(JobRow, job)
        assert row is not None
        row.reason = "waiting: no node has 4 free GPUs"
    assert _answer(job) == f"job {job} is PENDING: waiting: no node has 4 free GPUs"
    _ok("hold", str(job))
    out = _ok("why", str(job)).splitlines()
    assert out[0] == f"job {job} is PENDING (held): held by alice"
    assert out[1] == "recent decisions:"
    assert "job.hold" in out[3] and "alice" in out[3] and len(out) == 4  # not the submission


FROZEN = "(freeze: docker pause, keeps GPU memory) on h1:0"
CHECKPOINTED = "(held; checkpoint: checkpointed and exited, GPU memory freed)"


@pytest.mark.parametrize(
    ("gpus", "held", "how", "suspended_by"),
    [("h1:0", False, FROZEN, "freeze"), (None, True, CHECKPOINTED, "checkpoint")],
)
def test_a_suspended_job_says_how_since_when_and_why(
    gdb: Path, gpus: str | None, held: bool, how: str, suspended_by: str
) -> None:
    """A job that can checkpoint is still frozen by time slicing; an operator's suspend
    checkpoints it, gives its GPUs back and holds it."""
    job = _submit()
    reason = f"time slice: job {job + 1}'s turn"
    with _daemon() as s:
        if gpus:
            _hold(s, job, gpus)
        _enter(s, job, "SUSPENDED", reason, mechanism="checkpoint", held=held)
        data = {"mechanism": "freeze"} if gpus else {"from": "h1:0", "to": "-"}
        events.record(s, "job.suspend", f"job {job} suspended", job_id=job, data=data)
    assert _answer(job) == f"job {job} is SUSPENDED {how} since {_when(T)}: {reason}"
    doc = _doc(job)
    assert (doc["mechanism"], doc["suspended_by"]) == ("checkpoint", suspended_by)
    assert datetime.fromisoformat(doc["since"]).timestamp() == T
    assert [d["data"] for d in doc["decisions"]] == [data]


def test_a_packed_job_names_the_jobs_it_shares_with(gdb: Path) -> None:
    a, b, c = _submit(), _submit(), _submit()
    with _daemon() as s:
        _enter(s, a, "RUNNING", f"packed with job {b}: both fit in memory")
        _enter(s, b, "RUNNING", "placed")
        _enter(s, c, "RUNNING", "placed")
        _hold(s, a, "h1:2", "packed")
        _hold(s, b, "h1:2", "packed")
        _hold(s, c, "h1:3")
        events.record(s, "job.pack", f"job {a} packed with {b}", job_id=a, data={"with": [b]})
    assert _answer(a) == (
        f"job {a} is RUNNING packed with job {b} on h1:2: packed with job {b}: both fit in memory"
    )
    assert _answer(b) == f"job {b} is RUNNING packed with job {a} on h1:2: placed"
    assert _answer(c) == f"job {c} is RUNNING on h1:3: placed"
    doc = _doc(a)
    assert doc["gpus"] == [{"node": "h1", "gpu": 2, "mode": "packed"}]
    assert doc["shared_with"] == [b]
    with _daemon() as s:
        _hold(s, c, "h1:2", "time-sliced")
        _hold(s, a, "h1:2", "time-sliced")
    assert _answer(a).startswith(f"job {a} is RUNNING time-sliced with jobs {b}, {c} on h1:2:")


def test_a_migrating_then_migrated_job_says_where_it_moved(gdb: Path) -> None:
    job = _submit("--gpus", "2")
    why = "defrag: free h1"
    with _daemon() as s:
        _enter(s, job, "RUNNING", "placed: best fit")
        _hold(s, job, "h1:0,1")
        events.record(s, "job.place", f"job {job} on h1:0,1: placed: best fit", job_id=job)
    assert _answer(job) == f"job {job} is RUNNING on h1:0,1: placed: best fit"
    assert _doc(job)["moved"] is None
    with _daemon() as s:  # the daemon begins the move: GPUs switched, operation recorded
        _hold(s, job, "h2:0,1")
        row = s.get(JobRow, job)
        assert row is not None
        row.op = {"kind": "migrate", "dst": [["h2", 0], ["h2", 1]], "reason": why}
        row.reason = why
        s.add(
            EventRow(
                at=T,
                user="gctld",
                kind="job.migrate",
                job_id=job,
                message=f"job {job} migrate: h1:0,1 -> h2:0,1: {why}",
                data={"from": "h1:0,1", "to": "h2:0,1"},
            )
        )
    out = _ok("why", str(job)).splitlines()
    assert out[0] == f"job {job} is RUNNING on h2:0,1 (moving from h1:0,1 since {_when(T)}): {why}"
    assert out[1] == f"operation in progress: migrate to h2:0,1 ({why})"
    with _daemon() as s:  # ... and finishes it
        _enter(s, job, "RUNNING", why, op=None)
    out = _ok("why", str(job)).splitlines()
    assert out[0] == f"job {job} is RUNNING on h2:0,1 (moved from h1:0,1 at {_when(T)}): {why}"
    assert "operation in progress" not in "\n".join(out)
    moved = _doc(job)["moved"]
    assert datetime.fromisoformat(moved.pop("at")).timestamp() == T
    assert moved == {
        "from": "h1:0,1",
        "to": "h2:0,1",
        "message": f"job {job} migrate: h1:0,1 -> h2:0,1: {why}",
    }
    _ok("migrate", str(job))  # an operator asking for another move is no move
    assert _doc(job)["moved"]["from"] == "h1:0,1"
    with _daemon() as s:  # requeued and placed again: the move is history
        _hold(s, job, "h2:0,1", since=T + 60)
        events.record(s, "job.place", f"job {job} on h2:0,1: placed", job_id=job)
    assert _doc(job)["moved"] is None


def test_pending_operator_intents_are_listed_until_the_daemon_takes_them(gdb: Path) -> None:
    job = _submit()
    with _daemon() as s:
        _enter(s, job, "RUNNING", "placed")
        _hold(s, job, "h1:0")
    _ok("suspend", str(job))
    _ok("migrate", str(job), "--to", "h2:1")
    out = _ok("why", str(job)).splitlines()
    assert out[0] == f"job {job} is RUNNING on h1:0: placed"
    waiting = out.index("waiting for the daemon:")
    assert out[waiting + 1].startswith("   suspend asked by alice at ")
    assert out[waiting + 1].endswith("(intent 1)")
    assert out[waiting + 2].startswith("   migrate to=h2:1 asked by alice at ")
    with _daemon() as s:
        intent = s.get(IntentRow, 1)
        assert intent is not None
        intent.status = "done"
    intents = _doc(job)["pending_intents"]
    assert [(i["id"], i["kind"], i["user"], i["args"]) for i in intents] == [
        (2, "migrate", "alice", {"to": "h2:1"})
    ]


def test_json_is_one_stable_document_with_the_last_ten_decisions(gdb: Path) -> None:
    job = _submit()
    with _daemon() as s:
        for n in range(12):
            events.record(s, "job.error", f"attempt {n} failed", job_id=job, user="gctld")
    doc = _doc(job)
    assert list(doc) == [
        "job",
        "name",
        "user",
        "state",
        "reason",
        "held",
        "since",
        "exit_code",
        "restarts",
        "mechanism",
        "suspended_by",
        "gpus",
        "shared_with",
        "moved",
        "operation",
        "pending_intents",
        "decisions",
        "daemon",
    ]
    assert (doc["job"], doc["state"], doc["reason"], doc["held"]) == (
        job,
        "PENDING",
        None,
        False,
    )
    assert (doc["gpus"], doc["shared_with"], doc["operation"], doc["pending_intents"]) == (
        [],
        [],
        None,
        [],
    )
    assert [d["message"] for d in doc["decisions"]] == [f"attempt {n} failed" for n in range(2, 12)]
    assert list(doc["decisions"][0]) == ["at", "kind", "user", "message", "data"]
    assert datetime.fromisoformat(doc["decisions"][0]["at"]).utcoffset() is not None


def test_an_unknown_job_is_one_line_and_exit_1(gdb: Path) -> None:
    code, out, err = run("why", "999")
    assert (code, out, err) == (1, "", "gctl: error: unknown job 999\n")
    code, out, err = run("why", "999", "--json")
    assert (code, out) == (1, "")
