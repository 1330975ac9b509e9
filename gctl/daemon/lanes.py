"""Host actions carried out in parallel lanes, in order within each job.

A burst of placements on many nodes must not wait for one container start
after another: each start is a few round trips to a node's engine, and the
nodes (and a node's engine) serve several at once. The actions of one batch
are put into lanes: a job's actions all go, in order, into one lane (its
freeze never overtakes its start); the jobs on one set of nodes are spread
over :data:`PER_NODES` lanes; the lanes run side by side on at most
``workers`` threads. An action that fails takes the job's later actions in
the batch with it, unrun. What is done is handed back every ``every``
seconds, so the caller can record it while the rest goes on.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import ALL_COMPLETED, ThreadPoolExecutor, wait
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
    """A step carried out (``error`` None) or refused, with when it began (epoch seconds)."""

    item: T
    began: float
    error: HostError | None = None


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


def run(steps: Sequence[Step[T]], *, workers: int, every: float) -> Iterator[list[Done[T]]]:
    """Carry out ``steps`` in parallel lanes; yield what is done every ``every`` seconds.

    Steps without an action are done at once, in the first yield. Each
    yield lists its steps in the order given, so a job's outcomes come in the
    order of its steps. Anything but a :class:`HostError` raised by an action
    propagates.
    """
    now = time.time()
    first = [(i, Done(s.item, now)) for i, s in enumerate(steps) if s.action is None]
    split = lanes(steps)
    if not split:
        yield [d for _, d in first]
        return
    # Appended by the lanes' threads (list.append is atomic), with each step's position.
    finished: list[tuple[int, Done[T]]] = []

    def run_lane(lane: list[tuple[int, Step[T]]]) -> None:
        failed: dict[Hashable, str] = {}
        for position, step in lane:
            began = time.time()
            if step.job in failed:
                why = f"not carried out: an earlier action on it failed ({failed[step.job]})"
                finished.append((position, Done(step.item, began, HostError("-", why))))
                continue
            assert step.action is not None
            try:
                step.action()
            except HostError as exc:
                failed[step.job] = str(exc)
                finished.append((position, Done(step.item, began, exc)))
            else:
                finished.append((position, Done(step.item, began)))

    todo = deque(split)

    def work() -> None:
        """Take lanes until none is left (a deque's popleft is atomic)."""
        while todo:
            try:
                lane = todo.popleft()
            except IndexError:
                return
            run_lane(lane)

    taken = 0
    threads = max(1, min(workers, len(split)))
    with ThreadPoolExecutor(max_workers=threads) as pool:
        pending = {pool.submit(work) for _ in range(threads)}
        while pending:
            ended, pending = wait(pending, timeout=every, return_when=ALL_COMPLETED)
            for future in ended:
                future.result()  # a bug in an action is not swallowed
            count = len(finished)
            chunk, taken = first + finished[taken:count], count
            first = []
            if chunk:
                yield [d for _, d in sorted(chunk, key=itemgetter(0))]
