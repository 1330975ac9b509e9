"""What is installed under gctl's entry-point groups: policies, trainers, found by name.

Built-in policies and plugins are both entry points, so a plugin is
installed and chosen exactly like a built-in. Listing the names loads
nothing: shell completion offers policy names without importing the
scheduler.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

POLICY_GROUP = "gctl.policies"
"""The entry-point group of scheduling policies."""


def registered(group: str) -> list[str]:
    """Names registered in an entry-point group (policies, trainers), sorted."""
    return sorted(ep.name for ep in entry_points(group=group))


def registered_object(group: str, name: str) -> Any | None:
    """What an entry-point group registers under ``name``, loaded; None when nothing is."""
    matches = [ep for ep in entry_points(group=group) if ep.name == name]
    return matches[0].load() if matches else None
