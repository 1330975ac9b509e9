"""The daemon's /metrics over HTTP, on both backends: every scrape shows the store as it is now."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from storekit import node, on_gpus, req

from gctl.core.policy import load_policy
from gctl.daemon.loop import Daemon, DaemonConfig
from gctl.daemon.metrics import GPU_STATES, DaemonMetrics, MetricsServer, parse_address, serve
from gctl.services import db, jobs, nodes
from gctl.store.engine import transaction
from gctl.store.models import NodeRow

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(server: MetricsServer) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as r:
        assert r.status == 200
        text = r.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(k)[label]: v for (n, k), v in samples.items() if n == name}


@pytest.fixture
def served(store: db.Store) -> Iterator[tuple[DaemonMetrics, MetricsServer]]:
    metrics = DaemonMetrics(store)
    server = serve("127.0.0.1:0", metrics)
    try:
        yield metrics, server
    finally:
        server.close()


def test_scrapes_follow_the_store(
    store: db.Store, served: tuple[DaemonMetrics, MetricsServer]
) -> None:
    _, server = served
    empty = scrape(server)
    assert value(empty, "gctl_store_up") == 1
    assert by_label(empty, "gctl_gpus", "state") == dict.fromkeys(GPU_STATES, 0)
    assert value(empty, "gctl_pending_oldest_seconds") == 0
    assert set(by_label(empty, "gctl_nodes", "state").values()) == {0}
    assert by_label(empty, "gctl_jobs", "state")["PENDING"] == 0
    assert by_label(empty, "gctl_node_height", "node") == {}

    node(store, "a1")  # 4 GPUs
    node(store, "a2", "2xV100-16GB")
    big, packed, waiting = jobs.submit(store, [req(2), req(1), req(4)])
    on_gpus(store, big, "a1", (0, 1), since=100.0)
    on_gpus(store, packed, "a1", (1,), since=110.0, mode="packed")
    nodes.set_admin_state(store, "a2", "drain", "bad fan")

    now = scrape(server)
    gpus = by_label(now, "gctl_gpus", "state")
    assert gpus == {"idle": 2, "allocated": 1, "shared": 1, "unavailable": 2}  # a2 is drained
    assert 0 <= value(now, "gctl_pending_oldest_seconds") < 60
    assert by_label(now, "gctl_node_height", "node") == {"a1": 0.75, "a2": 0.0}
    assert by_label(now, "gctl_node_up", "node") == {"a1": 0, "a2": 0}  # never answered
    assert by_label(now, "gctl_node_last_seen_seconds", "node") == {}
    with transaction(store.engine, write=True) as s:  # a1 answers a heartbeat
        a1 = s.scalar(select(NodeRow).where(NodeRow.name == "a1"))
        assert a1 is not None
        a1.last_seen, a1.last_error = time.time(), None
    seen = scrape(server)
    assert by_label(seen, "gctl_node_up", "node") == {"a1": 1, "a2": 0}
    assert time.time() - value(seen, "gctl_node_last_seen_seconds", node="a1") < 60
    states = by_label(now, "gctl_nodes", "state")
    assert states == {"idle": 0, "mix": 1, "alloc": 0, "drng": 0, "drain": 1, "down": 0}
    job_states = by_label(now, "gctl_jobs", "state")
    assert (job_states["RUNNING"], job_states["PENDING"]) == (2, 1)
    assert "FAILED" not in job_states  # finished jobs are endings, not a gauge that only grows
    assert set(by_label(now, "gctl_jobs_ended_total", "state").values()) == {0}
    # The same numbers as gctl node ls shows.
    assert [(v.name, v.state, v.height) for v in nodes.list_nodes(store)] == [
        ("a1", "mix", 0.75),
        ("a2", "drain", 0.0),
    ]

    jobs.act(store, waiting, "cancel")
    after = scrape(server)
    assert by_label(after, "gctl_jobs_ended_total", "state")["CANCELLED"] == 1
    assert by_label(after, "gctl_jobs", "state")["PENDING"] == 0
    assert value(after, "gctl_pending_oldest_seconds") == 0


def test_decisions_are_counted_and_timed(served: tuple[DaemonMetrics, MetricsServer]) -> None:
    metrics, server = served
    metrics.decided("place", 0.2)
    metrics.decided("place", 0.02)
    metrics.decided("migrate", 42.0)
    got = scrape(server)
    assert by_label(got, "gctl_decisions_total", "kind") == {"place": 2, "migrate": 1}
    latency = "gctl_decision_latency_seconds"
    assert by_label(got, f"{latency}_count", "kind") == {"place": 2, "migrate": 1}
    assert value(got, f"{latency}_sum", kind="place") == pytest.approx(0.22)
    assert value(got, f"{latency}_bucket", kind="place", le="0.05") == 1
    assert value(got, f"{latency}_bucket", kind="place", le="0.25") == 2
    assert value(got, f"{latency}_bucket", kind="migrate", le="30.0") == 0
    assert value(got, f"{latency}_bucket", kind="migrate", le="60.0") == 1
    assert not [name for name, _ in got if name.endswith("_created")]  # no start-time twins
    assert ("gctl_daemon_last_tick_timestamp_seconds", frozenset()) in got
    metrics.ticked(0.3)
    ticked = scrape(server)
    assert time.time() - value(ticked, "gctl_daemon_last_tick_timestamp_seconds") < 60
    assert value(ticked, "gctl_daemon_tick_seconds_bucket", le="0.25") == 0
    assert value(ticked, "gctl_daemon_tick_seconds_bucket", le="0.5") == 1
    assert value(got, "process_resident_memory_bytes") > 0


def test_an_idle_daemons_skipped_passes_are_counted(
    store: db.Store, served: tuple[DaemonMetrics, MetricsServer], tmp_path: Path
) -> None:
    """A real daemon over an idle store (no node, no job) skips every pass after its first."""
    metrics, server = served
    cfg = DaemonConfig(state_dir=tmp_path / "state", tick=0.1, heartbeat_every=0.5)
    daemon = Daemon(store, load_policy("gandiva"), cfg, metrics)
    stop = threading.Event()
    thread = threading.Thread(target=daemon.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if value(scrape(server), "gctl_daemon_reactive_skipped_total") >= 5:
                break
            time.sleep(0.2)
        got = scrape(server)
    finally:
        stop.set()
        thread.join(30)
    assert value(got, "gctl_daemon_reactive_skipped_total") >= 5
    assert not thread.is_alive()


def test_a_store_that_cannot_be_read_is_reported_not_raised(tmp_path: Path) -> None:
    metrics = DaemonMetrics(db.connect(str(tmp_path / "never-initialised.db")))
    server = serve("127.0.0.1:0", metrics)
    try:
        got = scrape(server)
    finally:
        server.close()
    assert value(got, "gctl_store_up") == 0
    assert not any(name == "gctl_gpus" for name, _ in got)
    assert not any(name == "gctl_jobs_ended_total" for name, _ in got)


def test_addresses() -> None:
    assert parse_address("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert parse_address(":9400") == ("0.0.0.0", 9400)
    assert parse_address("[::1]:9400") == ("::1", 9400)
    assert parse_address("metrics.lan:0") == ("metrics.lan", 0)
    for bad in ("9400", "127.0.0.1", "127.0.0.1:", "host:http", ":70000", ":-1"):
        with pytest.raises(ValueError, match="expected HOST:PORT or :PORT"):
            parse_address(bad)


def test_serving_on_every_interface_and_a_taken_port(tmp_path: Path) -> None:
    metrics = DaemonMetrics(db.connect(str(tmp_path / "gctl.db")))
    server = serve(":0", metrics)
    try:
        assert server.port > 0
        assert "gctl_store_up" in {name for name, _ in scrape(server)}
        with pytest.raises(ValueError, match=f"cannot serve metrics on :{server.port}: ") as exc:
            serve(f":{server.port}", metrics)
        assert "\n" not in str(exc.value)
    finally:
        server.close()
    with socket.create_server(("127.0.0.1", server.port)):  # closing gave the port back
        pass
    with pytest.raises(ValueError, match=r"cannot serve metrics on no-such-host\.invalid:0"):
        serve("no-such-host.invalid:0", metrics)
