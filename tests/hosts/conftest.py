"""Host fixtures: real sshd + dockerd test hosts on this machine, from scripts/testhosts.sh.

The hosts start once per test session (the first start installs Debian's
openssh-server and docker.io when missing and builds the job image) and stop
at the end. Each test gets a fresh SQLite store with the hosts recorded as
nodes with emulated GPUs, their host keys pinned from what the script read
off the hosts' key files.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import testhosts
from daemonkit import STORES, Running

from gctl.hosts.ssh import Pool
from gctl.services import db, nodes


@pytest.fixture(scope="session")
def hosts() -> Iterator[dict[str, Any]]:
    """The running test hosts, as ``testhosts.sh env`` describes them."""
    info = testhosts.start(2)
    try:
        yield info
    finally:
        testhosts.stop()


@pytest.fixture
def clean_hosts(hosts: dict[str, Any]) -> Iterator[None]:
    """After the test: every host thawed, its sshd and engine up, every job container removed.

    The hosts are shared by the session; daemon tests use this so the next
    test starts on empty hosts.
    """
    yield
    for h in testhosts.env()["hosts"]:
        if h["frozen"]:
            testhosts.thaw(h["name"])
        if not h["ssh_running"]:
            testhosts.ssh_start(h["name"])
        if not h["docker_running"]:
            testhosts.engine_start(h["name"])
        docker = ["docker", "-H", h["docker_host"]]
        found = subprocess.run(
            [*docker, "ps", "-aq", "--filter", "label=gctl.job"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        if found:
            subprocess.run([*docker, "rm", "-f", *found], capture_output=True, check=True)


def _store(hosts: dict[str, Any], tmp_path: Path, mp: pytest.MonkeyPatch, gpus: str) -> db.Store:
    """A store (also $GCTL_DB) with every test host as a node with emulated GPUs ``gpus``."""
    url = str(tmp_path / "gctl.db")
    mp.setenv("GCTL_DB", url)
    mp.setenv("GCTL_CONFIG", str(tmp_path / "gctl.toml"))
    return store_of_hosts(hosts, url, gpus)


def store_of_hosts(hosts: dict[str, Any], url: str, gpus: str = "2xV100-16GB") -> db.Store:
    """A new store at ``url`` with every test host as a node with emulated GPUs ``gpus``."""
    store = db.connect(url)
    db.upgrade(store)
    for h in testhosts.env()["hosts"]:  # fresh: a test may have rekeyed a host
        nodes.add_node(
            store,
            h["name"],
            h["host"],
            port=h["port"],
            ssh_user=h["user"],
            key_path=hosts["key"],
            emulate_gpus=gpus,
            host_key_fingerprint=h["fingerprint"],
            work_dir=h["work_dir"],
        )
    return store


@pytest.fixture
def host_store(hosts: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> db.Store:
    """A store (also $GCTL_DB) with every test host as a node: 2 emulated V100s each."""
    return _store(hosts, tmp_path, monkeypatch, "2xV100-16GB")


@pytest.fixture
def host_store4(hosts: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> db.Store:
    """Like ``host_store``, with 4 emulated V100s per node."""
    return _store(hosts, tmp_path, monkeypatch, "4xV100-16GB")


@pytest.fixture
def host_store_of(
    hosts: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], db.Store]:
    """Make a store like ``host_store`` with the given emulated GPUs per node (``5xV100-16GB``)."""
    return lambda gpus: _store(hosts, tmp_path, monkeypatch, gpus)


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    """Start a daemon on a store; stopped (and checked for errors) after the test."""
    started: list[Running] = []

    def start(store: db.Store, **config: Any) -> Running:
        STORES.append(store)
        started.append(Running(store, tmp_path, **config))
        return started[-1]

    yield start
    for d in started:
        d.close()


@pytest.fixture
def pool() -> Iterator[Pool]:
    """An SSH pool with short timeouts, closed after the test."""
    with Pool(connect_timeout=5.0, command_timeout=30.0, ssh_config=Path("/nonexistent")) as p:
        yield p
