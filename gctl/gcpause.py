"""Pausing the cyclic garbage collector while a block makes many short-lived, acyclic objects.

Loading the store, recording a batch of decisions and listing a big queue
each create hundreds of thousands of objects that hold no reference cycles;
the collector's passes over them while they are made would find nothing to
free and cost a large share of the time.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector off for the block; it resumes after if it was on.

    A store load creates ~10 objects per job; the collector's passes over
    them (and over the cluster state already built, which a pass keeps
    alive) are a third of the time of a big load.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
