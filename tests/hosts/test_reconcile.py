"""Reconcile on the test hosts: the store and the containers really running are made to agree.

Each case sets up what a daemon killed between a host action and its record
leaves behind (a container the store does not know of, a container of a job
the store has no more, a running job whose container vanished), then runs
:func:`gctl.daemon.reconcile.reconcile` once, as the daemon does at start.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import testhosts
from sqlalchemy import select

from gctl.daemon.jobfiles import Mirror
from gctl.daemon.reconcile import reconcile
from gctl.daemon.site import Launch, Site
from gctl.hosts.ssh import Pool
from gctl.services import db, jobs, specs
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, EventRow, GpuRow, JobRow, NodeRow

pytestmark = pytest.mark.usefixtures("clean_hosts")

LONG = ["python3", "/opt/gctl/train.py", "--steps", "100000", "--step-time", "0.05"]


@pytest.fixture
def site(host_store: db.Store, tmp_path: Path) -> Iterator[Site]:
    with Pool() as pool:
        site = Site(host_store, pool, Mirror(tmp_path / "mirror"))
        yield site
        site.close()


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
    assert _containers("h2") == [f"gctl-{job}-0 running"]
    assert reconcile(site).adopted == []  # level-triggered: nothing left to do


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

    assert report.removed == [f"gctl-{orphan}-0"] and report.restarted == [kept]
    assert _containers("h1") == []
    assert _containers("h2") == [f"gctl-{kept}-1 running"]
    with transaction(host_store.engine, write=False) as s:
        row = s.get(JobRow, kept)
        assert row is not None and row.state == "RUNNING" and row.attempt == 1
    assert _held(host_store, kept) == [("h2", 0, "exclusive")]
