"""A job stays in its sandbox, on the test hosts (issue 18): its user's ids, no way to root.

An operator submits for a real OS user (``$GCTL_USER``, :mod:`userkit`): the
job's container runs as that user's uid:gid, its files on the host are
theirs, it cannot gain privileges, and host paths outside the site's
allowed prefixes are refused at submit and again by the daemon.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from clikit import run
from daemonkit import Running, jobs_of, wait
from sqlalchemy import update
from userkit import ALICE, os_users

from gctl.hosts.engine import container_name
from gctl.services import db, jobs, specs
from gctl.store.engine import transaction
from gctl.store.identity import store_id
from gctl.store.models import JobRow

pytestmark = pytest.mark.usefixtures("clean_hosts")

WRITE_IDS = (
    "import os, time; open('/gctl/ids', 'w').write(f'{os.getuid()}:{os.getgid()}'); time.sleep(600)"
)


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, int]]:
    with os_users() as made:
        yield made


def _inspect(hosts: dict[str, Any], node: str, name: str) -> dict[str, Any]:
    host = next(h for h in hosts["hosts"] if h["name"] == node)
    out = subprocess.run(
        ["docker", "-H", host["docker_host"], "inspect", name],
        capture_output=True,
        text=True,
        check=True,
    )
    doc: dict[str, Any] = json.loads(out.stdout)[0]
    return doc


def test_a_job_runs_as_its_user_with_no_way_to_more(
    host_store: db.Store,
    hosts: dict[str, Any],
    users: dict[str, int],
    start_daemon: Callable[..., Running],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GCTL_USER", ALICE)  # root, an operator, submits for alice
    code, out, err = run(
        "submit", "--parsable", "--image", "gctl-test/train:1", "--", "python3", "-c", WRITE_IDS
    )
    assert code == 0, err
    job = int(out)
    start_daemon(host_store)
    wait("the job running", lambda: jobs_of(host_store)[job].state == "RUNNING", store=host_store)
    sid = store_id(host_store.engine)
    found: list[tuple[str, Any]] = []

    def ids_written() -> bool:
        for h in hosts["hosts"]:
            path = f"{h['work_dir']}/stores/{sid}/jobs/{job}/a0/ids"
            try:
                with open(path) as fh:
                    found[:] = [(h["name"], fh.read())]
            except FileNotFoundError:
                continue
            return bool(found[0][1])
        return False

    wait("the job's file", ids_written, store=host_store)
    node, ids = found[0]
    alice = users[ALICE]
    gid = subprocess.run(["id", "-g", ALICE], capture_output=True, text=True).stdout.strip()
    assert ids == f"{alice}:{gid}"  # `id -u` in the job: its user's
    host = next(h for h in hosts["hosts"] if h["name"] == node)
    job_dir = f"{host['work_dir']}/stores/{sid}/jobs/{job}/a0"
    argv = ["stat", "-c", "%u %a", job_dir, f"{job_dir}/ids"]
    stat = subprocess.run(argv, capture_output=True, text=True, check=True)
    (dir_owner, dir_mode), (file_owner, _) = (line.split() for line in stat.stdout.splitlines())
    assert (dir_owner, dir_mode, file_owner) == (str(alice), "700", str(alice))
    spec = _inspect(hosts, node, container_name(sid, job, 0, node))
    assert spec["Config"]["User"] == f"{alice}:{gid}"
    config = spec["HostConfig"]
    assert "no-new-privileges:true" in config["SecurityOpt"]
    assert config["Privileged"] is False and not config["CapAdd"]


@pytest.mark.parametrize(
    "mount",
    ["/:/host:ro", "/var/run/docker.sock:/var/run/docker.sock", "/etc:/e:ro", "/data:/data"],
)
def test_host_paths_outside_the_sites_prefixes_are_refused_at_submit(
    host_store: db.Store, mount: str
) -> None:
    code, out, err = run("submit", "--image", "gctl-test/train:1", "--mount", mount, "--", "true")
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert "--mount" in err


def test_the_daemon_refuses_a_stored_job_that_would_bind_the_host(
    host_store: db.Store, start_daemon: Callable[..., Running]
) -> None:
    """A job row written without gctl (a store reached directly): held, never started."""
    req = specs.build(image="gctl-test/train:1", command=["true"], gpus=1)
    job = jobs.submit(host_store, [req])[0]
    with transaction(host_store.engine, write=True) as s:
        s.execute(
            update(JobRow)
            .where(JobRow.id == job)
            .values(mounts=[{"src": "/", "dst": "/host", "read_only": False}])
        )
    start_daemon(host_store)
    wait("the job held", lambda: jobs_of(host_store)[job].held, store=host_store)
    row = jobs_of(host_store)[job]
    assert row.state == "PENDING" and row.start_time is None
    assert row.reason is not None and "refused" in row.reason and "--mount /" in row.reason
