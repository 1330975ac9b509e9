"""Shell completion of node names and job ids from the store (target: under 100 ms each).

A SQLite store with ``--nodes`` nodes (default 1,000) and ``--jobs`` jobs
(default 100,000) is made; then, as bash asks on each Tab:

- the completion functions alone (:mod:`gctl.cli.complete`: open the store,
  read the candidates), in this process: the figure the target is for;
- whole Tabs, ``gctl node show <Tab>`` and ``gctl cancel <Tab>``, process
  start included, beside ``gctl node show --j<Tab>``, which reads no store.

Each figure is the median of ``--repeat`` runs (default 5).

Run: ``.venv/bin/python bench/complete.py [--nodes 1000] [--jobs 100000] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import typer

from gctl.cli import complete, docs
from gctl.cli.main import app
from gctl.services import db, jobs, specs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "store"))
from storekit import bulk_nodes

GCTL = Path(sys.executable).with_name("gctl")


def _median(run: Callable[[], object], repeat: int) -> float:
    run()  # warm the page cache and the imports
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _tab(line: str, env: dict[str, str]) -> list[str]:
    """What bash gets for LINE from ``gctl``, completing its last word."""
    words = line.split(" ")
    request = {"COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}
    out = subprocess.run(
        [str(GCTL)],
        env={**env, **request, docs.COMPLETE_VAR: "complete_bash"},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = str(Path(tmp) / "complete.db")
        store = db.connect(url)
        db.upgrade(store)
        bulk_nodes(store, args.nodes)
        batch = [specs.build(image="train:1", command=["python", "t.py"], gpus=1)] * 10_000
        for start in range(0, args.jobs, len(batch)):
            jobs.submit(store, batch[: args.jobs - start])
        store.engine.dispose()
        env = {**os.environ, "GCTL_DB": url}
        os.environ["GCTL_DB"] = url
        ctx = typer.Context(typer.main.get_command(app))
        label = f"{args.nodes:,} nodes, {args.jobs:,} jobs"
        for what, run in (
            ("node names", lambda: complete.nodes(ctx, "")),
            ("unfinished job ids", lambda: complete.unfinished_jobs(ctx, "")),
            ("job ids starting 4", lambda: complete.jobs(ctx, "4")),
        ):
            took = _median(run, args.repeat)
            print(f"complete {what}, {label}: {took * 1000:.1f} ms (median)")
        assert len(_tab("gctl node show ", env)) == args.nodes
        assert len(_tab("gctl cancel ", env)) == min(args.jobs, complete.JOBS_SHOWN)
        for line in ("gctl node show --j", "gctl node show ", "gctl cancel "):
            took = _median(lambda line=line: _tab(line, env), args.repeat)
            print(f"Tab on '{line}', {label}, process included: {took:.3f} s (median)")


if __name__ == "__main__":
    main()
