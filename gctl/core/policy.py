"""The policy interface every scheduler implements, and lookup of registered policies.

Built-in policies and plugins are both found through the ``gctl.policies``
entry-point group, so a plugin is installed and chosen exactly like a built-in.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from gctl.core.decisions import Decision
from gctl.core.state import ClusterState
from gctl.registry import POLICY_GROUP, registered, registered_object


@runtime_checkable
class Policy(Protocol):
    """A scheduler: decides on events (reactive) and periodically (introspective).

    Both methods commit every decision to ``state`` (``state.apply``) as they
    take it and return the decisions in the order they were taken.
    """

    name: str

    def schedule(self, state: ClusterState, now: float) -> list[Decision]:
        """React to submissions, finishes and node changes already recorded in ``state``."""
        ...

    def introspect(self, state: ClusterState, now: float) -> list[Decision]:
        """Periodic pass over running jobs: time slicing, packing, migration, resizing."""
        ...

    def wants_introspection(self, state: ClusterState) -> bool:
        """Whether :meth:`introspect` could decide anything now (lets callers skip idle passes)."""
        ...


@runtime_checkable
class Waking(Protocol):
    """A policy that can say when its next introspective pass could decide anything.

    Optional: a simulator asks it to jump its clock over passes that would
    decide nothing; a policy without it is introspected every tick while it
    :meth:`~Policy.wants_introspection`.
    """

    def wake_at(self, state: ClusterState, now: float) -> float | None:
        """The earliest time (>= ``now``) a pass could decide anything, or None for never."""
        ...


@runtime_checkable
class Steady(Protocol):
    """A policy whose reactive pass acts only on waiting jobs and on change. Optional.

    While no job waits (queued, suspended or sharing GPUs as an
    opportunistic guest), :meth:`Policy.schedule` of a steady policy decides
    nothing on a cluster that has not changed since a pass that decided
    nothing, whatever the time: the daemon skips those passes, which at a
    thousand nodes cost most of its idle CPU. A policy without it, or whose
    :meth:`steady` is false, has its reactive pass run every tick.
    """

    def steady(self) -> bool:
        """Whether, with no job waiting, the reactive pass depends on the cluster alone."""
        ...


class UnknownPolicyError(LookupError):
    """No policy of that name is registered."""


class PolicyOptionError(ValueError):
    """An option the policy does not have, or a value it cannot take."""


def available_policies() -> list[str]:
    """Names of every registered policy, sorted."""
    return registered(POLICY_GROUP)


def load_policy(name: str, **options: Any) -> Policy:
    """Instantiate the policy registered under ``name`` with ``options``."""
    factory = registered_object(POLICY_GROUP, name)
    if factory is None:
        known = ", ".join(available_policies()) or "none"
        raise UnknownPolicyError(f"unknown policy {name!r} (registered: {known})")
    try:
        policy = factory(**options)
    except TypeError as exc:
        raise PolicyOptionError(f"policy {name!r}: {exc}") from None
    if not isinstance(policy, Policy):
        raise UnknownPolicyError(f"entry point {name!r} does not implement the policy interface")
    return policy
