"""Operator actions from the dashboard, through the same services as the CLI.

Each returns an :class:`Outcome` with the service's own message; a
:class:`~gctl.services.errors.ServiceError` (or a store failure) becomes a
failed outcome to show as a notification, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gctl.services import jobs, nodes
from gctl.services.db import Store
from gctl.watch.data import FAILURES

JOB_ACTIONS = ("suspend", "resume", "migrate", "cancel")
"""Job actions the dashboard offers (``jobs.act`` verbs)."""
NODE_ACTIONS = ("drain", "undrain")
"""Node actions the dashboard offers (``nodes.set_admin_state`` verbs)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an action did, in the service's words."""

    ok: bool
    message: str


def _attempt(call: Callable[[], str]) -> Outcome:
    try:
        return Outcome(True, call())
    except FAILURES as exc:
        return Outcome(False, str(exc))


def job_action(store: Store, job_id: int, action: str, target: str | None = None) -> Outcome:
    """``suspend``, ``resume``, ``cancel`` or ``migrate`` (to ``target``) a job."""
    if action not in JOB_ACTIONS:
        return Outcome(False, f"unknown job action {action!r}")
    args = {"to": target} if action == "migrate" and target else {}
    return _attempt(lambda: jobs.act(store, job_id, action, **args).message)


def node_action(store: Store, name: str, action: str, reason: str | None) -> Outcome:
    """``drain`` (with a reason) or ``undrain`` a node."""
    if action not in NODE_ACTIONS:
        return Outcome(False, f"unknown node action {action!r}")

    def run() -> str:
        view = nodes.set_admin_state(store, name, action, reason)
        return f"node {view.name} {action}ed: now {view.state}"

    return _attempt(run)
