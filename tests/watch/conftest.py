"""Fixtures of the dashboard tests: a busy store with pinned times, and the app over it."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from watchkit import T, busy_store, responding, shown_as

from gctl.services import db
from gctl.watch.app import WatchApp


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


def make_app(store: db.Store, *, readonly: bool = False) -> WatchApp:
    """The dashboard over ``store`` with a frozen clock and no timed refresh during a test."""
    return WatchApp(store, interval=3600.0, readonly=readonly, clock=lambda: T)


def pilot_test(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async pilot test in its own event loop (no pytest async plugin needed)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run
