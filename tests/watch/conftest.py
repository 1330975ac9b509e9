"""Fixtures of the dashboard tests: a busy store with pinned times, and the app over it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from watchkit import busy_store, responding, shown_as

from gctl.services import db


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Acting user alice, UTC times, no config file of the machine's."""
    monkeypatch.setenv("GCTL_USER", "alice")
    monkeypatch.setenv("GCTL_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def busy(tmp_path: Path) -> db.Store:
    """The busy cluster of :mod:`watchkit`; n1 to n4 answering."""
    store = busy_store(tmp_path / "gctl.db")
    responding(store, "n1", "n2", "n3", "n4")
    return shown_as(store)
