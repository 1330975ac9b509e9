"""Node heartbeats: nodes that stop answering are marked down, and come back by themselves.

The daemon's observations of the nodes (:mod:`gctl.daemon.watch`) are its
heartbeats. A node that answers has ``last_seen`` set; one whose observation
failed, or has not answered within its deadline, gets ``last_error`` (so
``gctl node ls`` shows it not responding, ``*``) at once, and once it has
not answered for the node timeout it is marked ``down`` with the reason
``not responding: ...`` (by ``gctl-daemon``, as ``sinfo -R`` shows it); the
next reactive pass requeues its jobs from their last checkpoint. A node the
daemon marked down returns to service when it answers again (Slurm's
``ReturnToService=1``), after reconcile has removed its stale containers. A
node an operator marked down stays down.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session

from gctl.daemon import DAEMON_USER
from gctl.daemon.site import Site
from gctl.daemon.watch import Observation
from gctl.services import events, nodes
from gctl.store.engine import transaction
from gctl.store.models import NodeRow

NOT_RESPONDING = "not responding"


class Heartbeat:
    """Tracks since when each node has failed to answer, across observations."""

    def __init__(self, timeout: float, answer_within: float) -> None:
        self.timeout = timeout
        self.answer_within = answer_within
        self._failing_since: dict[str, float] = {}
        self._failed_looks: dict[str, int] = {}

    def record(
        self, site: Site, seen: list[Observation], overdue: Mapping[str, float], at: float
    ) -> list[str]:
        """Store what the observations say and which nodes are overdue; nodes newly marked down."""
        answers = {o.node: o for o in seen}
        # A node fails from its first failed look, not from its last answer: the watchdog
        # there kills the jobs once the lease that answer renewed is node_timeout old, and
        # that must happen before they are requeued here (a heartbeat period's margin).
        for name, late in overdue.items():
            self._failing_since.setdefault(name, at - late)
        outages: dict[str, tuple[float, int]] = {}
        for o in seen:
            if o.error is None:
                since = self._failing_since.pop(o.node, None)
                looks = self._failed_looks.pop(o.node, 0)
                if since is not None:  # until now: a look that hung answers long after it began
                    outages[o.node] = (max(at, o.began) - since, looks)
            else:
                self._failing_since.setdefault(o.node, o.began)
                self._failed_looks[o.node] = self._failed_looks.get(o.node, 0) + 1
        if not answers and not self._failing_since:
            return []
        down: list[str] = []
        with transaction(site.store.engine, write=True) as s:
            names = set(answers) | set(self._failing_since)
            for row in s.scalars(select(NodeRow).where(NodeRow.name.in_(names))):
                got = answers.get(row.name)
                if got is not None and got.error is None:
                    self._answered(s, row, got, outages.get(row.name))
                    continue
                why = got.error if got is not None else f"no answer within {self.answer_within:g}s"
                if got is not None or row.last_error is None:
                    row.last_error = why
                since = self._failing_since[row.name]
                if row.admin_state != "down" and at - since >= self.timeout:
                    text = f"{NOT_RESPONDING} for {at - since:.0f}s: {row.last_error}"
                    nodes.mark(row, "down", text, DAEMON_USER, at)
                    message = f"node {row.name} down: {text}"
                    events.record(s, "node.down", message, node=row.name)
                    down.append(row.name)
        return down

    def _answered(
        self, s: Session, row: NodeRow, got: Observation, outage: tuple[float, int] | None
    ) -> None:
        """A node that answered: seen now, and back in service if the daemon had marked it down.

        ``outage``: how long it had not answered and how many looks failed
        meanwhile, when this daemon saw it start; the one event of its return
        says so, as ``node.down`` was the one event of its start.
        """
        row.last_seen, row.last_error = got.began, None
        if row.admin_state == "down" and _marked_by_daemon(row):
            nodes.mark(row, "up", None, DAEMON_USER, got.began)
            text, data = f"node {row.name} answers again", {}
            if outage is not None:
                seconds, looks = outage
                text += f" after {seconds:.0f}s not responding ({looks} failed looks)"
                data = {"seconds": round(seconds, 1), "failed_looks": looks}
            events.record(s, "node.up", text, node=row.name, data=data)


def _marked_by_daemon(row: NodeRow) -> bool:
    return row.reason_user == DAEMON_USER and (row.reason or "").startswith(NOT_RESPONDING)
