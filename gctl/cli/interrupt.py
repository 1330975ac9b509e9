"""Ctrl-C as a request to stop, for commands that loop until interrupted (``--follow``).

A ``KeyboardInterrupt`` raised wherever the code happens to be can land
inside SQLAlchemy's connection pool, or paramiko's or urllib3's, while it
holds a lock, and the process then hangs instead of ending. A loop that
polls the store instead asks :func:`stop_requested` for an event that
SIGINT and SIGTERM set, and checks it between rounds; a blocking read
(``gctl logs -f``) runs on a thread of its own (:func:`read_until_stopped`)
while the main thread waits for that event.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType
from typing import TypeVar

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
T = TypeVar("T")


@contextmanager
def stop_requested() -> Iterator[threading.Event]:
    """An event set by Ctrl-C or SIGTERM while the block runs; the old handlers come back after."""
    stop = threading.Event()

    def _set(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    old = {sig: signal.signal(sig, _set) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def read_until_stopped(opened: AbstractContextManager[T], read: Callable[[T], None]) -> T:
    """``read`` what ``opened`` gives, on a thread, until it ends or Ctrl-C/SIGTERM asks to stop.

    Then ``opened`` is closed, which ends a read still blocked, and the
    thread is given a moment to finish. An error ``read`` ended with is
    raised here, unless a stop was asked first. Returns what ``opened`` gave.
    """
    failed: list[BaseException] = []
    ended = threading.Event()
    with stop_requested() as stop, opened as source:

        def run() -> None:
            try:
                read(source)
            except BaseException as exc:  # raised in the main thread below
                failed.append(exc)
            finally:
                ended.set()
                stop.set()

        worker = threading.Thread(target=run, daemon=True, name="gctl-read")
        worker.start()
        stop.wait()
        asked = not ended.is_set()
    worker.join(5.0)
    if failed and not asked:
        raise failed[0]
    return source
