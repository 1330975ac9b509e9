"""State store throughput: batch submission and ``gctl queue`` on a big queue, on SQLite.

- Batch submission: 10,000 job specs in a JSON-lines file, submitted with
  ``gctl submit -f`` (target: at least 2,000 jobs/s).
- ``gctl queue`` and ``gctl queue --json`` with 100,000 jobs stored (target:
  under 1 s each), timed as whole commands, process start included.

Each figure is the median of ``--repeat`` runs (default 3).

Run: ``.venv/bin/python bench/store.py [--repeat 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gctl.services import db, jobs, specs

GCTL = Path(sys.executable).with_name("gctl")


def _write_specs(path: Path, count: int) -> None:
    with path.open("w") as fh:
        for i in range(count):
            spec = {
                "image": "train:1",
                "command": ["python", "train.py", f"--seed={i}"],
                "gpus": 1 + i % 4,
                "name": f"job{i}",
                "env": {"RUN": str(i)},
            }
            fh.write(json.dumps(spec) + "\n")


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        batch = base / "jobs.jsonl"
        _write_specs(batch, 10_000)
        rates = []
        for r in range(args.repeat):
            url = str(base / f"submit{r}.db")
            db.upgrade(db.connect(url))
            env = {**os.environ, "GCTL_DB": url}
            rates.append(10_000 / _timed([str(GCTL), "submit", "-f", str(batch)], env))
        print(f"batch submit 10,000 jobs: {statistics.median(rates):,.0f} jobs/s (median)")

        url = str(base / "queue.db")
        store = db.connect(url)
        db.upgrade(store)
        reqs = list(specs.read_batch(batch))
        for _ in range(10):
            jobs.submit(store, reqs)
        env = {**os.environ, "GCTL_DB": url}
        for extra in ([], ["--json"]):
            times = [_timed([str(GCTL), "queue", *extra], env) for _ in range(args.repeat)]
            label = " ".join(["gctl queue", *extra])
            print(f"{label} with 100,000 jobs: {statistics.median(times):.2f} s (median)")


if __name__ == "__main__":
    main()
