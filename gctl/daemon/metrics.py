"""The daemon's Prometheus ``/metrics``: the cluster as the store has it, and what the daemon did.

Each scrape reads the store once, in one read transaction, so every number
in it comes from the same moment: nodes by state and each node's height
(exactly as ``gctl node ls`` shows them), whether each node answers and
when it last did, GPUs by state, jobs by current state (the unfinished
ones: finished jobs only grow, so they are counted as endings since the
daemon started, a counter), and how long the oldest pending job has
waited. The daemon adds its own counts as it goes: ticks (when the last
ended, how long they take), decisions by kind and how long each took, and
for each opportunistic job beside a production job its rate limit (beta)
and the production job's slowdown against its rate alone. When the store
cannot be read, the scrape still answers, with ``gctl_store_up 0`` and
nothing else from the store. ``contrib/prometheus/gctl-alerts.yml`` has
alerting rules on these.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.exposition import start_http_server
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from gctl.services import nodes as node_views
from gctl.services.db import Store
from gctl.services.queue import FINISHED, STATE_CODES
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, JobRow, now

NODE_STATES = ("idle", "mix", "alloc", "drng", "drain", "down")
"""Every state ``gctl node ls`` shows (without the not-responding ``*``): each always exported."""
GPU_STATES = ("idle", "allocated", "shared", "unavailable")
"""``gctl_gpus{state}``: no job, node in service; one job; several; no job, node out of service."""
OUT_OF_SERVICE = frozenset({"down", "drain", "drng"})
"""Node states whose free GPUs take no new job."""
TICK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Seconds: a tick's budget is one second."""
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Seconds: from a quick placement to a checkpoint move of a large job."""


class StoreCollector(Collector):
    """Cluster gauges read from the store at every scrape."""

    def __init__(self, store: Store, since: float) -> None:
        self.store = store
        self.since = since
        """Jobs that ended from then on are counted in ``gctl_jobs_ended_total``."""

    def describe(self) -> Iterator[Metric]:
        """The families this collector exports (so registering it reads nothing)."""
        return iter(_families())

    def collect(self) -> Iterator[Metric]:
        """The families with their values, read in one read transaction."""
        families = _families()
        up, nodes, height, node_up, seen, gpus, jobs, ended, waited = families
        try:
            with transaction(self.store.engine, write=False) as s:
                views = node_views.views(s, node_views.named_rows(s, None), detail=False)
                shared = (
                    select(AllocationRow.gpu_id)
                    .group_by(AllocationRow.gpu_id)
                    .having(func.count() > 1)
                    .subquery()
                )
                over = s.scalar(select(func.count()).select_from(shared)) or 0
                unfinished = JobRow.state.not_in(FINISHED)
                counted = s.execute(
                    select(JobRow.state, func.count()).where(unfinished).group_by(JobRow.state)
                )
                job_counts = {state: n for state, n in counted}
                endings = s.execute(
                    select(JobRow.state, func.count())
                    .where(JobRow.end_time >= self.since, JobRow.state.in_(FINISHED))
                    .group_by(JobRow.state)
                )
                ended_counts = {state: n for state, n in endings}
                oldest = s.scalar(
                    select(func.min(JobRow.submit_time)).where(JobRow.state == "PENDING")
                )
        except SQLAlchemyError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        by_state = dict.fromkeys(NODE_STATES, 0)
        gpu_states = dict.fromkeys(GPU_STATES, 0)
        for v in views:
            by_state[v.state] = by_state.get(v.state, 0) + 1
            height.add_metric([v.name], v.height)
            node_up.add_metric([v.name], 1 if v.responding else 0)
            if v.last_seen is not None:
                seen.add_metric([v.name], v.last_seen)
            free = v.gpus_total - v.gpus_used
            gpu_states["unavailable" if v.state in OUT_OF_SERVICE else "idle"] += free
            gpu_states["allocated"] += v.gpus_used
        gpu_states["allocated"] -= over
        gpu_states["shared"] = over
        for state, n in by_state.items():
            nodes.add_metric([state], n)
        for state, n in gpu_states.items():
            gpus.add_metric([state], n)
        for state in STATE_CODES:
            if state in FINISHED:
                ended.add_metric([state], ended_counts.get(state, 0))
            else:
                jobs.add_metric([state], job_counts.get(state, 0))
        waited.add_metric([], 0.0 if oldest is None else max(0.0, now() - oldest))
        yield from families


def _families() -> tuple[GaugeMetricFamily | CounterMetricFamily, ...]:
    """Empty families of the store collector, in the order ``collect`` yields them."""
    return (
        GaugeMetricFamily("gctl_store_up", "1 when this scrape could read the store, else 0"),
        GaugeMetricFamily(
            "gctl_nodes", "Nodes by state, as gctl node ls shows it", labels=["state"]
        ),
        GaugeMetricFamily(
            "gctl_node_height",
            "GPUs held by jobs on the node (a shared GPU counts once per job) / GPUs of the node",
            labels=["node"],
        ),
        GaugeMetricFamily(
            "gctl_node_up",
            "1 while the node answers the daemon, 0 once it did not (node ls shows it with *)",
            labels=["node"],
        ),
        GaugeMetricFamily(
            "gctl_node_last_seen_seconds",
            "When the node last answered the daemon (UTC epoch seconds): alert on time() - it",
            labels=["node"],
        ),
        GaugeMetricFamily(
            "gctl_gpus",
            "GPUs by state: idle, allocated (one job), shared (more than one job),"
            " unavailable (no job, node down or drained)",
            labels=["state"],
        ),
        GaugeMetricFamily(
            "gctl_jobs", "Unfinished jobs by current state (squeue's states)", labels=["state"]
        ),
        CounterMetricFamily(
            "gctl_jobs_ended",
            "Jobs that ended since the daemon started, by final state",
            labels=["state"],
        ),
        GaugeMetricFamily(
            "gctl_pending_oldest_seconds",
            "How long the longest-waiting pending job has waited (0 when none waits)",
        ),
    )


class DaemonMetrics:
    """Everything the daemon's ``/metrics`` shows: its ``registry``, and the daemon's counts."""

    def __init__(self, store: Store) -> None:
        # Each series' *_created twin (its start time) is noise to every alerting rule, and
        # doubles what is scraped: the daemon exports none.
        disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped upstream
        self.registry = CollectorRegistry()
        self.registry.register(StoreCollector(store, since=now()))
        ProcessCollector(registry=self.registry)
        self._last_tick = Gauge(
            "gctl_daemon_last_tick_timestamp_seconds",
            "When the daemon last ended a tick (UTC epoch seconds): alert on time() - it",
            registry=self.registry,
        )
        self._tick = Histogram(
            "gctl_daemon_tick_seconds",
            "Seconds a tick of the daemon took (its budget: --tick)",
            buckets=TICK_BUCKETS,
            registry=self.registry,
        )
        self._decisions = Counter(
            "gctl_decisions",
            "Scheduling decisions carried out, by kind",
            ["kind"],
            registry=self.registry,
        )
        self._skipped = Counter(
            "gctl_daemon_reactive_skipped",
            "Ticks whose reactive pass was skipped: nobody waited and nothing it acts on changed",
            registry=self.registry,
        )
        self._latency = Histogram(
            "gctl_decision_latency_seconds",
            "Seconds a decision took, by kind",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

        pair = ["job", "production_job", "node"]
        self._beta = Gauge(
            "gctl_opportunistic_beta",
            "Fraction of time an opportunistic job beside a production job may run (TGS)",
            pair,
            registry=self.registry,
        )
        self._slowdown = Gauge(
            "gctl_production_slowdown",
            "1 - a production job's last rate beside an opportunistic job / its rate alone (R)",
            pair,
            registry=self.registry,
        )

    def ticked(self, seconds: float) -> None:
        """A tick ended now, having taken ``seconds``."""
        self._last_tick.set(now())
        self._tick.observe(seconds)

    def skipped(self) -> None:
        """Count one tick whose reactive pass was skipped (:mod:`gctl.daemon.steady`)."""
        self._skipped.inc()

    def decided(self, kind: str, seconds: float) -> None:
        """Count one decision of ``kind`` that took ``seconds``."""
        self._decisions.labels(kind=kind).inc()
        self._latency.labels(kind=kind).observe(seconds)

    def throttled(self, pairs: Iterable[tuple[int, int, str, float, float | None]]) -> None:
        """The rate control of each pair now: ``(job, production job, node, beta, slowdown)``.

        Pairs that ended are dropped; a slowdown is None until R is measured.
        """
        self._beta.clear()
        self._slowdown.clear()
        for job, host, node, beta, slowdown in pairs:
            labels = (str(job), str(host), node)
            self._beta.labels(*labels).set(beta)
            if slowdown is not None:
                self._slowdown.labels(*labels).set(slowdown)


@dataclass(frozen=True, slots=True)
class MetricsServer:
    """A running ``/metrics`` HTTP server (on a thread of its own)."""

    httpd: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        """The port it listens on (the one the system chose when asked for port 0)."""
        return int(self.httpd.server_address[1])

    def close(self) -> None:
        """Stop serving and release the port."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPV6]:PORT`` or ``:PORT`` (every interface) as (host, port)."""
    host, sep, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError(f"metrics address {address!r}: expected HOST:PORT or :PORT")
    return host or "0.0.0.0", int(port)


def serve(address: str, metrics: DaemonMetrics) -> MetricsServer:
    """Serve ``metrics`` at ``http://ADDRESS/metrics`` until ``close()``.

    ValueError, with a one-line message, when the address is not one or
    cannot be listened on (taken, not local, unknown name).
    """
    host, port = parse_address(address)
    try:
        httpd, thread = start_http_server(port, host, metrics.registry)
    except OSError as exc:
        raise ValueError(f"cannot serve metrics on {address}: {exc.strerror or exc}") from None
    return MetricsServer(httpd, thread)
