"""Store health: the store a daemon opened is still the same file, sound, and answering."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from dbfaults import ruin
from storekit import req

from gctl.services import db, jobs
from gctl.store.health import StoreBroken, StoreHealth


def _sqlite_store(path: Path, jobs_in_it: int = 0) -> db.Store:
    store = db.connect(str(path))
    db.upgrade(store)
    if jobs_in_it:
        jobs.submit(store, [req(name=f"job-{i}-" + "x" * 60) for i in range(jobs_in_it)])
    return store


def test_a_sound_store_passes(store: db.Store) -> None:
    health = StoreHealth(store)
    health.check()
    jobs.submit(store, [req()])
    health.check()


def test_ruined_pages_are_reported_with_quick_checks_complaint(tmp_path: Path) -> None:
    path = tmp_path / "gctl.db"
    health = StoreHealth(_sqlite_store(path, jobs_in_it=600))
    health.check()
    ruin(path, 40)
    with pytest.raises(StoreBroken) as caught:
        health.check()
    message = str(caught.value)
    assert message.startswith(f"database file {path} is corrupt: ")
    assert "\n" not in message and "***" not in message


def test_a_ruined_header_is_reported_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "gctl.db"
    health = StoreHealth(_sqlite_store(path, jobs_in_it=600))
    ruin(path, 40, header=True)
    with pytest.raises(StoreBroken, match=r"is corrupt: file is not a database$"):
        health.check()


def test_a_deleted_file_is_reported_even_while_the_store_still_works(tmp_path: Path) -> None:
    path = tmp_path / "gctl.db"
    store = _sqlite_store(path)
    health = StoreHealth(store)
    with store.engine.connect() as conn:  # as the daemon's: it goes on using the deleted file
        os.unlink(path)
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM jobs").scalar() == 0
        with pytest.raises(StoreBroken) as caught:
            health.check()
    assert str(caught.value) == f"database file {path} was deleted while the daemon ran"
    assert not path.exists()  # the check did not make a new, empty database


def test_another_store_moved_over_the_file_is_reported_replaced(tmp_path: Path) -> None:
    path = tmp_path / "gctl.db"
    health = StoreHealth(_sqlite_store(path))
    other = tmp_path / "other.db"
    _sqlite_store(other).engine.dispose()
    shutil.move(other, path)
    with pytest.raises(StoreBroken) as caught:
        health.check()
    assert str(caught.value) == f"database file {path} was replaced while the daemon ran"


def test_a_missing_file_cannot_be_watched(tmp_path: Path) -> None:
    with pytest.raises(StoreBroken, match="does not exist"):
        StoreHealth(db.connect(str(tmp_path / "none.db")))


def test_a_server_that_does_not_answer_is_reported() -> None:
    url = "postgresql+psycopg://gctl@127.0.0.1:1/gctl?connect_timeout=2"
    health = StoreHealth(db.connect(url))
    with pytest.raises(StoreBroken) as caught:
        health.check()
    message = str(caught.value)
    assert message.startswith("database postgresql+psycopg://gctl@127.0.0.1:1/gctl")
    assert "does not answer: " in message and "\n" not in message
