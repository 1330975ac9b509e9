"""The scheduler core and the simulator stay pure: importing them pulls in no I/O layer."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("sqlalchemy", "paramiko", "docker", "textual", "typer", "rich")
"""Store, host and UI libraries that must never load with the core."""

CODE = """
import json, sys
import {module}
{exercise}
print(json.dumps(sorted(m for m in sys.modules)))
"""

CORE_EXERCISE = """
from gctl.core.model import Cluster, JobSpec
from gctl.core.policy import load_policy
from gctl.core.state import ClusterState
from gctl.sim.cluster_spec import parse_cluster
"""


def _modules_after_import(module: str, exercise: str = "") -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", CODE.format(module=module, exercise=exercise)],
        check=True,
        capture_output=True,
        text=True,
    )
    return set(json.loads(out.stdout))


def _heavy(mods: set[str]) -> set[str]:
    return {m for m in mods if m.split(".")[0] in HEAVY}


@pytest.mark.parametrize(
    "module",
    [
        "gctl.core",
        "gctl.core.state",
        "gctl.core.policies.gandiva",
        "gctl.core.policies.fifo",
        "gctl.core.policy",
    ],
)
def test_core_imports_no_io_layer(module: str) -> None:
    mods = _modules_after_import(module)
    assert module in mods
    assert _heavy(mods) == set()


@pytest.mark.parametrize(
    "module",
    ["gctl.sim", "gctl.sim.engine", "gctl.sim.runner", "gctl.sim.traces", "gctl.sim.perf"],
)
def test_sim_imports_no_store_host_or_ui_layer(module: str) -> None:
    mods = _modules_after_import(module)
    assert module in mods
    assert _heavy(mods) == set()
    assert not {m for m in mods if m.startswith(("gctl.store", "gctl.hosts", "gctl.cli"))}


def test_loading_builtin_policies_stays_pure() -> None:
    mods = _modules_after_import(
        "gctl.sim.runner",
        CORE_EXERCISE + "load_policy('gandiva'); load_policy('fifo'); parse_cluster('2x8')",
    )
    assert _heavy(mods) == set()


def test_the_check_catches_an_impure_import() -> None:
    """The detector itself works: importing the CLI and the store loads typer and SQLAlchemy."""
    mods = _modules_after_import("gctl.cli.main", "import gctl.services.db")
    assert {"typer", "sqlalchemy"} <= {m.split(".")[0] for m in mods}
