"""A job's output: the last lines, or a live stream, of its container's stdout and stderr.

``gctl logs`` and the dashboard's job detail read it here, over SSH from the
Docker engine of the node the job runs on (:class:`gctl.hosts.engine.Engine`),
as ``docker logs`` would on that host. The container is the job's current
attempt, ``gctl-<job>-<attempt>``, found by its labels; a job spanning
several nodes has one on each, and the first node's (by name) is read unless
another is asked for. The store is read first and released before the host
is contacted.

Before the daemon removes one of a job's containers, it keeps its output
(:mod:`gctl.daemon.output`): a file in the attempt's job directory on the
node and its last lines in the store. A job that holds no GPUs (ended,
suspended at a checkpoint, requeued) is served from there: every kept
attempt in order, each read from its node, or from the store's tail when
the node cannot be reached or the file is gone (a note says so). The
store's tails are readable by the job's owner and operators only
(PostgreSQL's row-level security). Each reason there is nothing to read is
a :class:`LogUnavailable` with a one-line message; an unknown job is
:class:`~gctl.services.errors.NotFound`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gctl.hosts.engine import Engine, container_name
from gctl.hosts.ssh import HostError, Pool, Target
from gctl.services import hostops
from gctl.services.db import Store
from gctl.services.errors import NotFound, ServiceError
from gctl.services.queue import FINISHED
from gctl.store.engine import transaction
from gctl.store.identity import store_id
from gctl.store.models import AllocationRow, GpuRow, JobOutputRow, JobRow, NodeRow, now

TAIL = 50
"""Lines :func:`tail` returns unless told otherwise."""
SAVING_S = 60.0
"""Seconds after a job's end during which its output may still be being kept."""


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
    kept: bool = False
    """Whether this is output kept after its container(s) were removed (not a live container)."""


@dataclass(frozen=True, slots=True)
class LogTail:
    """The last lines of a job's output."""

    source: LogSource
    lines: tuple[str, ...]
    notes: tuple[str, ...] = ()
    """Where kept output was read from the store's tail instead of its node, and why."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys."""
        s = self.source
        return {
            "job_id": s.job_id,
            "node": s.node,
            "container": s.container,
            "nodes": list(s.nodes),
            "kept": s.kept,
            "lines": list(self.lines),
            "notes": list(self.notes),
        }


class LogStream:
    """A job's output as it is read: iterate for chunks of bytes, as the container wrote them."""

    def __init__(
        self, source: LogSource, chunks: Iterator[bytes], notes: list[str] | None = None
    ) -> None:
        """Output from ``source``, read as ``chunks`` are taken."""
        self.source = source
        self._chunks = chunks
        self.notes = notes if notes is not None else []
        """Filled as kept output is read: what came from the store's tail instead of a node."""

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


@dataclass(frozen=True, slots=True)
class _Kept:
    """One attempt's output as kept when its container was removed, and where to read it."""

    attempt: int
    node: str
    path: str
    tail: str
    target: Target | None
    """How to reach its node; None when the node is no longer registered."""


@contextmanager
def stream(
    store: Store,
    job_id: int,
    *,
    tail: int | None = None,
    follow: bool = False,
    node: str | None = None,
) -> Iterator[LogStream]:
    """Open the output of ``job_id``: its container's, else what was kept of it.

    The last ``tail`` lines (default all). With ``follow`` a container's
    stream goes on until the container ends. ``node`` picks one of the
    job's nodes. Raises before yielding when there is nothing to read. The
    SSH connection is the stream's own, closed with it.
    """
    place = _locate(store, job_id, node)
    with Pool() as ssh:
        if isinstance(place, tuple):
            source, kept = place
            notes: list[str] = []
            yield LogStream(source, _read_kept(ssh, kept, tail, notes), notes)
            return
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
    return LogTail(out.source, tuple(text), tuple(out.notes))


def _read_kept(
    ssh: Pool, kept: list[_Kept], lines: int | None, notes: list[str]
) -> Iterator[bytes]:
    """Each attempt's kept output in order (its last ``lines``), from its node or the store."""
    parts: list[bytes] = []
    for k in kept:
        argv = ["cat", "--", k.path] if lines is None else ["tail", "-n", str(lines), "--", k.path]
        why = "its node is no longer registered"
        if k.target is not None:
            try:
                parts.append(ssh.run_ok(k.target, argv, f"reading {k.path}").stdout)
                continue
            except HostError as exc:
                why = str(exc)
        notes.append(
            f"attempt {k.attempt} on {k.node}: {why}; showing the last lines kept in the store"
        )
        parts.append(k.tail.encode() + (b"\n" if k.tail else b""))
    data = b"".join(parts)
    if lines is not None:
        cut = data.splitlines(keepends=True)
        data = b"".join(cut[max(0, len(cut) - lines) :])
    if data:
        yield data


def _locate(store: Store, job_id: int, node: str | None) -> _Place | tuple[LogSource, list[_Kept]]:
    """The job's current container, else its kept output; NotFound or LogUnavailable when none."""
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
        sid = store_id(s.connection())
        if not hosts:
            return _kept(s, row, node, sid)
        names = tuple(h.name for h in hosts)
        chosen = hosts[0] if node is None else next((h for h in hosts if h.name == node), None)
        if chosen is None:
            raise LogUnavailable(f"job {job_id} runs on {', '.join(names)}, not on {node}")
        return _Place(
            LogSource(
                job_id, chosen.name, container_name(sid, job_id, row.attempt, chosen.name), names
            ),
            row.attempt,
            hostops.target(chosen),
            chosen.docker_host,
            sid,
        )


def _kept(s: Session, row: JobRow, node: str | None, sid: str) -> tuple[LogSource, list[_Kept]]:
    """What was kept of a job's output, attempt by attempt (on ``node`` only, if given)."""
    rows = s.execute(
        select(JobOutputRow.attempt, JobOutputRow.node, JobOutputRow.path, JobOutputRow.tail)
        .where(JobOutputRow.job_id == row.id)
        .order_by(JobOutputRow.attempt, JobOutputRow.node)
    ).all()
    if node is not None:
        rows = [r for r in rows if r.node == node]
    if not rows:
        raise LogUnavailable(_nowhere(row, node))
    names = sorted({r.node for r in rows})
    found = {n.name: n for n in s.scalars(select(NodeRow).where(NodeRow.name.in_(names)))}
    kept = [
        _Kept(a, n, p, t, hostops.target(found[n]) if n in found else None) for a, n, p, t in rows
    ]
    last = kept[-1]
    source = LogSource(
        row.id,
        last.node,
        container_name(sid, row.id, last.attempt, last.node),
        tuple(names),
        kept=True,
    )
    return source, kept


def _nowhere(row: JobRow, node: str | None) -> str:
    """Why a job that holds no GPUs has no output to read."""
    if node is not None:
        return f"job {row.id}: no output of it was kept on {node}"
    if row.start_time is None:
        if row.state in FINISHED:
            return f"job {row.id} never started ({row.state}): it has no output"
        return f"job {row.id} has not started yet ({row.state}): no output so far"
    if row.state in FINISHED:
        if row.end_time is not None and now() - row.end_time < SAVING_S:
            return f"job {row.id} ended just now: its output is still being kept"
        return f"job {row.id} is {row.state}: no output of it was kept"
    return (
        f"job {row.id} is {row.state} and holds no GPUs: it has no container now and no output"
        " of an earlier run was kept; output shows again once it restarts"
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
