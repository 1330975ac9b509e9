"""Daemon passes on the test hosts: the policy's decisions carried out on real containers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from gctl.core.policy import load_policy
from gctl.daemon.passes import finish_exited, reactive_pass
from gctl.hosts.engine import Engine
from gctl.hosts.ssh import Pool
from gctl.services import db, hostops, jobs, specs
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, JobRow, NodeRow

TRAIN = ["python3", "/opt/gctl/train.py", "--step-time", "0.05"]


@pytest.fixture(autouse=True)
def _leave_hosts_clean(host_store: db.Store, pool: Pool) -> Iterator[None]:
    """The hosts are shared by the session: remove every job container a test started."""
    yield
    for node in ("h1", "h2"):
        engine = _engine_of(host_store, pool, node)
        for c in engine.owned():
            engine.remove(c.id)


def _states(store: db.Store) -> dict[int, tuple[str, str | None]]:
    with transaction(store.engine, write=False) as s:
        return {r.id: (r.state, r.reason) for r in s.scalars(select(JobRow))}


def _modes(store: db.Store) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    with transaction(store.engine, write=False) as s:
        for a in s.scalars(select(AllocationRow)):
            out.setdefault(a.job_id, set()).add(a.mode)
    return out


def _submit(store: db.Store, *argv: str) -> int:
    req = specs.build(image="gctl-test/train:1", command=[*TRAIN, *argv], gpus=1)
    return jobs.submit(store, [req])[0]


def test_jobs_are_placed_run_and_end_on_the_hosts(host_store: db.Store, pool: Pool) -> None:
    policy = load_policy("gandiva")
    ok = [_submit(host_store, "--steps", "20") for _ in range(3)]
    bad = _submit(host_store, "--steps", "20", "--fail-at", "3")
    applied = reactive_pass(host_store, pool, policy, time.time())
    assert not applied.failed, applied.failed
    states = _states(host_store)
    assert {states[j][0] for j in [*ok, bad]} == {"RUNNING"}
    assert _modes(host_store) == {j: {"exclusive"} for j in [*ok, bad]}

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(
        _states(host_store)[j][0] == "RUNNING" for j in [*ok, bad]
    ):
        finish_exited(host_store, pool)
        time.sleep(0.3)
    states = _states(host_store)
    assert [states[j] for j in ok] == [("COMPLETED", "exit 0")] * 3
    assert states[bad] == ("FAILED", "exit 3")
    assert _modes(host_store) == {}  # every GPU given back


def test_oversubscription_time_slices_with_a_frozen_container(
    host_store: db.Store, pool: Pool
) -> None:
    policy = load_policy("gandiva")
    ids = [_submit(host_store, "--steps", "100000") for _ in range(6)]  # 6 jobs, 4 GPUs
    applied = reactive_pass(host_store, pool, policy, time.time())
    assert not applied.failed, applied.failed
    states = _states(host_store)
    on_gpus = [j for j in ids if states[j][0] in ("RUNNING", "SUSPENDED")]
    assert len(on_gpus) == 6  # nobody waits: time slicing instead
    suspended = [j for j in ids if states[j][0] == "SUSPENDED"]
    assert len(suspended) == 2
    modes = _modes(host_store)
    assert sum(1 for j in ids if modes[j] == {"time-sliced"}) == 4
    paused = {
        c.job_id
        for node in ("h1", "h2")
        for c in _engine_of(host_store, pool, node).owned()
        if c.paused
    }
    assert paused == set(suspended)


def _engine_of(store: db.Store, pool: Pool, node: str) -> Engine:
    with transaction(store.engine, write=False) as s:
        return hostops.engine(pool, s.scalars(select(NodeRow).where(NodeRow.name == node)).one())
