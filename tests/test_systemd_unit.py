"""contrib/systemd/gctl-daemon.service: what it says, and what systemd-analyze makes of it."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

UNIT = Path(__file__).resolve().parents[1] / "contrib" / "systemd" / "gctl-daemon.service"


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment, method-assign]  # keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def test_the_unit_runs_the_daemon_and_stops_it_cleanly() -> None:
    unit = _unit()
    assert unit.sections() == ["Unit", "Service", "Install"]
    assert "network-online.target" in unit["Unit"]["After"].split()
    assert "network-online.target" in unit["Unit"]["Wants"].split()
    service = unit["Service"]
    assert service["ExecStart"] == "/usr/local/bin/gctl daemon"
    assert (service["Restart"], service["KillSignal"]) == ("on-failure", "SIGTERM")
    assert service["KillMode"] == "mixed"  # SIGTERM to the daemon alone, then its leftovers
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_the_unit_is_hardened_but_can_read_the_users_ssh_keys() -> None:
    service = _unit()["Service"]
    assert service["User"] == "gctl"
    assert service["NoNewPrivileges"] == "yes"
    assert service["CapabilityBoundingSet"] == ""
    assert service["ProtectSystem"] == "strict"  # the whole tree read-only, homes included...
    assert service["StateDirectory"] == "gctl"  # ...but /var/lib/gctl, gctl's home
    assert "--home-dir /var/lib/gctl " in UNIT.read_text()  # (as the install note makes it)
    assert "ProtectHome" not in service  # ~/.ssh stays readable, whoever the user is
    assert "InaccessiblePaths" not in service
    assert set(service["RestrictAddressFamilies"].split()) >= {"AF_UNIX", "AF_INET", "AF_INET6"}


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:  # the assertions above are all there is to check then
        return
    # verify wants ExecStart's program to exist: this checkout's own gctl entry point.
    gctl = Path(sys.executable).parent / "gctl"
    assert gctl.is_file()
    copy = tmp_path / UNIT.name
    copy.write_text(UNIT.read_text().replace("/usr/local/bin/gctl", str(gctl)))
    res = subprocess.run(
        [analyze, "verify", "--man=no", "--generators=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
