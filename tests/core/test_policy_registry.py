"""Policies are found through the ``gctl.policies`` entry points, built-ins and plugins alike."""

from __future__ import annotations

import pytest

from gctl.core.policies.fifo import FifoPolicy
from gctl.core.policies.gandiva import GandivaConfig, GandivaPolicy
from gctl.core.policy import (
    Policy,
    PolicyOptionError,
    UnknownPolicyError,
    available_policies,
    load_policy,
)


def test_builtins_and_the_example_plugin_are_registered() -> None:
    names = available_policies()
    assert {"gandiva", "fifo", "backfill"} <= set(names)
    assert names == sorted(names)


def test_load_policy_returns_configured_instances() -> None:
    g = load_policy("gandiva", max_height=2.0, packing=False)
    assert isinstance(g, GandivaPolicy) and isinstance(g, Policy)
    assert g.config == GandivaConfig(max_height=2.0, packing=False)
    assert isinstance(load_policy("fifo"), FifoPolicy)


def test_plugin_policy_is_loaded_like_a_builtin() -> None:
    plugin = load_policy("backfill")
    assert isinstance(plugin, Policy)
    assert type(plugin).__module__.startswith("gctl_backfill")


def test_unknown_policy_names_the_registered_ones() -> None:
    with pytest.raises(UnknownPolicyError, match=r"unknown policy 'gandvia'.*fifo.*gandiva"):
        load_policy("gandvia")


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        ("gandiva", {"maxheight": 3}, "no option 'maxheight'"),
        ("gandiva", {"max_height": 0.5}, r"max_height=0.5: must be >= 1"),
        ("gandiva", {"quantum": 0}, r"quantum=0: must be > 0"),
        ("gandiva", {"packing": "maybe"}, "expected bool"),
        ("gandiva", {"max_packs_per_pass": 1.5}, "expected int"),
        ("gandiva", {"timeslicing": 1}, "expected bool"),
        ("fifo", {"max_height": 2}, "fifo takes no options"),
    ],
)
def test_bad_options_are_refused_by_name(name: str, options: dict[str, object], match: str) -> None:
    with pytest.raises(PolicyOptionError, match=match):
        load_policy(name, **options)


def test_integer_values_are_accepted_for_float_options() -> None:
    assert GandivaPolicy(quantum=30).config.quantum == 30
