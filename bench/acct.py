"""Accounting on a big history: ``gctl acct`` over 100,000 finished jobs, on SQLite.

A SQLite store gets ``--jobs`` finished jobs (default 100,000) of 20 users
over the last 60 days, with the state and allocation history the daemon
writes: a quarter each of 1-GPU jobs, 2-GPU jobs frozen halfway for a
while (time slicing: GPUs kept), elastic jobs grown from 1 GPU to 2
halfway, and 2-node jobs suspended by checkpoint halfway (GPUs kept, the
interval closed and reopened). That is 2.5 allocation history rows and 4.25
state rows per job. Timed, each the median of ``--repeat`` runs (default
3), with the window taking in every job:

- the service call, :func:`gctl.services.acct.finished` (and ``summary``),
  with the garbage collector paused as the command pauses it;
- the whole command, process start included: ``gctl acct -a --json``,
  ``gctl acct -a`` (the table) and ``gctl acct -a --summary``, stdout to
  /dev/null; and ``gctl acct -a`` for the default window (today's jobs,
  read by the end-time index among all 100,000). Target: under 1 s.

The GPU-hours the service finds are checked against those the jobs were
built with.

Run: ``.venv/bin/python bench/acct.py [--jobs 100000] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from gctl.gcpause import gc_paused
from gctl.services import acct, db
from gctl.services.reader import reading
from gctl.store.engine import transaction
from gctl.store.models import AllocationHistoryRow, JobRow, JobStateRow

GCTL = Path(sys.executable).with_name("gctl")
DAYS = 60
PAUSE = 600.0
"""Seconds a job of the second and fourth kinds waits, suspended, halfway."""


def _state(job: int, state: str, at: float) -> dict[str, Any]:
    return {"job_id": job, "state": state, "at": at, "reason": "bench"}


def _held(job: int, node: str, gpu: int, since: float, until: float) -> dict[str, Any]:
    return {
        "job_id": job,
        "node": node,
        "gpu_index": gpu,
        "gpu_model": "V100",
        "mode": "exclusive",
        "since": since,
        "until": until,
    }


def _job(
    job: int, start: float, run: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float, float]:
    """One job's state and allocation rows, its end time and the GPU-seconds it used."""
    kind = job % 4
    node, other = f"gpu{job % 1000:04d}", f"gpu{(job + 1) % 1000:04d}"
    mid = start + run / 2
    if kind == 0:  # one GPU, no interruption
        end = start + run
        states = [_state(job, "RUNNING", start), _state(job, "COMPLETED", end)]
        return states, [_held(job, node, 0, start, end)], end, run
    if kind == 1:  # two GPUs, frozen a while halfway (GPUs kept, not charged)
        end = start + run + PAUSE
        states = [
            _state(job, "RUNNING", start),
            _state(job, "SUSPENDED", mid),
            _state(job, "RUNNING", mid + PAUSE),
            _state(job, "COMPLETED", end),
        ]
        return states, [_held(job, node, g, start, end) for g in (0, 1)], end, 2 * run
    if kind == 2:  # elastic: grown from one GPU to two halfway
        end = start + run
        states = [
            _state(job, "RUNNING", start),
            _state(job, "RUNNING", mid),
            _state(job, "COMPLETED", end),
        ]
        held = [
            _held(job, node, 0, start, mid),
            _held(job, node, 0, mid, end),
            _held(job, node, 1, mid, end),
        ]
        return states, held, end, run / 2 + run
    end = start + run + PAUSE  # two nodes, suspended by checkpoint halfway, GPUs kept
    states = [
        _state(job, "RUNNING", start),
        _state(job, "SUSPENDED", mid),
        _state(job, "RUNNING", mid + PAUSE),
        _state(job, "FAILED" if job % 40 == 3 else "COMPLETED", end),
    ]
    held = [
        _held(job, n, 0, t0, t1) for n in (node, other) for t0, t1 in ((start, mid), (mid, end))
    ]
    return states, held, end, 2 * run


def build(url: str, count: int) -> float:
    """A store of ``count`` finished jobs (module docstring); the GPU-hours they used."""
    store = db.connect(url)
    db.upgrade(store)
    now = time.time()
    jobs, states, held = [], [], []
    gpu_seconds = 0.0
    for i in range(1, count + 1):
        submit = now - DAYS * 86400 * (1 - i / count) - 7200
        start, run = submit + 60, 600.0 + (i * 37) % 3000
        job_states, job_held, end, used = _job(i, start, run)
        gpu_seconds += used
        jobs.append(
            {
                "id": i,
                "name": f"train-{i}",
                "user": f"user{i % 20:02d}",
                "image": "train:1",
                "gpus": 1 if i % 4 in (0, 2) else 2,
                "state": job_states[-1]["state"],
                "submit_time": submit,
                "start_time": start,
                "end_time": end,
                "exit_code": 1 if job_states[-1]["state"] == "FAILED" else 0,
            }
        )
        states += [_state(i, "PENDING", submit), *job_states]
        held += job_held
    with transaction(store.engine, write=True) as s:
        s.execute(insert(JobRow), jobs)
        s.execute(insert(JobStateRow), states)
        s.execute(insert(AllocationHistoryRow), held)
    print(
        f"{count:,} finished jobs, {len(states) / count:.2f} state rows"
        f" and {len(held) / count:.2f} allocation history rows per job"
    )
    store.engine.dispose()
    return gpu_seconds / 3600


def _service(url: str) -> tuple[float, list[acct.Usage]]:
    start = time.perf_counter()
    with gc_paused(), reading(url) as reader:
        rows = acct.finished(reader, start=0.0, end=time.time() + 86400)
    return time.perf_counter() - start, rows


def _timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=os.environ)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = str(Path(tmp) / "acct.db")
        expected = build(url, args.jobs)
        runs = [_service(url) for _ in range(args.repeat)]
        rows = runs[-1][1]
        found = sum(r.gpu_hours for r in rows)
        print(f"GPU-hours: {found:,.1f} found, {expected:,.1f} built in")
        assert len(rows) == args.jobs and abs(found - expected) < 1e-6 * expected
        took = statistics.median(t for t, _ in runs)
        print(f"acct.finished, {len(rows):,} jobs: {took:.3f} s (median)")
        sums = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            acct.summary(rows)
            sums.append(time.perf_counter() - start)
        print(f"acct.summary of them: {statistics.median(sums):.3f} s (median)")
        base = [str(GCTL), "--db", url, "acct", "-a", "-S", f"now-{DAYS + 1}days"]
        for extra in (["--json"], [], ["--summary"]):
            times = [_timed([*base, *extra]) for _ in range(args.repeat)]
            label = " ".join(["gctl acct -a -S ...", *extra])
            print(f"{label}: {statistics.median(times):.2f} s (median, process start included)")
        today = [_timed(base[:-2]) for _ in range(args.repeat)]
        print(f"gctl acct -a (today's jobs): {statistics.median(today):.2f} s (median)")


if __name__ == "__main__":
    main()
