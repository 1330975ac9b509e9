"""``gctl watch`` at scale: frame build and render time per refresh on a big emulated cluster.

Builds a SQLite store of ``--nodes`` nodes of 8 emulated GPUs (default
1,000) and ``--jobs`` jobs (default 10,000): one running job per GPU, every
eighth GPU also time sliced with a suspended job, the rest pending; each
running job has ``--samples`` profile samples (default 20). Then:

- frame build: :meth:`gctl.watch.data.FrameSource.build` (what the worker
  thread does every refresh), median of ``--repeat`` builds;
- render: the app headless (Textual's pilot) showing a new frame, i.e.
  ``show_frame`` plus the screen update, median of ``--repeat`` refreshes
  in which a few jobs change state each time; the first frame (every row
  added) is reported apart.

``--screenshot FILE.svg`` also saves the dashboard as an SVG. GPUs are
emulated and no host is contacted. Run: ``.venv/bin/python bench/watch.py``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert, update

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "store")]

from storekit import bulk_nodes  # noqa: E402

from gctl.services import db, jobs, specs  # noqa: E402
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
from gctl.watch.data import FrameSource  # noqa: E402


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
                update(JobRow).where(JobRow.id.in_(group)).values(state=state, mechanism="freeze")
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


def bench_frames(store: db.Store, repeat: int) -> None:
    """Median frame build time (the first, which back-fills the history, apart)."""
    source = FrameSource(store, time.time)
    first = source.build()
    took = [source.build().build_seconds for _ in range(repeat)]
    print(
        f"  frame build: {statistics.median(took):.3f} s median of {repeat}"
        f" (first {first.build_seconds:.3f} s); {len(first.nodes):,} nodes,"
        f" {sum(len(n.gpus) for n in first.nodes):,} GPUs, {len(first.jobs):,} jobs"
    )


async def bench_render(store: db.Store, repeat: int, screenshot: Path | None) -> None:
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
        if screenshot is not None:
            app.save_screenshot(str(screenshot))
    print(
        f"  render: {statistics.median(took):.3f} s median of {repeat} refreshes"
        f" (widgets updated in {statistics.median(shown):.3f} s, then the screen);"
        f" first frame (build, every row added) {first:.2f} s"
    )


def main() -> None:
    """Parse the options, build the store, measure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="nodes of 8 emulated GPUs")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs in the store")
    parser.add_argument("--samples", type=int, default=20, help="profile samples per job")
    parser.add_argument("--repeat", type=int, default=5, help="refreshes measured")
    parser.add_argument("--screenshot", type=Path, help="save the dashboard as this SVG")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        store = build_store(Path(tmp) / "watch.db", args.nodes, args.jobs, args.samples)
        print(
            f"gctl watch, {args.nodes:,} nodes x 8 emulated GPUs, {args.jobs:,} jobs"
            f" (store built in {time.perf_counter() - started:.1f} s):"
        )
        bench_frames(store, args.repeat)
        asyncio.run(bench_render(store, args.repeat, args.screenshot))


if __name__ == "__main__":
    main()
