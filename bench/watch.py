"""``gctl watch`` at scale: frame build and render time per refresh on a big emulated cluster.

Builds a SQLite store of ``--nodes`` nodes of 8 emulated GPUs (default
1,000) and ``--jobs`` jobs (default 10,000) of 40 users: one running job
per GPU, every eighth GPU also time sliced with a suspended job (both
started an hour ago), the rest pending; each running job has ``--samples``
profile samples (default 20). Then:

- frame build: :meth:`gctl.watch.data.FrameSource.build` (what the worker
  thread does on a refresh after the store changed), median of ``--repeat``
  builds, and :meth:`~gctl.watch.data.FrameSource.latest` on an unchanged
  store (the stamp read, the last frame taken again);
- render: the app headless (Textual's pilot) showing a new frame, i.e.
  ``show_frame`` plus the screen update, median of ``--repeat`` refreshes
  in which a few jobs change state each time; the first frame (every row
  added) is reported apart;
- idle CPU: the app headless with its refresh timer on (every ``--interval``
  s) and nothing changing in the store, for ``--idle`` s: the process's CPU
  time (every thread: the frame worker too) as a percentage of one core;
- filter: :data:`FILTER` put in the filter line at once and applied, until
  both tables and the timeline show the result and the screen is redrawn;
  also ``/`` and :data:`FILTER` typed key by key, from the first key to
  the result shown (the filter waits for typing to pause), and the clear
  with Esc; medians of ``--repeat``.

``--screenshot FILE.svg`` also saves the dashboard of that big cluster as
an SVG. GPUs are emulated and no host is contacted. Run:
``.venv/bin/python bench/watch.py``

The README's screenshot, ``docs/gctl-watch.svg``, is made here too, by
``.venv/bin/python bench/watch.py --showcase docs/gctl-watch.svg``, which
measures nothing: it builds a small busy cluster instead (:data:`NODES`,
:data:`JOBS`, :data:`TIMELINE`: 12 emulated nodes, one drained and one
down; exclusive, packed and time-sliced GPUs; pending and held jobs; a
timeline of placements, packs, time-slice turns, a grow and migrations)
as the daemon would have recorded it, with every time fixed relative to
:data:`SHOWCASE_AT` and shown in UTC by a frozen clock, and saves the
dashboard with node gpu03 (all three sharing modes) under the cursor. The
same command draws the same picture every time.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import String, delete, insert, select, update
from sqlalchemy.orm import Session
from textual.pilot import Pilot
from textual.widgets import Input

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "store")]

from storekit import bulk_nodes  # noqa: E402

from gctl.services import db, jobs, nodes, specs  # noqa: E402
from gctl.store.engine import transaction  # noqa: E402
from gctl.store.models import (  # noqa: E402
    AllocationRow,
    EventRow,
    GpuRow,
    JobRow,
    JobStateRow,
    NodeRow,
    ProfileRow,
)
from gctl.watch.app import WatchApp  # noqa: E402
from gctl.watch.data import Clock, FrameSource  # noqa: E402
from gctl.watch.tables import JobsTable, NodesTable  # noqa: E402

SIZE = (160, 48)
"""Terminal columns and rows of the screenshots."""
USERS = 40
"""The big cluster's jobs belong to ``user0`` .. ``user39``, by job id."""
FILTER = "user7"
"""What the filter measurement types: one user's jobs (250 of 10,000) and their nodes."""


def build_store(path: Path, nodes: int, count: int, samples: int) -> db.Store:
    """The busy cluster described in the module docstring."""
    store = db.connect(str(path))
    db.upgrade(store)
    gpu_ids = bulk_nodes(store, nodes, "nvlink")
    now = time.time()
    with transaction(store.engine, write=True) as s:
        s.execute(update(NodeRow).values(emulated=True, last_seen=now))
        s.execute(update(GpuRow).values(emulated=True))
    req = specs.build(image="train:1", command=["python", "t.py"], gpus=1)
    ids = jobs.submit(store, [req] * count)
    with transaction(store.engine, write=True) as s:
        s.execute(update(JobRow).values(user="user" + (JobRow.id % USERS).cast(String)))
    running = ids[: len(gpu_ids)]
    sliced = ids[len(gpu_ids) : len(gpu_ids) + len(gpu_ids) // 8]
    allocs = [
        {"job_id": j, "gpu_id": g, "mode": "exclusive", "since": now}
        for j, g in zip(running, gpu_ids, strict=False)
    ]
    allocs += [
        {"job_id": j, "gpu_id": gpu_ids[8 * k], "mode": "time-sliced", "since": now}
        for k, j in enumerate(sliced)
    ]
    with transaction(store.engine, write=True) as s:
        s.execute(insert(AllocationRow), allocs)
        for group, state in ((running, "RUNNING"), (sliced, "SUSPENDED")):
            s.execute(
                update(JobRow)
                .where(JobRow.id.in_(group))
                .values(state=state, mechanism="freeze", start_time=now - 3600)
            )
            s.execute(
                insert(JobStateRow),
                [{"job_id": j, "state": state, "at": now, "reason": "placed"} for j in group],
            )
        s.execute(
            update(AllocationRow)
            .where(AllocationRow.job_id.in_(running[: len(sliced)]))
            .values(mode="time-sliced")
        )
        s.execute(
            insert(EventRow),
            [
                {
                    "at": now,
                    "user": "gctl-daemon",
                    "kind": "job.place",
                    "job_id": j,
                    "message": f"job {j} placed",
                    "data": {},
                }
                for j in running
            ],
        )
        s.execute(
            insert(ProfileRow),
            [
                {
                    "job_id": j,
                    "at": now - 10 * k,
                    "gpu_util": (j % 10) / 10,
                    "memory_mb": 4096,
                    "progress_rate": 1.0,
                }
                for k in range(samples)
                for j in running
            ],
        )
    return store


SHOWCASE_AT = 1768487530.0
"""The showcase's frozen "now": 2026-01-15 14:32:10 UTC."""

_FP = "SHA256:" + "A" * 43
"""A host key fingerprint for the showcase's nodes (never contacted)."""

History = list[tuple[float, str, str]]
"""A job's states: (epoch seconds, state, reason), oldest first."""

NODES = (
    *((f"gpu0{i}", "8xA100-80GB") for i in (1, 2)),
    *((f"gpu0{i}", "8xA100-40GB") for i in (3, 4)),
    *((f"gpu{i:02d}", "4xV100-32GB") for i in range(5, 11)),
    *((f"gpu{i}", "4xV100-16GB") for i in (11, 12)),
)
"""The showcase's nodes: name, emulated GPUs. gpu11 is drained, gpu12 down."""

JOBS = """
    cifar-sweep   erin   1  gpu07:0                exclusive    freeze      0.90
    llama-70b     alice  8  gpu01:0,1,2,3,4,5,6,7  exclusive    checkpoint  0.95
    gpt-neox      bob    4  gpu02:0,1,2,3          exclusive    checkpoint  0.90
    bert-large    carol  2  gpu02:4,5              exclusive    freeze      0.85
    resnet50      dave   1  gpu02:6                packed       freeze      0.22
    resnet50      dave   1  gpu02:6                packed       freeze      0.31
    t5-3b         erin   4  gpu03:0,1,2,3          time-sliced  checkpoint  0.90
    vit-huge      frank  4  gpu03:0,1,2,3          time-sliced  freeze      0.85
    mt5-xl        bob    2  gpu03:4,5              exclusive    freeze      0.90
    yolov8        frank  1  gpu03:6                packed       freeze      0.24
    unet          carol  1  gpu03:6                packed       freeze      0.31
    llama-13b     alice  4  gpu04:0,1,2,3          exclusive    checkpoint  0.92
    whisper       carol  2  gpu04:4,5              exclusive    freeze      0.70
    llama-7b      alice  2  gpu04:6,7              exclusive    checkpoint  0.90
    resnet101     dave   1  gpu05:0                packed       freeze      0.35
    efficientnet  erin   1  gpu05:0                packed       freeze      0.28
    ddp-rn50      bob    2  gpu05:2,3              exclusive    checkpoint  0.88
    gpt2-med      alice  2  gpu06:0,1              time-sliced  freeze      0.90
    gpt2-med      erin   2  gpu06:0,1              time-sliced  freeze      0.90
    gpt2-med      frank  2  gpu06:0,1              time-sliced  freeze      0.90
    bert-base     carol  1  gpu06:2                exclusive    freeze      0.60
    deberta       dave   1  gpu06:3                exclusive    freeze      0.80
    stable-diff   bob    4  gpu07:0,1,2,3          exclusive    checkpoint  0.90
    sam           erin   1  gpu08:0                exclusive    freeze      0.50
    elastic-rl    frank  4  gpu09:0,1,2,3          exclusive    checkpoint  0.75
    wav2vec       alice  1  gpu11:0                exclusive    freeze      0.90
    mnist-ci      dave   1  gpu08:1                exclusive    freeze      0.90
    llama-70b-ft  alice  8  -                      -            -           0
    vit-base      bob    1  -                      -            -           0
    t5-base       dave   2  -                      -            -           0
"""
"""The showcase's jobs, job ``k`` on line ``k``: name, user, GPUs, where they are (or were,
for a finished job), how they share them, suspend mechanism, usual share of a GPU's time.
State, reason and times follow from the job's events in :data:`TIMELINE`.
"""

_PACKING = "fits one GPU set; packing beats waiting for a time slice"
_SLICE = "no free GPUs; time-slicing with"
_HANDED = "suspended (freeze): time slice handed to new job"
_QUANTUM = "suspended (freeze): quantum 600s used;"
_SPREAD = "gpu07:1,2,3 gpu08:3"
TIMELINE = (
    (70, "job.place", 1, "job 1 on gpu07:0: 1 free GPUs on gpu07 (affinity 1)"),
    (58, "node.down", None, "node gpu12 down: PSU failure"),
    (55, "job.place", 2, "job 2 on gpu01:0,1,2,3,4,5,6,7: 8 free GPUs on gpu01 (affinity 8)"),
    (52, "job.place", 3, "job 3 on gpu02:0,1,2,3: 4 free GPUs on gpu02 (affinity 4)"),
    (50, "job.place", 4, "job 4 on gpu02:4,5: 2 free GPUs on gpu02 (affinity 4)"),
    (47, "job.place", 7, "job 7 on gpu03:0,1,2,3: 4 free GPUs on gpu03 (affinity 4)"),
    (45, "job.place", 9, "job 9 on gpu03:4,5: 2 free GPUs on gpu03 (affinity 4)"),
    (44, "job.place", 5, "job 5 on gpu02:6: 1 free GPUs on gpu02 (affinity 4)"),
    (43, "job.pack", 6, f"job 6 packed with job(s) 5: utilisation 31% + 22% {_PACKING}"),
    (41, "job.place", 12, "job 12 on gpu04:0,1,2,3: 4 free GPUs on gpu04 (affinity 4)"),
    (40, "job.place", 13, "job 13 on gpu04:4,5: 2 free GPUs on gpu04 (affinity 4)"),
    (39, "job.place", 15, "job 15 on gpu05:0: 1 free GPUs on gpu05 (affinity 1)"),
    (38, "job.pack", 16, f"job 16 packed with job(s) 15: utilisation 28% + 35% {_PACKING}"),
    (37, "job.place", 10, "job 10 on gpu03:6: 1 free GPUs on gpu03 (affinity 4)"),
    (36, "job.place", 17, "job 17 on gpu05:2,3: 2 free GPUs on gpu05 (affinity 1)"),
    (35, "job.place", 18, "job 18 on gpu06:0,1: 2 free GPUs on gpu06 (affinity 2)"),
    (34, "job.place", 21, "job 21 on gpu06:2: 1 free GPUs on gpu06 (affinity 2)"),
    (34, "job.place", 22, "job 22 on gpu06:3: 1 free GPUs on gpu06 (affinity 2)"),
    (33, "job.place", 8, f"job 8 on gpu03:0,1,2,3: {_SLICE} 1 job(s) on gpu03"),
    (33, "job.suspend", 7, f"job 7 {_HANDED} 8"),
    (30, "job.place", 19, f"job 19 on gpu06:0,1: {_SLICE} 1 job(s) on gpu06"),
    (30, "job.suspend", 18, f"job 18 {_HANDED} 19"),
    (
        28,
        "job.place",
        23,
        f"job 23 on {_SPREAD}: no single node had 4 free GPUs; spread over {_SPREAD}",
    ),
    (27, "job.place", 24, "job 24 on gpu08:0: 1 free GPUs on gpu08 (affinity 1)"),
    (26, "job.place", 25, "job 25 on gpu09:0,1: 2 free GPUs on gpu09 (affinity 2)"),
    (25, "job.place", 14, "job 14 on gpu10:0,1: 2 free GPUs on gpu10 (affinity 2)"),
    (24, "job.place", 26, "job 26 on gpu11:0: 1 free GPUs on gpu11 (affinity 1)"),
    (23, "job.suspend", 8, f"job 8 {_QUANTUM} 1 job(s) share its GPUs"),
    (23, "job.resume", 7, "job 7 resumed: round-robin turn on gpu03"),
    (22, "job.end", 1, "job 1 completed: exit 0"),
    (20, "job.place", 20, f"job 20 on gpu06:0,1: {_SLICE} 2 job(s) on gpu06"),
    (20, "job.suspend", 19, f"job 19 {_HANDED} 20"),
    (20, "job.place", 27, "job 27 on gpu08:1: 1 free GPUs on gpu08 (affinity 1)"),
    (16, "node.drain", None, "node gpu11 drain: fan failure"),
    (15, "job.submit", 28, "job 28 submitted: 8 GPU(s), registry.lan/train:latest"),
    (15, "job.hold", 28, "job 28 held"),
    (
        14,
        "job.grow",
        25,
        "job 25 grow: gpu09:0,1 -> gpu09:0,1,2,3: cluster idle for 300s; grown 2->4 GPUs",
    ),
    (13, "job.suspend", 7, f"job 7 {_QUANTUM} 1 job(s) share its GPUs"),
    (13, "job.resume", 8, "job 8 resumed: round-robin turn on gpu03"),
    (
        12,
        "job.migrate",
        23,
        f"job 23 migrate: {_SPREAD} -> gpu07:0,1,2,3: spread over 2 nodes;"
        " gpu07 now has 4 free GPUs together",
    ),
    (10, "job.suspend", 20, f"job 20 {_QUANTUM} 2 job(s) share its GPUs"),
    (10, "job.resume", 18, "job 18 resumed: round-robin turn on gpu06"),
    (
        8,
        "job.migrate",
        14,
        "job 14 migrate: gpu10:0,1 -> gpu04:6,7: defragment: gpu10 had 2 free GPUs; moved to gpu04",
    ),
    (6, "job.pack", 11, f"job 11 packed with job(s) 10: utilisation 31% + 24% {_PACKING}"),
    (3, "job.suspend", 8, f"job 8 {_QUANTUM} 1 job(s) share its GPUs"),
    (3, "job.resume", 7, "job 7 resumed: round-robin turn on gpu03"),
    (1, "job.end", 27, "job 27 completed: exit 0"),
    (0.5, "job.submit", 29, "job 29 submitted: 1 GPU(s), registry.lan/train:latest"),
    (0.3, "job.submit", 30, "job 30 submitted: 2 GPU(s), registry.lan/train:latest"),
)
"""The showcase's events: minutes before :data:`SHOWCASE_AT`, kind, job, message (the daemon's)."""

_STATE_AFTER = {"job.suspend": "SUSPENDED", "job.end": "COMPLETED"}
"""The state an event leaves its job in; RUNNING for any other decision on a job."""
_QUIET = ("job.submit", "job.hold")
"""Events that leave a job's state and reason alone."""


def showcase_store(path: Path) -> db.Store:
    """The README's busy little cluster (the module docstring says what it holds)."""
    store = db.connect(str(path))
    db.upgrade(store)
    for name, gpus in NODES:
        nodes.add_node(store, name, f"{name}.lan", emulate_gpus=gpus, host_key_fingerprint=_FP)
    rows = [line.split() for line in JOBS.strip().splitlines()]
    image = "registry.lan/train:latest"
    reqs = [
        specs.build(image=image, command=["python", "train.py"], gpus=int(gpus), name=name)
        for name, _, gpus, *_ in rows
    ]
    ids = jobs.submit(store, reqs)
    jobs.act(store, 28, "hold")
    nodes.set_admin_state(store, "gpu11", "drain", "fan failure")
    nodes.set_admin_state(store, "gpu12", "down", "PSU failure")
    at = SHOWCASE_AT
    with transaction(store.engine, write=True) as s:
        gpu_ids = {
            (node, index): gid
            for gid, node, index in s.execute(
                select(GpuRow.id, NodeRow.name, GpuRow.index).join(NodeRow)
            )
        }
        s.execute(delete(EventRow))  # the services' own, stamped now: replaced by the timeline
        s.execute(delete(JobStateRow))
        s.execute(update(NodeRow).values(last_seen=time.time(), reason_time=at - 16 * 60))
        s.execute(
            update(NodeRow)
            .where(NodeRow.name == "gpu12")
            .values(last_seen=None, last_error="no route to host", reason_time=at - 58 * 60)
        )
        samples: list[dict[str, float | int]] = []
        for job_id, (_, user, gpus, on, mode, mechanism, util) in zip(ids, rows, strict=True):
            history = _history(job_id)
            _record_job(s, job_id, user, history, mechanism)
            if history[-1][1] in ("RUNNING", "SUSPENDED"):
                node, indices = on.split(":")
                since = history[1][0]
                s.execute(
                    insert(AllocationRow),
                    [
                        {
                            "job_id": job_id,
                            "gpu_id": gpu_ids[node, int(i)],
                            "mode": mode,
                            "since": since,
                        }
                        for i in indices.split(",")
                    ],
                )
                samples += _samples(job_id, int(gpus), float(util), history)
        s.execute(
            insert(EventRow),
            [
                {
                    "at": at - minutes * 60,
                    "user": "root"
                    if kind in ("node.down", "node.drain", "job.hold")
                    else "gctl-daemon",
                    "kind": kind,
                    "job_id": job_id,
                    "node": message.split()[1] if kind.startswith("node.") else None,
                    "message": message,
                    "data": {},
                }
                for minutes, kind, job_id, message in TIMELINE
            ],
        )
        s.execute(insert(ProfileRow), samples)
    return dataclasses.replace(store, url="sqlite:////var/lib/gctl/gctl.db")


def _history(job_id: int) -> History:
    """A showcase job's states, from its events: submitted, then each decision's outcome."""
    mine = [(SHOWCASE_AT - m * 60, kind, msg) for m, kind, j, msg in TIMELINE if j == job_id]
    first = mine[0][0]
    history = [(first if mine[0][1] == "job.submit" else first - 90, "PENDING", "submitted")]
    for at, kind, message in mine:
        if kind not in _QUIET:
            parts = message.split(": ", 2 if kind in ("job.migrate", "job.grow") else 1)
            history.append((at, _STATE_AFTER.get(kind, "RUNNING"), parts[-1]))
    return history


def _record_job(s: Session, job_id: int, user: str, history: History, mechanism: str) -> None:
    """A showcase job's user, state, reason and times, and its state history."""
    at, state, reason = history[-1]
    started = history[1][0] if len(history) > 1 else None
    values = {"user": user, "state": state, "submit_time": history[0][0], "start_time": started}
    if len(history) > 1:
        values |= {"reason": reason, "mechanism": mechanism}
    if state == "COMPLETED":
        values |= {"end_time": at, "exit_code": 0}
    s.execute(update(JobRow).where(JobRow.id == job_id).values(**values))
    s.execute(
        insert(JobStateRow),
        [{"job_id": job_id, "state": st, "at": t, "reason": why} for t, st, why in history],
    )


def _samples(job_id: int, gpus: int, util: float, history: History) -> list[dict[str, float | int]]:
    """The job's profile samples of the last 5 minutes, 10 s apart, while it ran; seeded."""
    rng = random.Random(job_id)
    rows: list[dict[str, float | int]] = []
    for k in range(30):
        t = SHOWCASE_AT - 10 * (29 - k)
        if [st for at, st, _ in history if at <= t][-1:] != ["RUNNING"]:
            continue
        used = min(
            1.0, max(0.05, util + 0.12 * math.sin(0.6 * k + job_id) + rng.uniform(-0.05, 0.05))
        )
        rows.append(
            {
                "job_id": job_id,
                "at": t,
                "gpu_util": used,
                "memory_mb": int(gpus * (2500 + 9000 * util) + rng.uniform(-300, 300)),
                "progress_rate": round(1 + (used - util) / 2, 2),
            }
        )
    return rows


def bench_frames(store: db.Store, repeat: int) -> None:
    """Median frame build time (the first apart), and that of a refresh of an unchanged store.

    The first build back-fills the profile history; a refresh of an
    unchanged store reads its stamp and takes the last frame again.
    """
    source = FrameSource(store, time.time)
    first = source.build()
    took = [source.build().build_seconds for _ in range(repeat)]
    source.latest()
    same = [source.latest().build_seconds for _ in range(repeat)]
    print(
        f"  frame build: {statistics.median(took):.3f} s median of {repeat}"
        f" (first {first.build_seconds:.3f} s); {len(first.nodes):,} nodes,"
        f" {sum(len(n.gpus) for n in first.nodes):,} GPUs, {len(first.jobs):,} jobs;"
        f" refresh of an unchanged store {statistics.median(same):.3f} s"
    )


async def bench_render(store: db.Store, repeat: int) -> None:
    """Median time to show a new frame in the running app, a few jobs changing each time."""
    app = WatchApp(store, interval=3600.0)
    async with app.run_test(size=(200, 60)) as pilot:
        started = time.perf_counter()
        await app.workers.wait_for_complete()
        await pilot.pause()
        first = time.perf_counter() - started
        took, shown = [], []
        for k in range(repeat):
            with transaction(store.engine, write=True) as s:
                s.execute(
                    update(JobRow)
                    .where(JobRow.id.in_(range(1 + 10 * k, 11 + 10 * k)))
                    .values(state="SUSPENDED" if k % 2 else "RUNNING")
                )
            app.feed.refresh()
            started = time.perf_counter()
            app.show_frame()
            shown.append(app.render_seconds)
            await pilot.pause()
            took.append(time.perf_counter() - started)
    print(
        f"  render: {statistics.median(took):.3f} s median of {repeat} refreshes"
        f" (widgets updated in {statistics.median(shown):.3f} s, then the screen);"
        f" first frame (build, every row added) {first:.2f} s"
    )


async def _settle(pilot: Pilot[None]) -> None:
    """Wait until the frame worker is done and the screen has caught up."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def bench_idle(store: db.Store, seconds: float, interval: float) -> None:
    """CPU used by the app left alone, refreshing every ``interval`` s, as % of one core."""
    app = WatchApp(store, interval=interval)
    async with app.run_test(size=(200, 60)) as pilot:
        await _settle(pilot)
        await asyncio.sleep(2 * interval)  # the refresh after the first frame is settled too
        await _settle(pilot)
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(
        f"  idle: {100 * cpu / wall:.1f} % of a core ({cpu:.2f} s CPU in {wall:.1f} s,"
        f" refreshing every {interval:g} s, nothing changing)"
    )


async def bench_filter(store: db.Store, repeat: int) -> None:
    """Median time for the filter to apply, and from typing its first key to its result."""
    app = WatchApp(store, interval=3600.0)
    async with app.run_test(size=(200, 60)) as pilot:
        await _settle(pilot)
        box = app.query_one("#filter", Input)
        applied, typed, cleared = [], [], []
        for _ in range(repeat):
            box.value = FILTER  # as if pasted, then Enter
            started = time.perf_counter()
            app.apply_filter()
            await _settle(pilot)
            applied.append(time.perf_counter() - started)
            shown = (app.query_one(JobsTable).row_count, app.query_one(NodesTable).row_count)
            started = time.perf_counter()
            await pilot.press("escape")
            await _settle(pilot)
            cleared.append(time.perf_counter() - started)
            started = time.perf_counter()
            await pilot.press("slash", *FILTER)
            while app.filter_text != FILTER:
                await pilot.pause(0.01)
            await _settle(pilot)
            typed.append(time.perf_counter() - started)
            await pilot.press("escape")
            await _settle(pilot)
    print(
        f"  filter {FILTER!r}: applied in {statistics.median(applied):.3f} s median of {repeat}"
        f" ({shown[0]:,} jobs, {shown[1]:,} nodes shown, the screen redrawn); typed key by key,"
        f" first key to result {statistics.median(typed):.3f} s; cleared (Esc)"
        f" {statistics.median(cleared):.3f} s"
    )


async def screenshot(store: db.Store, path: Path, clock: Clock, node: str | None = None) -> None:
    """Save the dashboard over ``store`` as an SVG, with ``node`` under the nodes' cursor."""
    app = WatchApp(store, interval=3600.0, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        if node is not None:
            table = app.query_one(NodesTable)
            table.move_cursor(row=table.get_row_index(node))
            await pilot.pause()
        app.save_screenshot(str(path))
    print(f"  dashboard saved as {path}")


def main() -> None:
    """Parse the options, build the store, measure (or draw the showcase)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="nodes of 8 emulated GPUs")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs in the store")
    parser.add_argument("--samples", type=int, default=20, help="profile samples per job")
    parser.add_argument("--repeat", type=int, default=5, help="refreshes measured")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle CPU measured")
    parser.add_argument("--interval", type=float, default=2.0, help="refresh interval when idle")
    parser.add_argument("--screenshot", type=Path, help="save the dashboard as this SVG")
    parser.add_argument(
        "--showcase", type=Path, help="only save the small showcase cluster's dashboard (SVG)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.showcase is not None:
            os.environ["TZ"] = "UTC"  # the times shown do not depend on where it is drawn
            time.tzset()
            store = showcase_store(Path(tmp) / "watch.db")
            asyncio.run(screenshot(store, args.showcase, lambda: SHOWCASE_AT, "gpu03"))
            return
        started = time.perf_counter()
        store = build_store(Path(tmp) / "watch.db", args.nodes, args.jobs, args.samples)
        print(
            f"gctl watch, {args.nodes:,} nodes x 8 emulated GPUs, {args.jobs:,} jobs"
            f" (store built in {time.perf_counter() - started:.1f} s):"
        )
        if args.screenshot is not None:
            asyncio.run(screenshot(store, args.screenshot, time.time))
        bench_frames(store, args.repeat)
        asyncio.run(bench_render(store, args.repeat))
        asyncio.run(bench_filter(store, args.repeat))
        asyncio.run(bench_idle(store, args.idle, args.interval))


if __name__ == "__main__":
    main()
