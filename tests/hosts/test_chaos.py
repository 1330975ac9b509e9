"""Faults at random while the daemon runs jobs on the test hosts: no invariant breaks.

See :mod:`chaos` for the faults and the invariants. CI runs
``GCTL_CHAOS_FAULTS`` faults (default 30); ``bench/chaos.py`` runs more.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from chaos import run_chaos

from gctl.services import db

pytestmark = pytest.mark.usefixtures("clean_hosts")


def test_random_faults_break_no_invariant(
    host_store: db.Store, hosts: dict[str, Any], tmp_path: Path
) -> None:
    faults = int(os.environ.get("GCTL_CHAOS_FAULTS", "30"))
    seed = int(os.environ.get("GCTL_CHAOS_SEED", "0"))
    kinds = tuple(os.environ.get("GCTL_CHAOS_KINDS", "kill9,ssh,freeze,engine,rekey").split(","))
    run = run_chaos(host_store, hosts, tmp_path / "state", faults, seed=seed, kinds=kinds)
    print(run.summary())  # bench/chaos.py reads this line
    assert sum(run.faults.values()) >= faults
    assert run.violations == [], "\n".join(run.violations)
