"""contrib/prometheus: the alerting rules are valid, fire when they should, and match /metrics.

``promtool`` (Debian's ``prometheus`` package, installed by ``scripts/test.sh``)
checks the rules, runs their unit tests (``gctl-alerts.test.yml``: each alert
silent before its condition has lasted its ``for`` and firing after), and
lints a real scrape of the daemon's ``/metrics``; every metric the rules use
is one the daemon exports.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from prometheus_client import generate_latest
from storekit import node, on_gpus, req

from gctl.daemon.metrics import DaemonMetrics
from gctl.services import db, jobs

RULES = Path(__file__).resolve().parents[2] / "contrib" / "prometheus"


def promtool(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run promtool in the rules' directory; fails the test when it is not installed."""
    found = shutil.which("promtool")
    assert found, "promtool is missing: apt-get install prometheus (scripts/test.sh does, as root)"
    return subprocess.run([found, *args], cwd=RULES, input=stdin, capture_output=True, timeout=60)


def test_the_rules_are_valid_and_their_unit_tests_pass() -> None:
    checked = promtool("check", "rules", "gctl-alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert b"SUCCESS: 5 rules found" in checked.stdout
    tested = promtool("test", "rules", "gctl-alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_broken_expectation_fails_promtool(tmp_path: Path) -> None:
    """The unit tests can fail: an alert expected too early is reported."""
    tests = (RULES / "gctl-alerts.test.yml").read_text()
    early = tests.replace("      - eval_time: 12m\n", "      - eval_time: 11m\n", 1)
    assert early != tests
    (tmp_path / "gctl-alerts.yml").write_text((RULES / "gctl-alerts.yml").read_text())
    (tmp_path / "early.test.yml").write_text(early)
    found = shutil.which("promtool")
    assert found
    ran = subprocess.run(
        [found, "test", "rules", "early.test.yml"], cwd=tmp_path, capture_output=True
    )
    assert ran.returncode != 0
    assert b"GctlJobStuckPending" in ran.stdout + ran.stderr


def test_the_metrics_pass_promtools_lint_and_cover_the_rules(store: db.Store) -> None:
    node(store, "a1")
    running, _ = jobs.submit(store, [req(2), req(1)])
    on_gpus(store, running, "a1", (0, 1), since=100.0)
    metrics = DaemonMetrics(store)
    metrics.ticked(0.2)
    metrics.decided("place", 0.1)
    text = generate_latest(metrics.registry)
    linted = promtool("check", "metrics", stdin=text)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    exported = set(re.findall(rb"^# TYPE (\S+) ", text, re.M))
    used = set(re.findall(r"\b(gctl_[a-z_]+)", (RULES / "gctl-alerts.yml").read_text()))
    assert used and {name.encode() for name in used} <= exported
