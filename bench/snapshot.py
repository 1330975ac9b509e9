"""Snapshot load time: the store read into the core model, as the daemon does on every pass.

A SQLite store with ``--nodes`` nodes of 8 GPUs (default 1,000) and
``--jobs`` pending jobs (default 10,000) is loaded with
:func:`gctl.store.snapshot.read`; then again with ``--running`` jobs
(default 2,000, 2 GPUs each, four to a node) holding GPUs, each with ten
profile samples. Each figure is the median of ``--repeat`` loads (default 5);
the target is well under a second, so a pass every few seconds can afford it.

Run: ``.venv/bin/python bench/snapshot.py [--nodes 1000] [--jobs 10000] [--running 2000]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert, update

from gctl.services import db, jobs, specs
from gctl.store import snapshot
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, JobRow, JobStateRow, ProfileRow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "store"))
from storekit import bulk_nodes


def _submit(store: db.Store, count: int) -> list[int]:
    reqs = [
        specs.build(image="train:1", command=["python", "t.py"], gpus=1 + i % 4)
        for i in range(count)
    ]
    return jobs.submit(store, reqs)


def _run(store: db.Store, job_ids: list[int], gpu_ids: dict[tuple[int, int], int]) -> None:
    """Put 2-GPU jobs four to a node, running, with ten profile samples each."""
    at = time.time()
    with transaction(store.engine, write=True) as s:
        s.execute(
            update(JobRow)
            .where(JobRow.id.in_(job_ids))
            .values(state="RUNNING", gpus=2, start_time=at)
        )
        s.execute(
            insert(JobStateRow),
            [{"job_id": j, "state": "RUNNING", "at": at, "reason": "bench"} for j in job_ids],
        )
        s.execute(
            insert(AllocationRow),
            [
                {"job_id": j, "gpu_id": gpu_ids[(n // 4, 2 * (n % 4) + k)], "since": at}
                for n, j in enumerate(job_ids)
                for k in (0, 1)
            ],
        )
        s.execute(
            insert(ProfileRow),
            [
                {
                    "job_id": j,
                    "at": at + k,
                    "gpu_util": 0.5,
                    "memory_mb": 4000,
                    "progress_rate": 10.0,
                }
                for j in job_ids
                for k in range(10)
            ],
        )


def _median_load(store: db.Store, repeat: int) -> tuple[float, snapshot.Snapshot]:
    times = []
    snap = snapshot.read(store.engine, now=time.time())  # warm caches and imports
    for _ in range(repeat):
        started = time.perf_counter()
        snap = snapshot.read(store.engine, now=time.time())
        times.append(time.perf_counter() - started)
    return statistics.median(times), snap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.running > args.nodes * 4:
        parser.error("--running: at most 4 per node")
    with tempfile.TemporaryDirectory() as tmp:
        store = db.connect(str(Path(tmp) / "snapshot.db"))
        db.upgrade(store)
        gpu_ids = {
            (i // 8, i % 8): gid for i, gid in enumerate(bulk_nodes(store, args.nodes, "nvlink"))
        }
        _submit(store, args.jobs)
        took, snap = _median_load(store, args.repeat)
        assert not snap.problems, snap.problems[:3]
        label = f"{args.nodes:,} nodes x 8 GPUs, {args.jobs:,} pending jobs"
        print(f"snapshot load, {label}: {took:.3f} s (median)")
        if args.running:
            _run(store, _submit(store, args.running), gpu_ids)
            took, snap = _median_load(store, args.repeat)
            assert not snap.problems, snap.problems[:3]
            print(
                f"snapshot load, {label} + {args.running:,} running (2 GPUs, 10 samples each):"
                f" {took:.3f} s (median)"
            )


if __name__ == "__main__":
    main()
