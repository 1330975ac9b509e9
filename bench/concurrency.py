"""Concurrent writers on one SQLite store: no "database is locked", no lost rows.

Four processes submit jobs one transaction at a time while a fifth moves
random jobs between states in a loop, all for ``--seconds`` (30 by default).
Prints the submissions, updates and errors seen, and checks that every job
a submitter was told was stored is in the database.

Run: ``.venv/bin/python bench/concurrency.py [--seconds 30] [--db FILE] [--json]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select

from gctl.services import db, jobs, specs
from gctl.store.engine import transaction
from gctl.store.models import JobRow

SUBMITTERS = 4


def _first_line(exc: Exception) -> str:
    """Every failure is a finding here: keep its type and first line."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _submitter(url: str, seconds: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    store = db.open_store(url)
    req = specs.build(image="bench:1", command=["train"], gpus=1)
    ids: list[int] = []
    errors: list[str] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            ids += jobs.submit(store, [req])
        except Exception as exc:
            errors.append(_first_line(exc))
    out.put(("submit", ids, errors))


def _updater(url: str, seconds: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    store = db.open_store(url)
    rng = random.Random(7)
    updates = 0
    errors: list[str] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            with transaction(store.engine, write=True) as s:
                top = s.scalar(select(func.max(JobRow.id))) or 0
                if top:
                    row = s.get(JobRow, rng.randint(1, top))
                    if row is not None:
                        state = "RUNNING" if row.state == "PENDING" else "PENDING"
                        jobs.set_state(s, row, state, "benchmark")
                        updates += 1
        except Exception as exc:
            errors.append(_first_line(exc))
    out.put(("update", [updates], errors))


def run(url: str, seconds: float) -> dict[str, object]:
    """Run the workload against an initialised store and report what happened."""
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [ctx.Process(target=_submitter, args=(url, seconds, out)) for _ in range(SUBMITTERS)]
    procs.append(ctx.Process(target=_updater, args=(url, seconds, out)))
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    submitted = [i for kind, ids, _ in results if kind == "submit" for i in ids]
    updates = sum(ids[0] for kind, ids, _ in results if kind == "update")
    errors = [e for _, _, errs in results for e in errs]
    store = db.open_store(url)
    with transaction(store.engine, write=False) as s:
        stored = set(s.scalars(select(JobRow.id)))
    return {
        "seconds": seconds,
        "submitted": len(submitted),
        "submits_per_s": round(len(submitted) / seconds, 1),
        "updates": updates,
        "errors": len(errors),
        "locked_errors": sum("locked" in e for e in errors),
        "first_error": errors[0] if errors else None,
        "lost_rows": len(set(submitted) - stored),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--db", help="SQLite file (default: a new temporary one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or str(Path(tmp) / "bench.db")
        db.upgrade(db.connect(url))
        report = run(url, args.seconds)
    if args.json:
        json.dump(report, sys.stdout)
        print()
    else:
        for key, value in report.items():
            print(f"{key:>15}: {value}")


if __name__ == "__main__":
    main()
