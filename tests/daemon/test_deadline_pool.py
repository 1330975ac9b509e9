"""The deadline pool: best-ranked tasks first, and a late task's place taken by a new thread."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError

import pytest

from gctl.daemon.deadline_pool import DeadlinePool, Task


def _wait_for(check: object, seconds: float = 5.0) -> None:
    end = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def _hang(pool: DeadlinePool, rank: int = 0) -> tuple[Task[str], threading.Event]:
    """A task that runs until its event is set; returned once a thread has begun it."""
    gate = threading.Event()
    task = pool.submit(rank, lambda: "hung" if gate.wait(10) else "timeout")
    _wait_for(lambda: task.began is not None)
    return task, gate


def test_queued_tasks_run_best_ranked_first_then_in_submission_order() -> None:
    pool = DeadlinePool(1, 4, "t")
    blocker, gate = _hang(pool)
    ran: list[str] = []
    tasks = [
        pool.submit(rank, lambda name=name: ran.append(name))
        for rank, name in [(3, "c"), (1, "a1"), (2, "b"), (1, "a2")]
    ]
    assert all(t.began is None for t in tasks)  # the one thread is busy
    gate.set()
    for t in tasks:
        t.future.result(5)
    assert ran == ["a1", "a2", "b", "c"]
    assert blocker.future.result() == "hung"
    pool.close()


def test_a_late_task_gives_its_place_to_a_new_thread_that_ends_with_it() -> None:
    pool = DeadlinePool(1, 2, "t")
    late, gate = _hang(pool)
    waiting = pool.submit(0, lambda: "ran")
    time.sleep(0.2)
    assert waiting.began is None and pool.threads == 1
    assert late.late(time.monotonic(), 0.05) is not None
    pool.release(late)
    assert waiting.future.result(5) == "ran"  # while the late one still hangs
    assert not late.future.done() and pool.threads == 2
    gate.set()
    assert late.future.result(5) == "hung"
    _wait_for(lambda: pool.threads == 1)  # the late task's thread ended with it
    assert pool.submit(0, lambda: "again").future.result(5) == "again"
    pool.close()


def test_no_more_threads_than_the_limit() -> None:
    pool = DeadlinePool(1, 1, "t")
    late, gate = _hang(pool)
    pool.release(late)
    waiting = pool.submit(0, lambda: "ran")
    time.sleep(0.2)
    assert waiting.began is None and pool.threads == 1
    gate.set()
    assert waiting.future.result(5) == "ran"  # the late thread ended; a place opened
    pool.close()


def test_a_task_within_its_deadline_is_not_late_and_errors_reach_the_future() -> None:
    pool = DeadlinePool(2, 2, "t")
    task, gate = _hang(pool)
    assert task.late(time.monotonic(), 60.0) is None
    gate.set()
    task.future.result(5)
    assert task.late(time.monotonic() + 120, 60.0) is None  # done: never late

    def boom() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        pool.submit(0, boom).future.result(5)
    pool.close()


def test_close_cancels_the_queued_tasks_and_refuses_new_ones() -> None:
    pool = DeadlinePool(1, 1, "t")
    busy, gate = _hang(pool)
    queued = pool.submit(0, lambda: "never")
    pool.close()
    with pytest.raises(CancelledError):
        queued.future.result(1)
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(0, lambda: None)
    gate.set()
    assert busy.future.result(5) == "hung"  # a running task ends on its own
    _wait_for(lambda: pool.threads == 0)


def test_sizes_are_checked() -> None:
    with pytest.raises(ValueError):
        DeadlinePool(0, 1, "t")
    with pytest.raises(ValueError):
        DeadlinePool(3, 2, "t")
