"""A daemon step's failure: logged, never fatal; a lost store says one line, a bug its traceback.

And a slow tick says which of its steps took the time, and a new job wakes
the loop, after a rest as long as the last tick.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from gctl.daemon.inflight import Inflight
from gctl.daemon.loop import _arrivals, _SlowTicks, _Steps, _wait
from gctl.services import db, jobs, specs


def _unreachable_store(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'no-such-dir' / 'gctl.db'}")
    with engine.connect() as conn:
        conn.execute(text("select 1"))


def test_a_step_whose_store_went_away_logs_one_line_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gctl.daemon"):
        _Steps().run("ends", lambda: _unreachable_store(tmp_path))
    [record] = caplog.records
    assert record.exc_info is None
    assert record.getMessage() == "ends step failed: store: unable to open database file"


def test_any_other_failure_of_a_step_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> None:
        raise KeyError("job 7")

    with caplog.at_level(logging.WARNING, logger="gctl.daemon"):
        _Steps().run("intents", broken)
    [record] = caplog.records
    assert record.exc_info is not None and record.exc_info[0] is KeyError
    assert record.getMessage() == "intents step failed"


def test_a_slow_tick_names_its_slowest_steps_once_a_minute_at_most(
    caplog: pytest.LogCaptureFixture,
) -> None:
    steps = _Steps()
    steps.run("heartbeat", lambda: time.sleep(0.01))
    steps.run("reactive", lambda: time.sleep(0.2))
    steps.run("ends", lambda: time.sleep(0.05))
    steps.run("ends", lambda: time.sleep(0.05))  # a step run twice adds up
    steps.run("intents", lambda: None)
    slow = _SlowTicks(limit=1.0)
    with caplog.at_level(logging.WARNING, logger="gctl.daemon"):
        slow.note(0.9, steps)  # not slow
        slow.note(2.5, steps)
        slow.note(3.0, steps)  # slow too, but within the minute: counted, not logged
    [record] = caplog.records
    message = record.getMessage()
    assert message.startswith("slow tick: 2.50s (1 over 1s since the last such line)")
    named = message.split("slowest steps: ")[1].split(", ")
    assert [n.split()[0] for n in named] == ["reactive", "ends", "heartbeat"]
    assert slow.count == 1


def test_a_new_job_wakes_the_loop_after_a_rest_as_long_as_the_last_tick(tmp_path: Path) -> None:
    store = db.connect(str(tmp_path / "gctl.db"))
    db.upgrade(store)
    seen = _arrivals(store)
    jobs.submit(store, [specs.build(image="img", command=["true"], gpus=1)])
    stop = threading.Event()
    inflight = Inflight()
    began = time.monotonic()
    _wait(store, stop, began + 10.0, seen, inflight)  # a quick last tick: woken at once
    assert time.monotonic() - began < 1.0
    began = time.monotonic()
    _wait(store, stop, began + 10.0, seen, inflight, rest=1.5)  # a slow one: after the rest
    assert 1.5 <= time.monotonic() - began < 3.0
    threading.Timer(0.3, stop.set).start()  # a stop is never held back by the rest
    began = time.monotonic()
    _wait(store, stop, began + 10.0, seen, inflight, rest=5.0)
    assert time.monotonic() - began < 1.0
    inflight.close()


def test_host_work_that_ends_while_the_loop_waits_is_recorded_then(tmp_path: Path) -> None:
    store = db.connect(str(tmp_path / "gctl.db"))
    db.upgrade(store)
    inflight = Inflight()
    recorded: list[float] = []
    inflight.submit(
        "a start past its pass",
        lambda: time.sleep(0.3),
        done=lambda _: recorded.append(time.monotonic()),
    )
    began = time.monotonic()
    _wait(store, threading.Event(), began + 2.0, _arrivals(store), inflight)
    inflight.close()
    [at] = recorded
    assert at - began < 0.3 + 0.2  # when it ended, not at the next tick (2 s)
