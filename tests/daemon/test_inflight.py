"""Host work in flight: busy jobs, GPUs and nodes until it ends; outcomes recorded on collect."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

from gctl.daemon.inflight import Inflight


def test_work_keeps_its_jobs_gpus_and_nodes_busy_until_collected() -> None:
    inflight = Inflight(workers=2)
    release = threading.Event()
    recorded: list[Any] = []
    try:
        before = inflight.seq("n1")
        inflight.submit(
            "a move",
            lambda: release.wait(10) and "moved",
            jobs=[7],
            gpus=[("n1", 0), ("n2", 3)],
            done=lambda f: recorded.append(f.result()),
        )
        assert inflight.seq("n1") == before + 1  # an action on it began
        assert inflight.busy_jobs == {7}
        assert inflight.busy_gpus == {("n1", 0), ("n2", 3)}
        assert inflight.busy_nodes == {"n1", "n2"}
        assert inflight.collect() == [] and recorded == []
        release.set()
        deadline = time.monotonic() + 10
        while not inflight.collect():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert recorded == ["moved"]
        assert inflight.seq("n1") == before + 2  # and ended
        assert inflight.busy_jobs == set() and inflight.busy_gpus == set()
    finally:
        inflight.close()


def test_a_failed_record_does_not_stop_the_others() -> None:
    inflight = Inflight()
    recorded: list[str] = []

    def bad(_: Future[Any]) -> None:
        raise RuntimeError("recording broke")

    try:
        inflight.submit("one", lambda: None, done=bad)
        inflight.submit("two", lambda: None, done=lambda f: recorded.append("two"))
        inflight.wait(10)
        assert len(inflight.collect()) == 2 and recorded == ["two"]
    finally:
        inflight.close()


def test_acting_counts_as_an_action_on_its_nodes() -> None:
    inflight = Inflight()
    before = inflight.seq("n1")
    with inflight.acting(["n1"]):
        assert inflight.seq("n1") == before + 1
    assert inflight.seq("n1") == before + 2 and inflight.seq("n2") == 0
    inflight.close()


def test_tracked_work_records_its_parts_as_they_end_and_its_end_seen_is_an_action() -> None:
    inflight = Inflight()
    future: Future[str] = Future()
    parts: list[str] = []
    ended: list[str] = []
    try:
        inflight.track(
            "two starts",
            future,
            jobs=[1, 2],
            nodes=["n1"],
            done=lambda f: ended.append(f.result()),
            progress=lambda: parts.append("part"),
        )
        before = inflight.seq("n1")  # a look may begin now, while the starts run
        assert inflight.collect() == [] and parts == ["part"] and ended == []
        assert inflight.busy_jobs == {1, 2} and inflight.seq("n1") == before
        future.set_result("both")
        assert len(inflight.collect()) == 1 and ended == ["both"] and parts == ["part"]
        # the look begun while they ran predates them: it is not trusted
        assert inflight.seq("n1") == before + 1 and inflight.busy_nodes == set()
    finally:
        inflight.close()
