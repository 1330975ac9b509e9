"""Node heartbeats: nodes that stop answering are marked down, and come back by themselves.

Every heartbeat samples each node (its Docker engine over SSH). A node that
answers has ``last_seen`` set; one that has not answered for the node
timeout is marked ``down`` with the reason ``not responding: ...`` (by
``gctl-daemon``, as ``sinfo -R`` shows it), and the next reactive pass
requeues its jobs from their last checkpoint. A node the daemon marked down
returns to service when it answers again (Slurm's ``ReturnToService=1``);
reconcile then removes its stale containers. A node an operator marked down
stays down.
"""

from __future__ import annotations

from sqlalchemy import select

from gctl.daemon.site import Site
from gctl.services import events, nodes
from gctl.services.telemetry import NodeSample
from gctl.store.engine import transaction
from gctl.store.models import NodeRow

DAEMON_USER = "gctl-daemon"
"""Who the daemon's own node state changes are recorded as."""
NOT_RESPONDING = "not responding"


class Heartbeat:
    """Tracks how long each node has failed to answer, across samples."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._failing_since: dict[str, float] = {}

    def record(self, site: Site, samples: list[NodeSample], at: float) -> list[str]:
        """Store what the samples say; the nodes newly marked down."""
        down: list[str] = []
        with transaction(site.store.engine, write=True) as s:
            rows = {r.name: r for r in s.scalars(select(NodeRow))}
            for sample in samples:
                row = rows.get(sample.node)
                if row is None:
                    continue
                if sample.error is None:
                    self._failing_since.pop(row.name, None)
                    row.last_seen, row.last_error = at, None
                    if row.admin_state == "down" and _marked_by_daemon(row):
                        nodes.mark(row, "up", None, DAEMON_USER, at)
                        events.record(
                            s,
                            "node.up",
                            f"node {row.name} answers again",
                            node=row.name,
                            user=DAEMON_USER,
                        )
                    continue
                row.last_error = sample.error
                since = self._failing_since.setdefault(row.name, at)
                if row.admin_state != "down" and at - since >= self.timeout:
                    why = f"{NOT_RESPONDING} for {at - since:.0f}s: {sample.error}"
                    nodes.mark(row, "down", why, DAEMON_USER, at)
                    events.record(
                        s,
                        "node.down",
                        f"node {row.name} down: {why}",
                        node=row.name,
                        user=DAEMON_USER,
                    )
                    down.append(row.name)
        return down


def _marked_by_daemon(row: NodeRow) -> bool:
    return row.reason_user == DAEMON_USER and (row.reason or "").startswith(NOT_RESPONDING)
