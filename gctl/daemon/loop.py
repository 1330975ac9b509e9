"""``gctl daemon``: the reactive and introspective loops over the store and the hosts.

Every tick (default 1 s) the daemon renews its lease, carries out operator
intents, records exited jobs and runs the policy's reactive pass, so an
exit or a node change is acted on within about a second. Between ticks it
watches the store for new jobs and intents (:data:`WAKE_POLL`) and starts
the next tick at once when one arrives, so a submission or an operator's
request waits for no tick. On their own periods it samples the nodes (heartbeat, utilisation,
progress: default every 5 s), reconciles the hosts with the store (30 s),
and runs the policy's introspective pass (60 s): time slicing, packing,
migration, defragmentation, grow and shrink.

Stopping the daemon (SIGTERM, SIGINT) finishes the current step and gives
the lease back; jobs keep running on their hosts while no daemon runs, and
the next daemon adopts them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from gctl.core.policy import Policy
from gctl.daemon import dcgm, intents, lease, passes
from gctl.daemon.health import Heartbeat
from gctl.daemon.jobfiles import Mirror, mirror_dir
from gctl.daemon.metrics import DaemonMetrics
from gctl.daemon.reconcile import reconcile
from gctl.daemon.site import DEFAULT_GRACE, Site
from gctl.hosts.ssh import Pool
from gctl.services import telemetry
from gctl.services.db import Store
from gctl.store.engine import transaction
from gctl.store.models import IntentRow, JobRow, now

log = logging.getLogger("gctl.daemon")

Arrivals = tuple[int | None, int | None]
"""The newest job id and intent id in the store."""

WAKE_POLL = 0.05
"""Seconds between looks at the store for new jobs and intents while waiting for a tick."""


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """How often the daemon does what (seconds), and where it keeps its own files."""

    tick: float = 1.0
    introspect_every: float = 60.0
    heartbeat_every: float = 5.0
    reconcile_every: float = 30.0
    node_timeout: float = 60.0
    grace: float = DEFAULT_GRACE
    lease: float = lease.DEFAULT_LEASE
    state_dir: Path | None = None
    dcgm_dir: str | None = None

    def __post_init__(self) -> None:
        """Reject periods no loop can keep."""
        for name in ("tick", "introspect_every", "heartbeat_every", "reconcile_every"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be above 0")
        if self.node_timeout < self.heartbeat_every:
            raise ValueError("--node-timeout must be at least --heartbeat-every")

    @property
    def mirror_dir(self) -> Path:
        """Where the daemon keeps its copy of each job's checkpoint."""
        return mirror_dir(self.state_dir)


class Daemon:
    """One daemon over one store: call :meth:`run` until ``stop`` is set."""

    def __init__(
        self, store: Store, policy: Policy, config: DaemonConfig, metrics: DaemonMetrics
    ) -> None:
        self.store = store
        self.policy = policy
        self.config = config
        self.metrics = metrics
        self.heartbeat = Heartbeat(config.node_timeout)
        self.mirror = Mirror(config.mirror_dir)

    def run(self, stop: threading.Event, on_ready: Callable[[], None] | None = None) -> None:
        """Hold the lease and loop; returns when ``stop`` is set (lease given back)."""
        lease.acquire(self.store, lease=self.config.lease)
        cfg = self.config
        pool = Pool()
        site = Site(self.store, pool, self.mirror, cfg.grace)
        try:
            self._step("reconcile", lambda: reconcile(site))
            if on_ready is not None:
                on_ready()
            due = {"heartbeat": 0.0, "reconcile": now() + cfg.reconcile_every}
            due["introspect"] = now() + cfg.introspect_every
            while not stop.is_set():
                started = time.monotonic()
                if not lease.renew(self.store):
                    raise lease.LeaseHeld("the store lease was taken over by another daemon")
                seen = self._arrivals()
                self._tick(site, due)
                self._wait(stop, started + cfg.tick, seen)
        finally:
            site.close()
            pool.close()
            lease.release(self.store)

    def _tick(self, site: Site, due: dict[str, float]) -> None:
        cfg, at = self.config, now()
        if at >= due["heartbeat"]:
            due["heartbeat"] = at + cfg.heartbeat_every
            samples = telemetry.sample(self.store, pool=site.pool)
            self._step("heartbeat", lambda: self.heartbeat.record(site, samples, at))
            self._step("profile", lambda: passes.profile(site, samples, at))
            if cfg.dcgm_dir:
                self._step("dcgm", lambda: dcgm.sync(self.store, site.pool, str(cfg.dcgm_dir)))
        if at >= due["reconcile"]:
            due["reconcile"] = at + cfg.reconcile_every
            self._step("reconcile", lambda: reconcile(site))
        self._step("intents", lambda: intents.carry_out(site))
        self._step(
            "reactive", lambda: passes.reactive_pass(site, self.policy, now(), self.metrics.decided)
        )
        if at >= due["introspect"]:
            due["introspect"] = at + cfg.introspect_every
            self._step(
                "introspect",
                lambda: passes.introspective_pass(site, self.policy, now(), self.metrics.decided),
            )

    def _arrivals(self) -> Arrivals:
        """The newest job and intent ids: they change when work arrives from outside.

        The daemon itself never adds a job or an intent, so its own writes do
        not wake it.
        """
        with transaction(self.store.engine, write=False) as s:
            newest = s.execute(
                select(
                    select(func.max(JobRow.id)).scalar_subquery(),
                    select(func.max(IntentRow.id)).scalar_subquery(),
                )
            ).one()
        return newest[0], newest[1]

    def _wait(self, stop: threading.Event, until: float, seen: Arrivals) -> None:
        """Sleep until ``until`` (monotonic), ``stop``, or a new job or intent in the store."""
        while (left := until - time.monotonic()) > 0:
            if stop.wait(min(left, WAKE_POLL)):
                return
            try:
                if self._arrivals() != seen:
                    return
            except SQLAlchemyError:  # the store is away: the tick reports it
                return

    def _step(self, name: str, step: Callable[[], object]) -> None:
        """Run one step; a failure is logged and the loop goes on (the next tick retries)."""
        try:
            step()
        except Exception:  # the loop must outlive any one step; the traceback goes to the log
            log.exception("%s step failed", name)
