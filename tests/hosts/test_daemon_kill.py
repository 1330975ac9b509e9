"""``kill -9`` of the daemon at random moments loses nothing.

The real ``gctl daemon`` command runs as a child process and is killed with
SIGKILL at random points, then started again at once, while jobs arrive,
time-slice, checkpoint and finish on the test hosts. At the end every job
has completed exactly once with its full step count, no GPU is held by two
jobs that should not share it, and no container is left behind.
``GCTL_KILL_ROUNDS`` sets the number of kills (default 50; bench/kill9.py
runs more).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from gctl.services import db, jobs, specs
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, EventRow, JobRow, JobStateRow

STEPS = 40
GCTL = str(Path(sys.executable).with_name("gctl"))


@dataclass
class KillRun:
    """What a kill run did and found."""

    kills: int
    jobs: int
    seconds: float
    log: str


def _daemon(store_url: str, state: Path, log: Any) -> subprocess.Popen[bytes]:
    argv = [
        GCTL,
        "--db",
        store_url,
        "daemon",
        "--tick",
        "0.2",
        "--introspect-every",
        "1",
        "--heartbeat-every",
        "0.5",
        "--reconcile-every",
        "2",
        "--grace",
        "5",
        "--state-dir",
        str(state),
        "-o",
        "quantum=1",
    ]
    return subprocess.Popen(argv, stdout=log, stderr=log)


def _submit(store: db.Store, rng: random.Random) -> int:
    argv = ["python3", "/opt/gctl/train.py", "--steps", str(STEPS), "--step-time", "0.05"]
    argv += ["--checkpoint-every", str(rng.choice([5, 10, 20]))]
    return jobs.submit(store, [specs.build(image="gctl-test/train:1", command=argv, gpus=1)])[0]


def _unfinished(store: db.Store) -> int:
    with transaction(store.engine, write=False) as s:
        return sum(1 for st in s.scalars(select(JobRow.state)) if st != "COMPLETED")


def _check_gpus(store: db.Store) -> None:
    """Every allocation belongs to a job on GPUs; a GPU held twice is time-sliced or packed."""
    with transaction(store.engine, write=False) as s:
        rows = s.execute(
            select(AllocationRow.gpu_id, AllocationRow.mode, JobRow.state).join(JobRow)
        ).all()
    holders = Counter(gpu for gpu, _, _ in rows)
    for gpu, mode, state in rows:
        assert state in ("RUNNING", "SUSPENDED"), (gpu, state)
        if holders[gpu] > 1:
            assert mode in ("time-sliced", "packed"), (gpu, mode, holders[gpu])


def run_kills(store: db.Store, state: Path, rounds: int, seed: int = 0) -> KillRun:
    """Kill the daemon ``rounds`` times at random moments while jobs run; then let it finish."""
    rng = random.Random(seed)
    url = str(store.engine.url)
    log_path = state / "daemon.log"
    state.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    submitted = [_submit(store, rng) for _ in range(6)]
    with log_path.open("ab") as log:
        for _ in range(rounds):
            proc = _daemon(url, state, log)
            time.sleep(rng.uniform(0.3, 2.0))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            _check_gpus(store)
            if rng.random() < 0.5:
                submitted.append(_submit(store, rng))
        proc = _daemon(url, state, log)
        try:
            deadline = time.monotonic() + 240
            while _unfinished(store) and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    return KillRun(rounds, len(submitted), time.monotonic() - started, log_path.read_text())


def test_sigkill_at_random_points_loses_nothing(
    host_store: db.Store, hosts: dict[str, Any], tmp_path: Path
) -> None:
    rounds = int(os.environ.get("GCTL_KILL_ROUNDS", "50"))
    run = run_kills(host_store, tmp_path / "state", rounds)
    print(f"kill run: {run.kills} kills, {run.jobs} jobs, {run.seconds:.0f} s")  # bench/kill9.py
    assert "Traceback" not in run.log, run.log[-3000:]
    with transaction(host_store.engine, write=False) as s:
        rows = list(s.scalars(select(JobRow)))
        ends = Counter(s.scalars(select(EventRow.job_id).where(EventRow.kind == "job.end")))
        completed = Counter(
            s.scalars(select(JobStateRow.job_id).where(JobStateRow.state == "COMPLETED"))
        )
        assert s.scalars(select(AllocationRow)).all() == []  # every GPU given back
    assert len(rows) == run.jobs
    for row in rows:
        assert row.state == "COMPLETED", (row.id, row.state, row.reason)
        assert ends[row.id] == 1 and completed[row.id] == 1, row.id  # ended exactly once
    for row in rows:
        # the job's last report, on whichever host it ended: every step done
        reports = [Path(f"{h['work_dir']}/jobs/{row.id}/progress.json") for h in hosts["hosts"]]
        assert any(f'"step": {STEPS}' in p.read_text() for p in reports if p.exists()), row.id
    for h in hosts["hosts"]:
        left = subprocess.run(
            ["docker", "-H", h["docker_host"], "ps", "-aq", "--filter", "label=gctl.job"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert left == [], (h["name"], left)
