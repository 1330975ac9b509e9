"""Time limits on the test hosts: a job that runs for its ``--time`` checkpoints and ends TIMEOUT.

The job uses the job SDK and takes no checkpoint of its own (no
``--checkpoint-every``), so a checkpoint on its host can only come from the
SIGTERM the daemon sends at the limit. The daemon runs its default tick and
heartbeat, with a short grace.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pytest
from clikit import run
from daemonkit import Running, job_file, jobs_of, submit, wait
from sqlalchemy import select

from gctl.services import db
from gctl.store.engine import transaction
from gctl.store.models import EventRow, JobStateRow

pytestmark = pytest.mark.usefixtures("clean_hosts")


def test_a_job_at_its_time_limit_checkpoints_and_ends_timeout_within_5_s(
    host_store: db.Store, hosts: dict[str, Any], start_daemon: Callable[..., Running]
) -> None:
    job = submit(host_store, "--steps", "100000", "--step-time", "0.1", time="0:20")
    other = submit(host_store, "--steps", "30", "--step-time", "0.1", time="1:00")
    start_daemon(host_store, tick=1.0, heartbeat_every=5.0, grace=5.0)

    def state(j: int) -> str:
        return jobs_of(host_store)[j].state

    wait("the job running", lambda: state(job) == "RUNNING", store=host_store)
    wait("the job timed out", lambda: state(job) == "TIMEOUT", timeout=60, store=host_store)
    row = jobs_of(host_store)[job]
    with transaction(host_store.engine, write=False) as s:
        history = s.execute(
            select(JobStateRow.state, JobStateRow.at)
            .where(JobStateRow.job_id == job)
            .order_by(JobStateRow.id)
        ).all()
        ends = list(
            s.scalars(
                select(EventRow.message).where(EventRow.job_id == job, EventRow.kind == "job.end")
            )
        )
    ran = sum(until - at for (st, at), (_, until) in pairwise(history) if st == "RUNNING")
    print(f"job ran {ran:.1f} s of running against its 20 s limit")
    assert row.reason == "time limit 00:00:20 reached"
    assert 20.0 <= ran <= 25.0
    assert any("timed out" in m for m in ends), ends
    code, out, err = run("why", str(job))
    assert code == 0, err
    assert out.startswith(f"job {job} is TIMEOUT") and "time limit 00:00:20 reached" in out
    node = "h1" if job_file(hosts, host_store, "h1", job, "progress.json") else "h2"
    wait(
        "its checkpoint",
        lambda: bool(job_file(hosts, host_store, node, job, "checkpoint.json")),
        timeout=30,
    )
    checkpoint = json.loads(job_file(hosts, host_store, node, job, "checkpoint.json"))
    assert checkpoint["step"] > 100  # it had run about 200 steps of 0.1 s
    wait("the short job done", lambda: state(other) == "COMPLETED", timeout=60)
