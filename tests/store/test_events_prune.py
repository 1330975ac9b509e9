"""The event log's retention: ``gctl events prune`` and the site's ``[events] keep_days``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from clikit import ok, run
from sqlalchemy import select

from gctl import config
from gctl.services import db, events
from gctl.store.engine import transaction
from gctl.store.models import EventRow

DAY = 86400.0


def _events(store: db.Store, ages_days: list[float]) -> None:
    at = time.time()
    with transaction(store.engine, write=True) as s:
        for age in ages_days:
            s.add(
                EventRow(at=at - age * DAY, user="u", kind="job.submit", message=f"{age}d", data={})
            )


def test_prune_deletes_only_what_is_older_on_both_backends(store: db.Store) -> None:
    _events(store, [200, 120, 91, 10, 0])
    assert events.prune(store, time.time() - 90 * DAY) == 3
    with transaction(store.engine, write=False) as s:
        left = list(s.scalars(select(EventRow.message).order_by(EventRow.id)))
    assert left == ["10d", "0d"]
    assert events.prune(store, time.time() - 90 * DAY) == 0


def test_events_prune_on_the_command_line(
    store: db.Store, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCTL_DB", db_url)
    _events(store, [40, 5])
    assert ok("events", "prune", "--older-than", "30d", "--json") == '{"deleted":1}\n'
    assert [e["message"] for e in json.loads(ok("events", "--json"))["events"]] == ["5d"]
    code, out, err = run("events", "prune", "--older-than", "someday")
    assert (code, out) == (2, "") and "--older-than 'someday': not a time" in err
    code, _, err = run("events", "prune")
    assert code == 2 and "Missing option '--older-than'" in err


def test_the_site_sets_how_long_events_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "gctl.toml"
    monkeypatch.setenv("GCTL_CONFIG", str(cfg))  # the site's policy: tests run as root
    assert config.site_policy().events_keep_days == config.EVENTS_KEEP_DAYS == 90
    cfg.write_text("[events]\nkeep_days = 0\n")
    assert config.site_policy().events_keep_days == 0
    cfg.write_text("[events]\nkeep_days = -1\n")
    with pytest.raises(config.ConfigError, match="keep_days must be 0"):
        config.site_policy()
    cfg.write_text("[events]\nkeep = 3\n")
    with pytest.raises(config.ConfigError, match="unknown key 'keep'"):
        config.site_policy()
