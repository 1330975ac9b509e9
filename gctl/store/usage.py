"""What jobs used: the stretches they ran, and the GPU time of their allocations within them.

Pure functions over the rows the store keeps, shared by the daemon's
snapshot (attained service), the simulator's workload from the store and
accounting (``gctl acct``). They import nothing beyond the standard
library, so a command reading a SQLite store stays quick to start.

- A job *ran* while its state was ``RUNNING`` or ``COMPLETING``: a
  stretch starts at a ``job_states`` row entering one of those and ends at
  the job's next state row. Time suspended, whether frozen in place (time
  slicing keeps the GPUs) or checkpointed, is not running time; a stretch
  still open (no later row) is not a closed stretch.
- A job's *GPU time* is, over every interval it held a GPU (an
  ``allocation_history`` row), the part of that interval that falls in its
  running stretches. So a job frozen while another takes its turn on the
  same GPU is not charged for that turn, and a job that grew from one GPU
  to two is charged for two only from when it held two. Jobs *packed*
  side by side on one GPU run at once: each is charged for the GPU in full.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

RUNNING_STATES = frozenset({"RUNNING", "COMPLETING"})
"""Store states of jobs running on their GPUs."""


def stretches(rows: Iterable[tuple[int, str, float]]) -> Iterator[tuple[int, float, float]]:
    """The closed running stretches ``(job id, from, to)`` of state rows.

    ``rows`` are ``(job id, state, entered at)``, each job's rows together
    and in time order (ordered by job, time and row id). A stretch of no
    length (or a clock that went back) is left out.
    """
    last_job, last_state, last_at = None, "", 0.0
    for job_id, state, at in rows:
        if job_id == last_job and last_state in RUNNING_STATES and at > last_at:
            yield job_id, last_at, at
        last_job, last_state, last_at = job_id, state, at


def run_times(rows: Iterable[tuple[int, str, float]], at: float | None = None) -> dict[int, float]:
    """Seconds each job spent running, by job id (rows as :func:`stretches`).

    Closed stretches only, unless ``at`` is given: then a job whose last row
    entered a running state (it runs now) counts that stretch up to ``at``.
    """
    ran: dict[int, float] = {}
    last: dict[int, tuple[str, float]] = {}

    def rows_seen() -> Iterator[tuple[int, str, float]]:
        for row in rows:
            last[row[0]] = (row[1], row[2])
            yield row

    for job_id, start, end in stretches(rows_seen()):
        ran[job_id] = ran.get(job_id, 0.0) + (end - start)
    if at is not None:
        for job_id, (state, entered) in last.items():
            if state in RUNNING_STATES and at > entered:
                ran[job_id] = ran.get(job_id, 0.0) + (at - entered)
    return ran


def gpu_seconds(held: Iterable[tuple[float, float]], ran: Sequence[tuple[float, float]]) -> float:
    """GPU-seconds of one job: each interval ``(since, until)`` it held a GPU, within ``ran``.

    ``ran`` are the job's running stretches ``(from, to)`` in time order, as
    :func:`stretches` gives them (they do not overlap). Each interval looks
    only at the stretches it meets: a job time-sliced for weeks, with
    thousands of each, costs no more than the sum of the two.
    """
    ends = [end for _, end in ran]
    total = 0.0
    for since, until in held:
        i = bisect_right(ends, since)
        while i < len(ran) and ran[i][0] < until:
            start, end = ran[i]
            total += (until if until < end else end) - (since if since > start else start)
            i += 1
    return total


def most_at_once(held: Sequence[tuple[float, float]]) -> int:
    """The most GPUs a job held at one time, from the intervals ``(since, until)`` it held each.

    An interval ending when another begins (a GPU given back as another is
    taken, or an interval closed and reopened) does not overlap it.
    """
    if len(held) == 1:
        since, until = held[0]
        return int(until > since)
    edges = sorted(
        edge for since, until in held if until > since for edge in ((since, 1), (until, -1))
    )
    most = count = 0
    for _, step in edges:  # at one time, an end (-1) sorts before a start
        count += step
        most = max(most, count)
    return most


class Totals(NamedTuple):
    """What a finished job used, as accounting lists it and the store keeps it in ``jobs``."""

    run_seconds: float
    gpu_seconds: float
    gpus: int


def totals(
    asked: int, ran: Sequence[tuple[float, float]], held: Sequence[tuple[float, float]]
) -> Totals:
    """A job's running seconds, GPU-seconds and most GPUs at once.

    ``ran`` are its running stretches (:func:`stretches`), ``held`` every
    interval it held a GPU (:func:`gpu_seconds`). A job with no interval
    (it never held a GPU, or ended before the history was kept) is taken to
    have held the ``asked`` GPUs whenever it ran.
    """
    elapsed = sum([end - start for start, end in ran])
    if held:
        return Totals(elapsed, gpu_seconds(held, ran), most_at_once(held))
    gpus = asked if ran else 0
    return Totals(elapsed, gpus * elapsed, gpus)
