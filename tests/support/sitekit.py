"""A daemon :class:`Site` that touches no host, for store-only tests and benchmarks.

The daemon's passes and :class:`~gctl.daemon.apply.Applier` run over it as
over real hosts, so what they record in the store can be checked (and timed)
without SSH or Docker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from gctl.core.model import GpuRef
from gctl.daemon.jobfiles import Report
from gctl.daemon.site import Launch, Site, Stopped
from gctl.hosts.engine import ContainerState, Engine
from gctl.store.models import NodeRow


class _NoEngine:
    """An engine that is never reached: getting one is fine, any call on it is an error."""

    def __init__(self, node: str) -> None:
        self.node = node

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"engine.{name} on {self.node} attempted; nothing here contacts a host")


class NoContainerSite(Site):
    """A :class:`Site` that carries out no host action: nothing is started, stopped or asked.

    Placing a job records it in the store as the daemon does, but no
    container starts. A freeze (time slicing's Suspend) finds no container
    to pause and only records the state; any call that would reach a host's
    engine is an error.
    """

    def engine(self, row: NodeRow) -> Engine:
        """A stand-in engine that refuses every call (see :class:`_NoEngine`)."""
        return cast(Engine, _NoEngine(row.name))

    def launch(self, job: Launch, refs: Iterable[GpuRef], nodes: Mapping[str, NodeRow]) -> None:
        """Start nothing (the store is still written by the caller)."""

    def containers(self, node: NodeRow, job_id: int, attempt: int | None) -> list[ContainerState]:
        """No containers anywhere."""
        return []

    def stop(self, nodes: Iterable[NodeRow], job_id: int, attempt: int | None) -> Stopped:
        """Nothing to stop."""
        return Stopped()

    def kill(self, nodes: Iterable[NodeRow], job_id: int) -> list[str]:
        """Nothing to kill."""
        return []

    def prepare(self, node: NodeRow, job_id: int, attempt: int) -> None:
        """No job directory to make."""

    def save(self, node: NodeRow, job_id: int, attempt: int) -> tuple[bytes, Report]:
        """No job directory to save: an empty copy that reports nothing."""
        return b"", Report(None, None, None)
