"""Host work in flight: the daemon's tick hands it to threads and never waits for a host.

Every host action that may take long (a checkpoint move, an operator's
intent, a restart, container removals, placements still running when their
pass moved on) runs on a thread here. While it runs, its jobs, GPUs and
nodes are *busy*: decisions that touch them wait for a later pass, so
nothing is decided twice and no GPU is given to a job before the last one's
container has left it. When it ends, its ``done`` callback runs on the
tick's thread (:meth:`Inflight.collect`), which records the outcome; work
done in parts (a batch of container starts) records each part as it ends.

Each node also has an action count, raised when an action on it starts and
when the daemon sees it end (:meth:`Inflight.collect`, or leaving
:meth:`Inflight.acting`): an observation of the node's containers taken while the count changed may
predate what the daemon did there, and is not trusted to reconcile the
node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gctl.core.model import GpuRef

log = logging.getLogger("gctl.daemon")

WORKERS = 16
"""Threads carrying out background host work (per daemon)."""


@dataclass(eq=False)
class Work:
    """One piece of host work in flight and what it keeps busy.

    Work done in parts may narrow its ``jobs`` and ``gpus`` as parts end
    (its ``progress``, on the tick's thread): each is busy only until its own part has.
    """

    what: str
    future: Future[Any]
    jobs: frozenset[int]
    gpus: frozenset[GpuRef]
    nodes: frozenset[str]
    done: Callable[[Future[Any]], None] | None = None
    progress: Callable[[], None] | None = None
    """Run by :meth:`Inflight.collect` while the work runs: records the part of it done."""
    began: float = field(default_factory=time.monotonic)
    starting: dict[int, tuple[GpuRef, ...]] = field(default_factory=dict)
    """Jobs (row ids) whose start on these GPUs, alone, is still under way here."""


class Inflight:
    """The host work a daemon has in flight, on its own threads."""

    def __init__(self, workers: int = WORKERS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gctl-host")
        self._works: list[Work] = []
        self._lock = threading.Lock()
        self._seq: Counter[str] = Counter()
        self.not_responding: set[str] = set()
        """Nodes that do not answer: the watch's own set (:class:`gctl.daemon.watch.Watch`).

        Work waiting behind an action on one of them may be given up.
        """

    def submit(
        self,
        what: str,
        fn: Callable[[], Any],
        *,
        jobs: Iterable[int] = (),
        gpus: Iterable[GpuRef] = (),
        nodes: Iterable[str] = (),
        done: Callable[[Future[Any]], None] | None = None,
    ) -> Work:
        """Run ``fn`` on a thread; ``done`` gets its future on the tick's thread when it ends."""
        node_set = frozenset(nodes) | {n for n, _ in gpus}
        self._bump(node_set)
        return self.track(what, self._pool.submit(fn), jobs, gpus, node_set, done)

    def track(
        self,
        what: str,
        future: Future[Any],
        jobs: Iterable[int] = (),
        gpus: Iterable[GpuRef] = (),
        nodes: Iterable[str] = (),
        done: Callable[[Future[Any]], None] | None = None,
        progress: Callable[[], None] | None = None,
    ) -> Work:
        """Keep ``future`` (started elsewhere) as busy work until :meth:`collect` sees it end.

        Its nodes' action count is raised then: a look begun while it ran
        may predate what it did there.
        """
        node_set = frozenset(nodes) | {n for n, _ in gpus}
        work = Work(what, future, frozenset(jobs), frozenset(gpus), node_set, done, progress)
        with self._lock:
            self._works.append(work)
        return work

    @contextmanager
    def acting(self, nodes: Iterable[str]) -> Iterator[None]:
        """Around host actions the caller carries out itself on ``nodes`` (counted as actions)."""
        node_set = set(nodes)
        self._bump(node_set)
        try:
            yield
        finally:
            self._bump(node_set)

    def _bump(self, nodes: Iterable[str]) -> None:
        with self._lock:
            for node in nodes:
                self._seq[node] += 1

    def seq(self, node: str) -> int:
        """The node's action count (see the module docstring)."""
        with self._lock:
            return self._seq[node]

    def collect(self) -> list[Work]:
        """The work that ended since the last call, its ``done`` run here (errors logged).

        The ``progress`` of the work still running is run first.
        """
        with self._lock:
            ended = [w for w in self._works if w.future.done()]
            self._works = [w for w in self._works if not w.future.done()]
            going = [(w.what, w.progress) for w in self._works if w.progress is not None]
            for work in ended:  # no longer busy: a look begun before now is not trusted
                for node in work.nodes:
                    self._seq[node] += 1
        for what, progress in going:
            try:
                progress()
            except Exception:  # as a done's below
                log.exception("recording part of %s failed", what)
        for work in ended:
            if work.done is None:
                if work.future.exception() is not None:
                    log.warning("%s failed: %s", work.what, work.future.exception())
                continue
            try:
                work.done(work.future)
            except Exception:  # one outcome's record must not stop the others'
                log.exception("recording %s failed", work.what)
        return ended

    def pending(self) -> list[Work]:
        """The work still in flight."""
        with self._lock:
            return list(self._works)

    @property
    def busy_jobs(self) -> set[int]:
        """JobRow ids with work in flight."""
        return {j for w in self.pending() for j in w.jobs}

    @property
    def busy_gpus(self) -> set[GpuRef]:
        """GPUs some work in flight still acts on."""
        return {g for w in self.pending() for g in w.gpus}

    def starting(self) -> dict[int, tuple[GpuRef, ...]]:
        """The jobs being started alone on GPUs, with those GPUs (see :attr:`Work.starting`)."""
        return {j: g for w in self.pending() for j, g in w.starting.items()}

    @property
    def busy_nodes(self) -> set[str]:
        """Nodes some work in flight acts on."""
        return {n for w in self.pending() for n in w.nodes}

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the work in flight to end (at shutdown)."""
        deadline = time.monotonic() + timeout
        for work in self.pending():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                work.future.result(timeout=left)
            except Exception:  # reported by collect, or lost with the daemon
                continue

    def close(self) -> None:
        """Stop taking work; threads still running finish on their own."""
        self._pool.shutdown(wait=False, cancel_futures=True)
