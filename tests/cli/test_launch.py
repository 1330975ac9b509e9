"""The installed ``gctl`` console script and how it starts."""

from __future__ import annotations

import gc
import json
import os
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


QUEUE_MODULES = """
import json, sys
from gctl.cli.main import main
sys.argv = ["gctl", "queue", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [[], ["--json"]])
def test_queue_of_a_sqlite_store_loads_neither_sqlalchemy_nor_rich(
    tmp_path: Path, args: list[str]
) -> None:
    """Each costs start-up time that ``gctl queue`` (100,000 jobs within a second) cannot spare."""
    env = {**os.environ, "GCTL_DB": str(tmp_path / "gctl.db"), "GCTL_CONFIG": str(tmp_path / "c")}
    script = Path(sys.executable).with_name("gctl")
    subprocess.run([str(script), "init"], env=env, check=True, capture_output=True)
    out = subprocess.run(
        [sys.executable, "-c", QUEUE_MODULES, *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    loaded = set(json.loads(out.stderr))
    assert "gctl.services.queue" in loaded
    assert not {m for m in loaded if m.startswith(("sqlalchemy", "rich", "gctl.store.models"))}
