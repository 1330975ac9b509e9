"""A busy little cluster in a SQLite store, with fixed times, for the dashboard's tests.

Nodes, jobs and operator actions go through the services; what only the
daemon writes (allocations with their sharing modes, job states, profile
samples, its events) is written here the way it writes them, standing in
for it. Every recorded time is then pinned relative to :data:`T`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from gctl.services import db, events, jobs, nodes, specs
from gctl.services.logs import LogSource, LogTail, LogUnavailable
from gctl.store.engine import transaction
from gctl.store.models import (
    AllocationRow,
    EventRow,
    GpuRow,
    JobRow,
    JobStateRow,
    NodeRow,
    ProfileRow,
)
from gctl.watch.app import WatchApp

FP = "SHA256:" + "A" * 43
T = 1767268984.0
"""The frozen "now" of the tests (2026-01-01 12:03:04 UTC)."""

PLACED: tuple[tuple[int, str, tuple[int, ...], str, str], ...] = (
    # job, node, GPUs, mode, state
    (1, "n1", (0, 1), "exclusive", "RUNNING"),
    (2, "n1", (2,), "packed", "RUNNING"),
    (3, "n1", (2,), "packed", "RUNNING"),
    (4, "n2", (0,), "time-sliced", "RUNNING"),
    (5, "n2", (0,), "time-sliced", "SUSPENDED"),
    (6, "n3", (0, 1, 2, 3), "exclusive", "RUNNING"),
    (7, "n4", (0,), "time-sliced", "RUNNING"),
    (8, "n4", (0,), "time-sliced", "SUSPENDED"),
    (9, "n4", (1,), "time-sliced", "SUSPENDED"),
    (10, "n4", (1,), "time-sliced", "RUNNING"),
)
DAEMON_EVENTS: tuple[tuple[str, int | None, str | None, str], ...] = (
    ("job.place", 1, None, "job 1 on n1:0,1: fits best (affinity 2)"),
    ("job.place", 2, None, "job 2 on n1:2: fits best"),
    ("job.pack", 3, None, "job 3 packed with job 2 on n1:2: both use < 50% of the GPU"),
    ("job.place", 4, None, "job 4 on n2:0: no free GPU, time slicing"),
    ("job.suspend", 5, None, "job 5 suspended (freeze): time slice over"),
    ("job.migrate", 6, None, "job 6 migrate: n2:0,1,2,3 -> n3:0,1,2,3: defragment"),
    ("node.drain", None, "n5", "node n5 drain: fan failure"),
    ("job.resume", 10, None, "job 10 resumed: its time slice"),
)


def node(store: db.Store, name: str, gpus: str) -> None:
    nodes.add_node(store, name, f"{name}.lan", emulate_gpus=gpus, host_key_fingerprint=FP)


def busy_store(path: Path) -> db.Store:
    """Six nodes (one drained, one down), twelve jobs placed, packed and time sliced."""
    store = db.connect(str(path))
    db.upgrade(store)
    for name, gpus in (
        ("n1", "4xV100-16GB"),
        ("n2", "4xV100-16GB"),
        ("n3", "8xA100-40GB"),
        ("n4", "2xV100-32GB"),
        ("n5", "4xV100-16GB"),
        ("n6", "4xV100-16GB"),
    ):
        node(store, name, gpus)
    sizes = [2, 1, 1, 1, 1, 4, 1, 1, 1, 1, 2, 8]
    names = ["bert", "resnet", "resnet", "gpt2", "gpt2", "llama", "vit", "vit", "t5", "t5"]
    names += ["waiting", "huge"]
    reqs = [
        specs.build(image="train:1", command=["python", f"{n}.py"], gpus=g, name=n)
        for n, g in zip(names, sizes, strict=True)
    ]
    ids = jobs.submit(store, reqs)
    assert ids == list(range(1, 13))
    for job_id, where, gpus, mode, state in PLACED:
        place(store, job_id, where, gpus, mode, state)
    jobs.act(store, 12, "hold")
    nodes.set_admin_state(store, "n5", "drain", "fan failure")
    nodes.set_admin_state(store, "n6", "down", "PSU")
    with transaction(store.engine, write=True) as s:
        for kind, job_id, where, message in DAEMON_EVENTS:
            events.record(s, kind, message, job_id=job_id, node=where, user="gctl-daemon")
        s.execute(update(JobRow).where(JobRow.id.in_((4, 5, 8, 9, 11))).values(user="bob"))
        for job_id, *_, state in PLACED:
            for k in range(10 if state == "RUNNING" else 0):
                s.add(
                    ProfileRow(
                        job_id=job_id,
                        at=T - 10 * (9 - k),
                        gpu_util=((job_id * 7 + k * 3) % 10) / 20,
                        memory_mb=1024 * (1 + (job_id + k) % 4),
                        progress_rate=job_id + k / 10,
                    )
                )
        s.execute(update(JobRow).where(JobRow.id == 6).values(mechanism="checkpoint"))
        s.execute(update(NodeRow).values(last_seen=None))
        s.execute(update(NodeRow).where(NodeRow.name == "n6").values(last_error="no route"))
    pin_times(store)
    return store


def place(
    store: db.Store, job_id: int, where: str, gpus: tuple[int, ...], mode: str, state: str
) -> None:
    """Give a job GPUs and a state, as the daemon's applier records them."""
    with transaction(store.engine, write=True) as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        row.state, row.reason, row.mechanism = state, "placed", "freeze"
        s.add(JobStateRow(job_id=job_id, state=state, at=T, reason="placed"))
        found = s.scalars(
            select(GpuRow).join(GpuRow.node).where(NodeRow.name == where, GpuRow.index.in_(gpus))
        ).all()
        for g in found:
            s.add(AllocationRow(job_id=job_id, gpu_id=g.id, mode=mode, since=T))


def pin_times(store: db.Store) -> None:
    """Every recorded time made a fixed offset before :data:`T`, ids in order."""
    with transaction(store.engine, write=True) as s:
        for table in (EventRow, JobStateRow):
            c = table.__table__.c
            s.execute(update(table).values(at=T - 3600 + c.id * 60))
        s.execute(update(JobRow).values(submit_time=T - 7200))
        s.execute(update(JobRow).where(JobRow.state != "PENDING").values(start_time=T - 3000))
        s.execute(update(AllocationRow).values(since=T - 3000 + AllocationRow.id))
        s.execute(update(NodeRow).values(reason_time=T - 600, reason_user="root"))


def responding(store: db.Store, *names: str) -> None:
    """Mark nodes as having answered just now (real time: the node service judges with it)."""
    with transaction(store.engine, write=True) as s:
        s.execute(update(NodeRow).where(NodeRow.name.in_(names)).values(last_seen=time.time()))


def shown_as(store: db.Store, url: str = "sqlite:///busy.db") -> db.Store:
    """The same store under a fixed name, so screenshots do not show a temporary path."""
    return dataclasses.replace(store, url=url)


def fake_logs(store: db.Store, job_id: int, lines: int) -> LogTail:
    """A stand-in for ``gctl.services.logs.tail``: the busy store's hosts do not exist.

    Job ``J`` placed on node ``N`` "printed" ``J: step K/200`` for K = 1..200;
    the last ``lines`` come back, from container ``gctl-J-0`` on ``N``.
    """
    where = tuple(dict.fromkeys(node for job, node, *_ in PLACED if job == job_id))
    if not where:
        raise LogUnavailable(f"job {job_id} holds no GPUs (fake_logs)")
    printed = [f"{job_id}: step {k}/200" for k in range(1, 201)]
    return LogTail(LogSource(job_id, where[0], f"gctl-{job_id}-0", where), tuple(printed[-lines:]))


def make_app(
    store: db.Store,
    *,
    readonly: bool = False,
    read_log: Callable[[db.Store, int, int], LogTail] = fake_logs,
) -> WatchApp:
    """The dashboard over ``store`` with a frozen clock and no timed refresh during a test.

    A job's detail reads its log with ``read_log`` (:func:`fake_logs` unless told).
    """
    return WatchApp(store, interval=3600.0, readonly=readonly, clock=lambda: T, read_log=read_log)


def pilot_test(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async pilot test in its own event loop (no pytest async plugin needed)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run
