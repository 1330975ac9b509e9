"""The installed ``gctl`` console script and how it starts."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

from gctl import __version__
from gctl.cli import launch


def test_console_script_runs_the_cli() -> None:
    script = Path(sys.executable).with_name("gctl")
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"gctl {__version__}"


def test_collector_runs_again_once_the_cli_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["gctl", "--version"])
    try:
        with pytest.raises(SystemExit) as done:
            launch.main()
        assert done.value.code in (0, None)
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.enable()
