"""Host actions carried out in parallel lanes, in order within each job.

A burst of placements on many nodes must not wait for one container start
after another: each start is a few round trips to a node's engine, and the
nodes (and a node's engine) serve several at once. The actions of one batch
are put into lanes: a job's actions all go, in order, into one lane (its
freeze never overtakes its start); the jobs on one set of nodes are spread
over :data:`PER_NODES` lanes; the lanes run side by side on at most
``workers`` threads. An action that fails takes the job's later actions in
the batch with it, unrun (skipped: decided again next pass). What is done
is handed back as it comes (:meth:`LaneRun.take`), so the caller can record
it while the rest goes on; the caller may leave the rest to run on
(:meth:`LaneRun.unfinished` is what it still keeps busy), and give up on
the lanes held by a host that hangs: what waits behind its action is then
dropped, what runs is finished and handed back later; lanes on hosts that
answer go on, however slowly.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from operator import itemgetter
from typing import Generic, TypeVar

from gctl.hosts.ssh import HostError

T = TypeVar("T")

PER_NODES = 4
"""Lanes per set of nodes: a node's engine starts up to this many containers at once."""


@dataclass(frozen=True, slots=True)
class Step(Generic[T]):
    """One action of a batch: ``item`` (what the caller records), its job, its nodes."""

    item: T
    job: Hashable
    nodes: tuple[str, ...]
    action: Callable[[], None] | None
    """The host action; ``None`` for a decision with nothing to do on a host."""


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """A step carried out (``error`` None), refused, or ``skipped`` (never begun: cancelled).

    ``began`` is when it began (epoch seconds).
    """

    item: T
    began: float
    error: HostError | None = None
    skipped: bool = False


def lanes(steps: Sequence[Step[T]]) -> list[list[tuple[int, Step[T]]]]:
    """The steps with a host action, with their positions, split into lanes, in order.

    See the module docstring for how steps are split.
    """
    lane_of_job: dict[Hashable, int] = {}
    turn: dict[tuple[str, ...], int] = {}
    by_key: dict[tuple[tuple[str, ...], int], int] = {}
    out: list[list[tuple[int, Step[T]]]] = []
    for position, step in enumerate(steps):
        if step.action is None:
            continue
        lane = lane_of_job.get(step.job)
        if lane is None:
            nodes = tuple(sorted(step.nodes))
            slot = turn.get(nodes, 0)
            turn[nodes] = (slot + 1) % PER_NODES
            lane = by_key.setdefault((nodes, slot), len(out))
            if lane == len(out):
                out.append([])
            lane_of_job[step.job] = lane
        out[lane].append((position, step))
    return out


class LaneRun(Generic[T]):
    """``steps`` being carried out in parallel lanes, on threads of their own.

    :meth:`take` hands back what has been done since the last call, in the
    order given (so a job's outcomes come in the order of its steps); steps
    without an action are done at once. :attr:`future` ends when every lane
    has; :meth:`give_up` drops the lanes not started yet and the steps
    waiting behind one on a host that hangs.
    Anything but a :class:`HostError` raised by an action is reported as
    that step's error, a ``HostError`` naming the bug.
    """

    def __init__(self, steps: Sequence[Step[T]], *, workers: int) -> None:
        began = time.time()
        self._finished: list[tuple[int, Done[T]]] = [
            (i, Done(s.item, began)) for i, s in enumerate(steps) if s.action is None
        ]
        self._taken = 0
        self._steps = list(steps)
        self._lock = threading.Lock()
        self._new = threading.Condition(self._lock)
        self._todo = deque(enumerate(lanes(steps)))
        self._open = {i for _, lane in self._todo for i, _ in lane}
        """Positions of the steps with a host action not ended (not begun or running)."""
        self._lane_of = {i: index for index, lane in self._todo for i, _ in lane}
        self._running: set[int] = set()
        self._stopped: set[int] = set()
        """Lanes given up: they begin no more steps."""
        self.future: Future[None] = Future()
        threads = max(1, min(workers, len(self._todo)))
        self._alive = threads if self._todo else 0
        if not self._alive:
            self.future.set_result(None)
        for _ in range(self._alive):
            threading.Thread(target=self._work, daemon=True, name="gctl-lane").start()

    def _finish(self, position: int, done: Done[T]) -> None:
        with self._new:
            self._open.discard(position)
            self._running.discard(position)
            self._finished.append((position, done))
            self._new.notify_all()

    def _run_lane(self, index: int, lane: list[tuple[int, Step[T]]]) -> None:
        failed: dict[Hashable, str] = {}
        for position, step in lane:
            began = time.time()
            with self._lock:
                stopped = index in self._stopped
                if not stopped:
                    self._running.add(position)
            if stopped:  # skipped by give_up, which has handed it back
                continue
            if step.job in failed:  # not carried out: an earlier action on the job failed
                self._finish(position, Done(step.item, began, skipped=True))
                continue
            assert step.action is not None
            try:
                step.action()
            except HostError as exc:
                failed[step.job] = str(exc)
                self._finish(position, Done(step.item, began, exc))
            except Exception as exc:  # a bug: reported, and the lane goes on
                error = HostError("-", f"internal error: {type(exc).__name__}: {exc}")
                failed[step.job] = str(error)
                self._finish(position, Done(step.item, began, error))
            else:
                self._finish(position, Done(step.item, began))

    def _work(self) -> None:
        """Take lanes until none is left (a deque's popleft is atomic)."""
        try:
            while True:
                try:
                    index, lane = self._todo.popleft()
                except IndexError:
                    return
                self._run_lane(index, lane)
        finally:
            with self._new:
                self._alive -= 1
                last = self._alive == 0
                self._new.notify_all()
            if last:
                self.future.set_result(None)

    @property
    def finished(self) -> bool:
        """Whether every step is done and handed back."""
        with self._lock:
            return self._alive == 0 and self._taken == len(self._finished)

    def take(self, wait: float = 0.0) -> list[Done[T]]:
        """What was done since the last call, waiting up to ``wait`` seconds for something new."""
        with self._new:
            if self._taken == len(self._finished) and self._alive:
                self._new.wait(wait)
            chunk = self._finished[self._taken :]
            self._taken = len(self._finished)
        return [d for _, d in sorted(chunk, key=itemgetter(0))]

    def outstanding(self) -> list[Step[T]]:
        """The steps :meth:`take` has not handed back yet (not begun, running or done), in order.

        A step done since the last :meth:`take` is among them: its caller has
        not recorded it yet, so what it acts on is still busy.
        """
        with self._lock:
            done = {position for position, _ in self._finished[self._taken :]}
            return [self._steps[position] for position in sorted(done | self._open)]

    def give_up(self, hung: Collection[str]) -> None:
        """Begin no more lanes, nor steps behind one running on a node of ``hung``.

        What is given up is handed back at once as skipped, including the
        steps waiting behind a step that runs on (on a host that hangs, it
        may run until the engine's timeout). Lanes whose step runs on other
        nodes, or that are between two steps, go on: their node may be
        slow, but it answers. Called again later, it gives up the lanes
        whose node has stopped answering since.
        """
        with self._lock:
            self._stopped.update(index for index, _ in self._todo)
            self._todo.clear()
            self._stopped.update(
                self._lane_of[position]
                for position in self._running
                if any(node in hung for node in self._steps[position].nodes)
            )
            dropped = [
                (i, self._steps[i])
                for i in sorted(self._open)
                if i not in self._running and self._lane_of[i] in self._stopped
            ]
        began = time.time()
        for position, step in dropped:
            self._finish(position, Done(step.item, began, skipped=True))
