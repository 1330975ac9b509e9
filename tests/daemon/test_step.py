"""A daemon step's failure: logged, never fatal; a lost store says one line, a bug its traceback."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from gctl.daemon.loop import _step


def _unreachable_store(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'no-such-dir' / 'gctl.db'}")
    with engine.connect() as conn:
        conn.execute(text("select 1"))


def test_a_step_whose_store_went_away_logs_one_line_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gctl.daemon"):
        _step("ends", lambda: _unreachable_store(tmp_path))
    [record] = caplog.records
    assert record.exc_info is None
    assert record.getMessage() == "ends step failed: store: unable to open database file"


def test_any_other_failure_of_a_step_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> None:
        raise KeyError("job 7")

    with caplog.at_level(logging.WARNING, logger="gctl.daemon"):
        _step("intents", broken)
    [record] = caplog.records
    assert record.exc_info is not None and record.exc_info[0] is KeyError
    assert record.getMessage() == "intents step failed"
