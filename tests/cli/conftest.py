"""What the CLI tests share: a SQLite store chosen as a user would choose it."""

from __future__ import annotations

from pathlib import Path

import pytest
from clikit import run


@pytest.fixture
def gdb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An initialised SQLite store chosen through $GCTL_DB, with user alice; jobs may bind /data."""
    db = tmp_path / "gctl.db"
    cfg = tmp_path / "gctl.toml"
    cfg.write_text('[security]\nmount_prefixes = ["/data"]\n')
    monkeypatch.setenv("GCTL_DB", str(db))
    monkeypatch.setenv("GCTL_CONFIG", str(cfg))
    monkeypatch.setenv("GCTL_USER", "alice")
    code, out, err = run("init")
    assert code == 0, err
    assert "created" in out
    return db
