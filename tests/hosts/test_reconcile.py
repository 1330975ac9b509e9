"""Reconcile on the test hosts: the store and the containers really running are made to agree.

Each case sets up what a daemon killed between a host action and its record
leaves behind (a container the store does not know of, a container of a job
the store has no more, a running job whose container vanished), then runs
:func:`gctl.daemon.reconcile.reconcile` once, as the daemon does at start.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import testhosts
from conftest import store_of_hosts
from sqlalchemy import select

from gctl.daemon.inflight import Inflight
from gctl.daemon.reconcile import Report
from gctl.daemon.reconcile import reconcile as reconcile_step
from gctl.daemon.site import Launch, Site
from gctl.daemon.watch import Observation, Watch
from gctl.hosts.engine import container_name
from gctl.hosts.ssh import Pool
from gctl.services import db, hostops, jobs, nodes, specs
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, EventRow, GpuRow, JobRow, NodeRow

pytestmark = pytest.mark.usefixtures("clean_hosts")

LONG = ["python3", "/opt/gctl/train.py", "--steps", "100000", "--step-time", "0.05"]


@pytest.fixture
def site(host_store: db.Store, tmp_path: Path) -> Iterator[Site]:
    with Pool() as pool:
        site = Site(host_store, pool, tmp_path / "mirror")
        yield site
        site.close()


def reconcile(site: Site) -> Report:
    """One reconcile as the daemon's tick runs it: observe every node, compare, act, wait."""
    inflight = Inflight()
    watch = Watch(site, inflight, heartbeat_every=60.0, answer_within=30.0, lease_timeout=60.0)
    try:
        with transaction(site.store.engine, write=False) as s:
            nodes, gpus = hostops.read_nodes(s)
        watch.look(nodes, gpus, {})
        seen: list[Observation] = []
        while len(seen) < len(nodes):
            seen += watch.collect()
            time.sleep(0.05)
        assert all(o.error is None for o in seen), seen
        report = reconcile_step(site, watch, inflight)
        assert not watch.unreconciled
        inflight.wait(60)
        assert all(w.future.exception() is None for w in inflight.collect())
        return report
    finally:
        watch.close()
        inflight.close()


def _name(site: Site, job: int, attempt: int, node: str) -> str:
    return container_name(site.store_id, job, attempt, node)


def _submit(store: db.Store) -> int:
    return jobs.submit(store, [specs.build(image="gctl-test/train:1", command=LONG, gpus=1)])[0]


def _start_unrecorded(site: Site, job_id: int, node: str, index: int) -> None:
    """Start the job's container as a placement does, without recording anything."""
    with transaction(site.store.engine, write=False) as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        site.start(s, Launch.of(row), [(node, index)])


def _containers(node: str) -> list[str]:
    """Names of the job containers on a test host, from its own docker CLI."""
    host = next(h for h in testhosts.env()["hosts"] if h["name"] == node)
    listing = ["ps", "-a", "--filter", "label=gctl.job", "--format", "{{.Names}} {{.State}}"]
    out = subprocess.run(
        ["docker", "-H", host["docker_host"], *listing],
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(out.stdout.split("\n")[:-1])


def _held(store: db.Store, job_id: int) -> list[tuple[str, int, str]]:
    with transaction(store.engine, write=False) as s:
        query = (
            select(NodeRow.name, GpuRow.index, AllocationRow.mode)
            .join(GpuRow, GpuRow.id == AllocationRow.gpu_id)
            .join(NodeRow, NodeRow.id == GpuRow.node_id)
            .where(AllocationRow.job_id == job_id)
        )
        return [tuple(r) for r in s.execute(query)]  # type: ignore[misc]


def test_a_running_container_the_store_lost_is_adopted(host_store: db.Store, site: Site) -> None:
    job = _submit(host_store)
    _start_unrecorded(site, job, "h2", 1)

    report = reconcile(site)

    assert report.adopted == [job] and report.removed == []
    with transaction(host_store.engine, write=False) as s:
        row = s.get(JobRow, job)
        assert row is not None and row.state == "RUNNING" and row.attempt == 0
        kinds = list(s.scalars(select(EventRow.kind).where(EventRow.job_id == job)))
    assert _held(host_store, job) == [("h2", 1, "exclusive")]
    assert kinds[-1] == "job.adopt"
    assert _containers("h2") == [f"{_name(site, job, 0, 'h2')} running"]
    assert reconcile(site).adopted == []  # level-triggered: nothing left to do


def _strays(store: db.Store) -> list[tuple[int | None, str | None, str]]:
    """The ``job.stray`` events: job, node, text."""
    with transaction(store.engine, write=False) as s:
        query = select(EventRow.job_id, EventRow.node, EventRow.message).where(
            EventRow.kind == "job.stray"
        )
        return [tuple(r) for r in s.execute(query)]  # type: ignore[misc]


def test_an_old_attempt_still_running_is_removed_and_said(host_store: db.Store, site: Site) -> None:
    """A job requeued while its node was away, whose container there was never killed.

    It ran beside the job's next attempt: a job running twice, which the
    event makes visible (bench/scale.py counts them).
    """
    job = _submit(host_store)
    _start_unrecorded(site, job, "h1", 0)
    with transaction(host_store.engine, write=True) as s:
        row = s.get(JobRow, job)
        assert row is not None
        row.attempt = 1  # requeued, as for a node down: the next attempt waits

    report = reconcile(site)

    assert report.removed == [_name(site, job, 0, "h1")]
    assert _containers("h1") == []
    assert _strays(host_store) == [
        (
            job,
            "h1",
            f"job {job}: attempt 0 still running on h1, the job is at attempt 1 (PENDING); removed",
        )
    ]
    reconcile(site)
    assert len(_strays(host_store)) == 1  # said once: the container is gone


def test_a_container_of_no_stored_job_is_removed_and_a_vanished_one_restarted(
    host_store: db.Store, site: Site
) -> None:
    orphan, kept = _submit(host_store), _submit(host_store)
    _start_unrecorded(site, orphan, "h1", 0)
    with transaction(host_store.engine, write=True) as s:
        s.delete(s.get(JobRow, orphan))
        gpu = s.scalar(
            select(GpuRow.id).join(NodeRow).where(NodeRow.name == "h2", GpuRow.index == 0)
        )
        s.add(AllocationRow(job_id=kept, gpu_id=gpu, mode="exclusive", since=1.0))
        row = s.get(JobRow, kept)
        assert row is not None
        row.state = "RUNNING"  # recorded as running, but no container was ever started

    report = reconcile(site)

    assert report.removed == [_name(site, orphan, 0, "h1")] and report.restarted == [kept]
    assert _containers("h1") == []
    assert _strays(host_store) == [
        (
            None,
            "h1",
            f"container {_name(site, orphan, 0, 'h1')} on h1 still running, "
            "of no job in the store; removed",
        )
    ]
    assert _containers("h2") == [f"{_name(site, kept, 1, 'h2')} running"]
    with transaction(host_store.engine, write=False) as s:
        row = s.get(JobRow, kept)
        assert row is not None and row.state == "RUNNING" and row.attempt == 1
    assert _held(host_store, kept) == [("h2", 0, "exclusive")]


def test_another_stores_containers_on_the_same_hosts_are_never_touched(
    hosts: dict[str, Any], host_store: db.Store, site: Site, tmp_path: Path
) -> None:
    """Two stores reaching one host: each reconciles only its own containers."""
    other = store_of_hosts(hosts, str(tmp_path / "other.db"))
    with Pool() as pool:
        theirs = Site(other, pool, tmp_path / "other-mirror")
        assert theirs.store_id != site.store_id
        their_job = _submit(other)  # the same job id as ours: ids are per store
        our_job = _submit(host_store)
        assert their_job == our_job
        _start_unrecorded(theirs, their_job, "h1", 0)
        _start_unrecorded(site, our_job, "h1", 1)
        report = reconcile(site)  # ours is adopted, theirs is none of our business
        assert report.adopted == [our_job] and report.removed == []
        assert reconcile(site).removed == []  # level-triggered
        report = reconcile(theirs)
        assert report.adopted == [their_job] and report.removed == []
        theirs.close()
    assert _containers("h1") == sorted(
        [
            f"{_name(site, our_job, 0, 'h1')} running",
            f"{container_name(theirs.store_id, their_job, 0, 'h1')} running",
        ]
    )


def test_nodes_sharing_one_engine_each_see_and_reconcile_only_their_own_containers(
    hosts: dict[str, Any], host_store: db.Store, site: Site, tmp_path: Path
) -> None:
    """Issue 26: h1b is a second node on h1's host and engine (the scale harness shares engines)."""
    h1 = next(h for h in testhosts.env()["hosts"] if h["name"] == "h1")
    nodes.add_node(
        host_store,
        "h1b",
        h1["host"],
        port=h1["port"],
        ssh_user=h1["user"],
        key_path=hosts["key"],
        emulate_gpus="2xV100-16GB",
        host_key_fingerprint=h1["fingerprint"],
        work_dir=str(tmp_path / "h1b-work"),
        docker_host=h1["docker_host"],
    )
    ours, neighbours = _submit(host_store), _submit(host_store)
    _start_unrecorded(site, ours, "h1", 0)
    _start_unrecorded(site, neighbours, "h1b", 0)
    assert _containers("h1") == sorted(  # one engine, both nodes' containers
        [f"{_name(site, ours, 0, 'h1')} running", f"{_name(site, neighbours, 0, 'h1b')} running"]
    )
    with transaction(host_store.engine, write=False) as s:
        rows = {r.name: r for r in s.scalars(select(NodeRow))}
    assert [c.job_id for c in site.engine(rows["h1"]).owned()] == [ours]
    assert [c.job_id for c in site.engine(rows["h1b"]).owned()] == [neighbours]
    report = reconcile(site)  # each adopted on its own node, neither taken for an orphan
    assert sorted(report.adopted) == sorted([ours, neighbours]) and report.removed == []
    assert _held(host_store, ours) == [("h1", 0, "exclusive")]
    assert _held(host_store, neighbours) == [("h1b", 0, "exclusive")]
