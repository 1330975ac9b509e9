"""The built wheel carries the Alembic migrations, so an installed gctl can upgrade its database."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_wheel_contains_every_migration(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("gctl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    versions = REPO / "gctl" / "store" / "migrations" / "versions"
    expected = {f"gctl/store/migrations/versions/{p.name}" for p in versions.glob("*.py")}
    assert expected and expected <= names
    assert {"gctl/store/migrations/env.py", "gctl/store/migrations/script.py.mako"} <= names
