"""Threads that run tasks best first, where a task past its deadline gives its place up.

The daemon looks at its nodes on a bounded number of threads. A look at a
host that hangs blocks its thread until the SSH timeout, which Python
cannot cut short; with a plain pool, as many hanging hosts as threads stop
every other look, and the healthy nodes' watchdogs, whose leases those
looks renew, would kill their jobs. Here ``size`` threads take tasks from
one queue, best-ranked first; once the caller finds a task past its
deadline (:meth:`DeadlinePool.release`), a new thread takes its place, up
to ``limit`` threads in all. When the late task ends, its thread takes a
place again if one is free, else it ends.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class Task(Generic[T]):
    """A submitted task: its future, and when a thread began it."""

    future: Future[T] = field(default_factory=Future)
    began: float | None = None
    """Monotonic time a thread began it; None while it waits in the queue."""
    released: bool = False
    """Whether another thread has taken its place (it ran past its deadline)."""

    def late(self, mono: float, deadline: float) -> float | None:
        """Seconds it has run if that is more than ``deadline`` at monotonic ``mono``, else None."""
        if self.began is None or self.future.done() or mono - self.began <= deadline:
            return None
        return mono - self.began


class DeadlinePool:
    """``size`` threads running queued tasks best first, a late task's place given to a new one."""

    def __init__(self, size: int, limit: int, name: str) -> None:
        """No thread yet; at most ``size`` working within their deadline and ``limit`` in all."""
        if not 0 < size <= limit:
            raise ValueError(f"need 0 < size <= limit, got {size} and {limit}")
        self.size, self.limit, self.name = size, limit, name
        self._queue: list[tuple[Any, int, Task[Any], Callable[[], Any]]] = []
        self._order = itertools.count()
        self._names = itertools.count(1)
        self._lock = threading.Condition()
        self._placed = 0
        """Threads holding a place: all threads but those whose task was released."""
        self._threads = 0
        self._idle = 0
        self._closed = False

    @property
    def threads(self) -> int:
        """Threads alive now, the late tasks' included."""
        return self._threads

    def submit(self, rank: Any, fn: Callable[[], T]) -> Task[T]:
        """Queue ``fn``; tasks of lower ``rank`` run first, equal ranks in submission order."""
        task: Task[T] = Task()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.name}: pool closed")
            heapq.heappush(self._queue, (rank, next(self._order), task, fn))
            self._wake()
        return task

    def release(self, task: Task[Any]) -> None:
        """``task`` ran past its deadline: a new thread takes its place (within ``limit``)."""
        with self._lock:
            if task.released or task.began is None or task.future.done():
                return
            task.released = True
            self._placed -= 1
            if self._queue:
                self._wake()

    def close(self) -> None:
        """Cancel the queued tasks; idle threads end now, busy ones after their task."""
        with self._lock:
            self._closed = True
            for _, _, task, _ in self._queue:
                task.future.cancel()
            self._queue.clear()
            self._lock.notify_all()

    def _wake(self) -> None:
        """Start a thread for queued tasks no idle thread will take, while there is a place."""
        room = self._placed < self.size and self._threads < self.limit
        if room and len(self._queue) > self._idle:
            self._placed += 1
            self._threads += 1
            name = f"{self.name}-{next(self._names)}"
            threading.Thread(target=self._work, name=name, daemon=True).start()
        self._lock.notify()

    def _work(self) -> None:
        lock = self._lock
        while True:
            with lock:
                while not self._queue and not self._closed:
                    self._idle += 1
                    lock.wait()
                    self._idle -= 1
                if self._closed:
                    self._placed -= 1
                    self._threads -= 1
                    return
                _, _, task, fn = heapq.heappop(self._queue)
                task.began = time.monotonic()
            if task.future.set_running_or_notify_cancel():
                try:
                    result = fn()
                except BaseException as exc:  # handed to whoever reads the future
                    task.future.set_exception(exc)
                else:
                    task.future.set_result(result)
            with lock:
                if task.released:  # its place went to another thread: take one back, or end
                    if self._closed or self._placed >= self.size:
                        self._threads -= 1
                        return
                    self._placed += 1
