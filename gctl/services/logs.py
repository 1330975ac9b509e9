"""A job's output: the last lines, or a live stream, of its container's stdout and stderr.

``gctl logs`` and the dashboard's job detail read it here, over SSH from the
Docker engine of the node the job runs on (:class:`gctl.hosts.engine.Engine`),
as ``docker logs`` would on that host. The container is the job's current
attempt, ``gctl-<job>-<attempt>``, found by its labels; a job spanning
several nodes has one on each, and the first node's (by name) is read unless
another is asked for. The store is read first and released before the host
is contacted.

The daemon removes a job's containers once they have ended, and a job
suspended at a checkpoint or requeued has none until it starts again, so
output can be read while the job holds GPUs (running or frozen) and not
after. Each reason there is nothing to read is a :class:`LogUnavailable` with
a one-line message; an unknown job is :class:`~gctl.services.errors.NotFound`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from gctl.hosts.engine import Engine, container_name
from gctl.hosts.ssh import HostError, Pool, Target
from gctl.services import hostops
from gctl.services.db import Store
from gctl.services.errors import NotFound, ServiceError
from gctl.services.queue import FINISHED
from gctl.store.engine import transaction
from gctl.store.identity import store_id
from gctl.store.models import AllocationRow, GpuRow, JobRow, NodeRow

TAIL = 50
"""Lines :func:`tail` returns unless told otherwise."""


class LogUnavailable(ServiceError):
    """The job's output cannot be read: not started, ended, its node away, its container gone."""


@dataclass(frozen=True, slots=True)
class LogSource:
    """Where a job's output is read from."""

    job_id: int
    node: str
    container: str
    nodes: tuple[str, ...]
    """Every node the job runs on (``node`` is one of them)."""


@dataclass(frozen=True, slots=True)
class LogTail:
    """The last lines of a job's output."""

    source: LogSource
    lines: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys."""
        s = self.source
        return {
            "job_id": s.job_id,
            "node": s.node,
            "container": s.container,
            "nodes": list(s.nodes),
            "lines": list(self.lines),
        }


class LogStream:
    """A job's output as it is read: iterate for chunks of bytes, as the container wrote them."""

    def __init__(self, source: LogSource, chunks: Iterator[bytes]) -> None:
        """Output from ``source``, read as ``chunks`` are taken."""
        self.source = source
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        """The chunks; a connection lost on the way is a :class:`LogUnavailable`."""
        try:
            yield from self._chunks
        except HostError as exc:
            raise LogUnavailable(f"job {self.source.job_id}'s output: {exc}") from None


@dataclass(frozen=True, slots=True)
class _Place:
    """A job's container as the store places it, and how to reach its engine."""

    source: LogSource
    attempt: int
    target: Target
    docker_host: str | None
    store_id: str


@contextmanager
def stream(
    store: Store,
    job_id: int,
    *,
    tail: int | None = None,
    follow: bool = False,
    node: str | None = None,
) -> Iterator[LogStream]:
    """Open the output of ``job_id``'s container: the last ``tail`` lines (default all).

    With ``follow`` the stream goes on until the container ends. ``node``
    picks one of the job's nodes. Raises before yielding when there is
    nothing to read. The SSH connection is the stream's own, closed with it.
    """
    place = _locate(store, job_id, node)
    with Pool() as ssh:
        engine = Engine(ssh, place.target, place.store_id, docker_host=place.docker_host)
        try:
            cid = _container(engine, place)
            yield LogStream(place.source, engine.logs(cid, follow=follow, tail=tail))
        finally:
            engine.close()


def tail(
    store: Store, job_id: int, lines: int | None = TAIL, *, node: str | None = None
) -> LogTail:
    """The last ``lines`` lines (all when None) of ``job_id``'s output, decoded as UTF-8."""
    with stream(store, job_id, tail=lines, node=node) as out:
        data = b"".join(out)
    text = data.decode(errors="replace").splitlines()
    if lines is not None:  # the engine counts only "\n"; splitlines also splits at "\r"
        text = text[max(0, len(text) - lines) :]
    return LogTail(out.source, tuple(text))


def _locate(store: Store, job_id: int, node: str | None) -> _Place:
    """The job's current container from the store; NotFound or LogUnavailable when none."""
    with transaction(store.engine, write=False) as s:
        row = s.get(JobRow, job_id)
        if row is None:
            raise NotFound(f"unknown job {job_id}")
        hosts = s.scalars(
            select(NodeRow)
            .join(GpuRow, GpuRow.node_id == NodeRow.id)
            .join(AllocationRow, AllocationRow.gpu_id == GpuRow.id)
            .where(AllocationRow.job_id == job_id)
            .order_by(NodeRow.name)
            .distinct()
        ).all()
        if not hosts:
            raise LogUnavailable(_nowhere(row))
        names = tuple(h.name for h in hosts)
        chosen = hosts[0] if node is None else next((h for h in hosts if h.name == node), None)
        if chosen is None:
            raise LogUnavailable(f"job {job_id} runs on {', '.join(names)}, not on {node}")
        sid = store_id(s.connection())
        return _Place(
            LogSource(job_id, chosen.name, container_name(sid, job_id, row.attempt), names),
            row.attempt,
            hostops.target(chosen),
            chosen.docker_host,
            sid,
        )


def _nowhere(row: JobRow) -> str:
    """Why a job that holds no GPUs has no output to read."""
    if row.start_time is None:
        if row.state in FINISHED:
            return f"job {row.id} never started ({row.state}): it has no output"
        return f"job {row.id} has not started yet ({row.state}): no output so far"
    if row.state in FINISHED:
        return (
            f"job {row.id} is {row.state}: its container was removed when it ended,"
            " and its output with it"
        )
    return (
        f"job {row.id} is {row.state} and holds no GPUs: it has no container now;"
        " output shows again once it restarts"
    )


def _container(engine: Engine, place: _Place) -> str:
    """The id of the job's current container on the engine's host."""
    src = place.source
    try:
        found = [c for c in engine.owned(src.job_id) if c.attempt == place.attempt]
    except HostError as exc:
        raise LogUnavailable(f"job {src.job_id}'s output: {exc}") from None
    if not found:
        raise LogUnavailable(
            f"job {src.job_id}: its container {src.container} is gone from {src.node}"
        )
    return found[0].id
