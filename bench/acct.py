"""Accounting on a big history: ``gctl acct`` over 100,000 finished jobs, on SQLite.

A SQLite store gets ``--jobs`` finished jobs (default 100,000) of 20 users
over the last 60 days, with the state and allocation history the daemon
writes: a quarter each of 1-GPU jobs, 2-GPU jobs frozen halfway for a
while (time slicing: GPUs kept), elastic jobs grown from 1 GPU to 2
halfway, and 2-node jobs suspended by checkpoint halfway (GPUs kept, the
interval closed and reopened). That is 2.5 allocation history rows and 4.25
state rows per job. Each job's row has the totals the daemon stores as a
job finishes (:func:`gctl.services.jobs.set_state`): worked out here by the
same functions from the rows built. Timed, each the median of ``--repeat``
runs (default 3), with the window taking in every job:

- the service call, :func:`gctl.services.acct.finished` (and ``summary``),
  with the garbage collector paused as the command pauses it;
- the whole command, process start included: ``gctl acct -a --json``,
  ``gctl acct -a`` (the table) and ``gctl acct -a --summary``, stdout to
  /dev/null; and ``gctl acct -a`` for the default window (today's jobs,
  read by the end-time index among all 100,000). Target: under 1 s.
- then, the totals cleared as for jobs that finished before they were kept,
  the service call and ``gctl acct -a --json`` again: every job's totals
  worked out from its state and allocation history (the fallback).

The GPU-hours the service finds are checked against those the jobs were
built with, and the fallback's listing against the one from the totals.

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

from sqlalchemy import insert, update

from gctl.gcpause import gc_paused
from gctl.services import acct, db, hostlists
from gctl.services.reader import reading
from gctl.store.engine import transaction
from gctl.store.models import AllocationHistoryRow, JobRow, JobStateRow
from gctl.store.usage import stretches, totals

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


def _totals(gpus: int, states: list[dict[str, Any]], held: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals columns of a job's row, as ``set_state`` stores them when it finishes."""
    ran = [(a, b) for _, a, b in stretches((r["job_id"], r["state"], r["at"]) for r in states)]
    used = totals(gpus, ran, [(h["since"], h["until"]) for h in held])
    return {
        "run_seconds": used.run_seconds,
        "gpu_seconds": used.gpu_seconds,
        "gpus_held": used.gpus,
        "nodes_held": hostlists.collect({h["node"] for h in held}) if held else "",
    }


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
        gpus = 1 if i % 4 in (0, 2) else 2
        job_states.insert(0, _state(i, "PENDING", submit))
        jobs.append(
            {
                "id": i,
                "name": f"train-{i}",
                "user": f"user{i % 20:02d}",
                "image": "train:1",
                "gpus": gpus,
                "state": job_states[-1]["state"],
                "submit_time": submit,
                "start_time": start,
                "end_time": end,
                "exit_code": 1 if job_states[-1]["state"] == "FAILED" else 0,
                **_totals(gpus, job_states, job_held),
            }
        )
        states += job_states
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


def _forget_totals(url: str) -> None:
    """Clear every job's totals, as for jobs that finished before they were kept."""
    store = db.connect(url)
    with transaction(store.engine, write=True) as s:
        unkept = dict.fromkeys(("run_seconds", "gpu_seconds", "gpus_held", "nodes_held"))
        s.execute(update(JobRow).values(unkept))
    store.engine.dispose()


def _service(url: str) -> tuple[float, list[acct.Usage]]:
    start = time.perf_counter()
    with gc_paused(), reading(url) as reader:
        rows = acct.finished(reader, start=0.0, end=time.time() + 86400)
    return time.perf_counter() - start, rows


def _timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=os.environ)
    return time.perf_counter() - start


def _listing(url: str, repeat: int, expected: float, how: str) -> list[acct.Usage]:
    """Time the service call ``repeat`` times and check its GPU-hours; its rows."""
    runs = [_service(url) for _ in range(repeat)]
    rows = runs[-1][1]
    found = sum(r.gpu_hours for r in rows)
    print(f"GPU-hours ({how}): {found:,.1f} found, {expected:,.1f} built in")
    assert abs(found - expected) < 1e-6 * expected
    took = statistics.median(t for t, _ in runs)
    print(f"acct.finished, {len(rows):,} jobs ({how}): {took:.3f} s (median)")
    return rows


def _command(cmd: list[str], repeat: int, label: str) -> None:
    took = statistics.median(_timed(cmd) for _ in range(repeat))
    print(f"{label}: {took:.2f} s (median, process start included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = str(Path(tmp) / "acct.db")
        expected = build(url, args.jobs)
        rows = _listing(url, args.repeat, expected, "stored totals")
        assert len(rows) == args.jobs
        sums = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            acct.summary(rows)
            sums.append(time.perf_counter() - start)
        print(f"acct.summary of them: {statistics.median(sums):.3f} s (median)")
        base = [str(GCTL), "--db", url, "acct", "-a", "-S", f"now-{DAYS + 1}days"]
        for extra in (["--json"], [], ["--summary"]):
            _command([*base, *extra], args.repeat, " ".join(["gctl acct -a -S ...", *extra]))
        _command(base[:-2], args.repeat, "gctl acct -a (today's jobs)")
        _forget_totals(url)
        worked_out = _listing(url, args.repeat, expected, "worked out")
        assert worked_out == rows
        _command([*base, "--json"], args.repeat, "gctl acct -a -S ... --json (worked out)")


if __name__ == "__main__":
    main()
