"""The daemon running the ``dl2`` plugin policy, with its bundled model, on the test hosts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from daemonkit import STORES, Running, job_file, jobs_of, kinds, submit, wait

from gctl.services import db, jobs, nodes, why

pytestmark = pytest.mark.usefixtures("clean_hosts")


def _wait(what: str, check: Callable[[], bool], timeout: float = 90.0) -> None:
    wait(what, check, timeout, STORES[-1] if STORES else None)


def _held(store: db.Store, job_id: int) -> int:
    return len(jobs.show_job(store, job_id).allocations)


def _starts(hosts: dict[str, Any], job: int) -> list[tuple[int, int]]:
    """``(attempt, step resumed at)`` of every start of the job on h1."""
    text = job_file(hosts, STORES[-1], "h1", job, "starts.log")
    return [(int(a), int(s)) for a, s in (line.split() for line in text.splitlines())]


def test_dl2_shrinks_an_elastic_job_for_a_newcomer_and_grows_it_back_from_its_checkpoints(
    host_store: db.Store, hosts: dict[str, Any], start_daemon: Callable[..., Running]
) -> None:
    """h1 has 2 GPUs: the elastic job gets both, gives one up to a short job, then takes it back."""
    nodes.set_admin_state(host_store, "h2", "drain", "only h1 in this test")
    job = submit(host_store, "--steps", "100000", "--step-time", "0.05", elastic="1:2")
    start_daemon(host_store, policy="dl2", policy_options={"interval": 1.0, "hold": 10.0})
    _wait("on both GPUs", lambda: _held(host_store, job) == 2)
    _wait("started", lambda: bool(_starts(hosts, job)))
    newcomer = submit(host_store, "--steps", "40", "--step-time", "0.05")
    _wait("shrunk to 1 GPU", lambda: _held(host_store, job) == 1)
    assert "job.shrink" in kinds(host_store, job)
    _wait("the newcomer done", lambda: jobs_of(host_store)[newcomer].state == "COMPLETED")
    _wait("grown back to 2 GPUs", lambda: _held(host_store, job) == 2)
    assert "job.grow" in kinds(host_store, job)
    reason = why.explain(host_store, job).reason or ""
    assert "dl2 chose 2 GPUs for it" in reason and "value estimate" in reason, reason
    # started, restarted shrunk, restarted grown
    _wait("restarted on 2 GPUs", lambda: len(_starts(hosts, job)) >= 3)
    starts = _starts(hosts, job)
    assert all(s > 0 for _, s in starts[1:])  # every restart from a checkpoint, never from zero
    assert [s for _, s in starts] == sorted(s for _, s in starts)
    jobs.act(host_store, job, "cancel")
    _wait("cancelled", lambda: jobs_of(host_store)[job].state == "CANCELLED")
