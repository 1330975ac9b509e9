"""Hosts that hang never hold up the looks at the others (light hosts of scalehosts.sh).

Six light hosts, three of them frozen (SIGSTOP) once their connections are
up: a look at a frozen host blocks its thread until the SSH timeout. With
as many observer threads as frozen hosts, the healthy nodes must still be
looked at about every heartbeat once the frozen looks are taken as stuck,
their looks' deadlines counted from when they began (not from when they
were due), so that only the frozen nodes are reported late. Every node
holds a job, so a light look at it is due every tick: the heartbeats,
which renew the watchdogs' leases, must go first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scalekit import light_store, scalehosts

from gctl.daemon import watch as watch_module
from gctl.daemon.inflight import Inflight
from gctl.daemon.site import Site
from gctl.daemon.watch import JobHere, Watch
from gctl.hosts.ssh import Pool
from gctl.services import hostops
from gctl.store.engine import transaction

DIR = "/tmp/gctl-scalehosts-hung"
PORT = "2423"
FROZEN = ["s1", "s2", "s3"]


def _harness(*args: str) -> str:
    return scalehosts(DIR, PORT, *args)


@pytest.fixture
def light() -> Iterator[dict[str, Any]]:
    """Six light hosts on one engine; thawed and stopped after the test."""
    try:
        yield dict(json.loads(_harness("start", "6", "1").strip().splitlines()[-1]))
    finally:
        _harness("thaw", *FROZEN)
        _harness("stop")


def test_frozen_hosts_never_hold_up_the_looks_at_the_healthy_ones(
    light: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = light_store(light, str(tmp_path / "gctl.db"))
    monkeypatch.setattr(watch_module, "OBSERVERS", len(FROZEN))
    with Pool(connect_timeout=5.0, command_timeout=30.0, ssh_config=Path("/nonexistent")) as pool:
        site = Site(store, pool, tmp_path / "mirror")
        inflight = Inflight()
        watch = Watch(
            site,
            inflight,
            heartbeat_every=1.0,
            answer_within=1.0,
            lease_timeout=60.0,
            stuck_after=2.0,
        )
        try:
            with transaction(store.engine, write=False) as s:
                rows, gpus = hostops.read_nodes(s)
            answered: dict[str, int] = {}
            beats: dict[str, int] = {}
            late: set[str] = set()
            held = {name: [JobHere(1, 1, home=False)] for name in rows}

            def tick() -> None:
                watch.look(rows, gpus, held)
                for o in watch.collect():
                    assert o.error is None, o
                    answered[o.node] = answered.get(o.node, 0) + 1
                    beats[o.node] = beats.get(o.node, 0) + o.full
                late.update(watch.overdue())
                time.sleep(0.2)

            while len(answered) < len(rows):  # every connection up, every agent started
                tick()
            _harness("freeze", *FROZEN)
            answered.clear()
            beats.clear()
            end = time.monotonic() + 10.0
            while time.monotonic() < end:
                tick()
        finally:
            watch.close()
            inflight.close()
            site.close()
    healthy = {"s4", "s5", "s6"}
    # a heartbeat (1 s) at each healthy node, though each frozen one holds a thread
    assert {n: beats.get(n, 0) >= 6 for n in healthy} == dict.fromkeys(healthy, True), beats
    assert all(answered[n] > beats[n] for n in healthy), answered  # and light looks between
    assert late == set(FROZEN)
