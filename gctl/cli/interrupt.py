"""Ctrl-C as a request to stop, for commands that loop until interrupted (``--follow``).

A ``KeyboardInterrupt`` raised wherever the code happens to be can land
inside SQLAlchemy's connection pool while it holds a lock, and the process
then hangs at exit instead of ending. A loop that polls the store instead
asks :func:`stop_requested` for an event that SIGINT and SIGTERM set, and
checks it between rounds.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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
