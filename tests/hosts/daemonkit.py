"""A ``gctl daemon`` run in a thread of a test, and what the host tests ask of it and its jobs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select

from gctl.core.policy import load_policy
from gctl.daemon.loop import Daemon, DaemonConfig
from gctl.daemon.metrics import DaemonMetrics
from gctl.services import db, jobs, specs
from gctl.store.engine import transaction
from gctl.store.identity import store_id
from gctl.store.models import EventRow, JobRow

TRAIN = ["python3", "/opt/gctl/train.py"]
"""The test image's training program (job SDK)."""
STORES: list[db.Store] = []
"""The stores daemons were started on, newest last (for the files and the messages)."""


class Running:
    """The daemon the command runs, in a thread with short periods, until :meth:`close`.

    ``config`` overrides :class:`DaemonConfig` fields; ``policy`` names the
    policy (default gandiva) and ``policy_options`` go to it (default for
    gandiva: a 2 s quantum).
    """

    def __init__(self, store: db.Store, tmp: Path, **config: Any) -> None:
        policy = config.pop("policy", "gandiva")
        options = config.pop("policy_options", {"quantum": 2.0} if policy == "gandiva" else {})
        cfg = {
            "tick": 0.3,
            "introspect_every": 1.0,
            "heartbeat_every": 0.5,
            "reconcile_every": 2.0,
            "grace": 10.0,
            "state_dir": tmp / "state",
        }
        cfg.update(config)
        self.daemon = Daemon(
            store, load_policy(policy, **options), DaemonConfig(**cfg), DaemonMetrics(store)
        )
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.daemon.run(self.stop)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def close(self) -> None:
        """Stop the daemon (jobs keep running on their hosts) and report its failure."""
        self.stop.set()
        self.thread.join(60)
        assert self.error is None, self.error


def job_file(hosts: dict[str, Any], store: db.Store, node: str, job_id: int, name: str) -> str:
    """A file of the job's newest attempt directory on a test host ("" when none).

    Each attempt's directory is seeded from the one before on the host, so
    the newest holds the job's whole history there (``starts.log``).
    """
    base = Path(f"{hosts['dir']}/{node}/work/stores/{store_id(store.engine)}/jobs/{job_id}")
    attempts = (
        sorted((int(p.name[1:]), p) for p in base.glob("a*") if p.name[1:].isdigit())
        if base.is_dir()
        else []
    )
    path = attempts[-1][1] / name if attempts else None
    return path.read_text() if path is not None and path.exists() else ""


def mean_rate(hosts: dict[str, Any], job: int, seconds: float, node: str = "h1") -> float:
    """The job's steps a second over ``seconds``, from its reported step counts on ``node``."""

    def step() -> int:
        return int(json.loads(job_file(hosts, STORES[-1], node, job, "progress.json"))["step"])

    first, began = step(), time.monotonic()
    time.sleep(seconds)
    return (step() - first) / (time.monotonic() - began)


def submit(store: db.Store, *argv: str, gpus: int = 1, **extra: Any) -> int:
    """Submit the training program with ``argv``; the job's id."""
    req = specs.build(image="gctl-test/train:1", command=[*TRAIN, *argv], gpus=gpus, **extra)
    return jobs.submit(store, [req])[0]


def jobs_of(store: db.Store) -> dict[int, JobRow]:
    """Every job row, by id."""
    with transaction(store.engine, write=False) as s:
        return {r.id: r for r in s.scalars(select(JobRow))}


def kinds(store: db.Store, job_id: int) -> list[str]:
    """The kinds of the job's events, oldest first."""
    with transaction(store.engine, write=False) as s:
        return list(s.scalars(select(EventRow.kind).where(EventRow.job_id == job_id)))


def describe(store: db.Store) -> str:
    """The jobs and the latest events, for a timeout's message."""
    with transaction(store.engine, write=False) as s:
        rows = [f"{r.id}:{r.state}:{r.reason}" for r in s.scalars(select(JobRow))]
        evs = s.scalars(select(EventRow).order_by(EventRow.id.desc()).limit(15)).all()
        lines = [f"{e.kind} {e.message}" for e in reversed(evs)]
    return "\n" + "\n".join(rows + lines)


def wait(
    what: str, check: Callable[[], bool], timeout: float = 90.0, store: db.Store | None = None
) -> float:
    """Wait until ``check()``; the seconds it took (AssertionError naming ``what``, on timeout)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}{describe(store) if store else ''}")
