"""Opportunistic jobs on the test hosts: they take idle GPUs and give them up to production.

The daemon runs in a thread of the test with short periods; the jobs are the
test image's training program, which checkpoints through the job SDK, so an
evicted opportunistic job resumes from its checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from daemonkit import STORES, Running, job_file, jobs_of, submit, wait
from daemonkit import kinds as _kinds
from sqlalchemy import select

from gctl.services import db, nodes
from gctl.store.engine import transaction
from gctl.store.models import EventRow, JobStateRow

pytestmark = pytest.mark.usefixtures("clean_hosts")


def _wait(what: str, check: Callable[[], bool], timeout: float = 90.0) -> float:
    return wait(what, check, timeout, STORES[-1] if STORES else None)


def _state(store: db.Store, job: int) -> str:
    return jobs_of(store)[job].state


def test_a_production_job_evicts_an_opportunistic_one_which_resumes_from_its_checkpoint(
    host_store: db.Store, hosts: dict[str, Any], start_daemon: Callable[..., Running]
) -> None:
    """h1's 2 GPUs are held by an opportunistic job; a production job needs both.

    The opportunistic job is requeued at a checkpoint before the production
    job starts (never both on the GPUs), the production job runs through,
    and the opportunistic one resumes from its checkpoint and completes.
    """
    nodes.set_admin_state(host_store, "h2", "drain", "only h1 in this test")
    guest = submit(
        host_store, "--steps", "300", "--step-time", "0.05", gpus=2, job_class="opportunistic"
    )
    start_daemon(host_store)
    _wait(
        "the guest known to checkpoint",
        lambda: jobs_of(host_store)[guest].mechanism == "checkpoint",
    )
    time.sleep(1.0)  # some steps past its first checkpoint
    submitted = time.monotonic()
    prod = submit(host_store, "--steps", "40", "--step-time", "0.05", gpus=2)
    started = _wait("production running", lambda: _state(host_store, prod) == "RUNNING")
    print(f"production job started {started:.2f} s after submission (guest evicted first)")
    assert time.monotonic() - submitted < 30
    _wait("production done", lambda: _state(host_store, prod) == "COMPLETED")
    _wait("the guest done", lambda: _state(host_store, guest) == "COMPLETED", timeout=120)

    with transaction(host_store.engine, write=False) as s:
        history = s.execute(
            select(JobStateRow.job_id, JobStateRow.state, JobStateRow.at, JobStateRow.reason)
            .where(JobStateRow.job_id.in_([guest, prod]))
            .order_by(JobStateRow.at, JobStateRow.id)
        ).all()
        places = s.scalars(select(EventRow.job_id).where(EventRow.kind == "job.place")).all()
    mine = [(st, at) for j, st, at, _ in history if j == guest]
    first_run = next(i for i, (st, _) in enumerate(mine) if st == "RUNNING")
    left = next(at for st, at in mine[first_run:] if st != "RUNNING")
    evicted = [why for j, st, _, why in history if j == guest and "evicted" in (why or "")]
    assert evicted and f"production job(s) {prod} need its GPUs" in evicted[0], history
    prod_ran = next(at for j, st, at, _ in history if j == prod and st == "RUNNING")
    assert left <= prod_ran  # the guest was off the GPUs before production started
    assert places.count(guest) == 2  # placed, evicted, placed again once production ended
    starts = job_file(hosts, STORES[-1], "h1", guest, "starts.log").split("\n")
    resumed = [int(line.split()[1]) for line in starts if line.strip()]
    assert resumed[0] == 0 and resumed[-1] > 0  # the second start resumed from its checkpoint
    assert '"step": 300' in job_file(hosts, STORES[-1], "h1", guest, "progress.json")
    assert "job.suspend" not in _kinds(host_store, prod)  # production never gave way
