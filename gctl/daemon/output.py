"""A job's output, kept when its container is removed: a file on its node and a tail in the store.

Docker forgets a container's output with the container. Before gctl
removes one of a job's containers (:meth:`gctl.daemon.site.Site.remove`),
the host agent's ``keep-output`` mode saves ``docker logs`` of it as
``output-a<attempt>.log`` in the job's directory (``jobs/<job>/``, beside
its attempt directories, which are pruned as attempts come and go; the
daemon's, mode 0600: the job's user cannot swap it for a link), its last
:attr:`OutputOptions.max_bytes`, and the last
:attr:`OutputOptions.tail_lines` lines go into the store (``job_outputs``),
so ``gctl logs`` still has something to show when the node is away.
After :attr:`OutputOptions.keep_days` the daemon forgets it (:func:`prune`):
the job's directories go from its nodes, and the tails from the store.
Saving is best effort: a container whose output cannot be read is removed
all the same (a warning says so), since a container left behind would hold
its GPUs' memory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import delete, select

from gctl.daemon import jobfiles
from gctl.hosts.engine import ContainerState
from gctl.hosts.ssh import HostError, Pool
from gctl.services import hostops
from gctl.services.db import Store
from gctl.store.engine import transaction
from gctl.store.models import JobOutputRow, JobRow, NodeRow, now
from gctl.store.snapshot import FINISHED_STATES

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 64 << 20
"""Bytes of a container's output kept on its node (the last ones)."""
DEFAULT_TAIL_LINES = 200
"""Lines of a container's output kept in the store."""
DEFAULT_KEEP_DAYS = 30.0
"""Days a finished job's kept output stays, on its nodes and in the store."""
TAIL_BYTES = 256 << 10
"""The most bytes of those lines: a tail of very long lines stays small."""


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """How much of each container's output is kept: on the node, and in the store."""

    max_bytes: int = DEFAULT_MAX_BYTES
    tail_lines: int = DEFAULT_TAIL_LINES
    keep_days: float = DEFAULT_KEEP_DAYS
    """Days kept output (and the job's directories) stay after a job ended; 0: forever."""


def file_name(attempt: int) -> str:
    """The file an attempt's output is kept in, in the job's directory on the node."""
    return f"output-a{attempt}.log"


def keep(
    pool: Pool, store: Store, sid: str, node: NodeRow, c: ContainerState, options: OutputOptions
) -> bool:
    """Save the output of ``c`` (one of a job's containers on ``node``); whether it was saved."""
    job_id, attempt = c.job_id, c.attempt
    if job_id is None or attempt is None:
        return False
    request = {
        "docker": hostops.docker_argv(node),
        "container": c.id,
        "dir": hostops.job_base(node, sid, job_id),
        "name": file_name(attempt),
        "max_bytes": options.max_bytes,
        "tail_lines": options.tail_lines,
        "tail_bytes": TAIL_BYTES,
    }
    try:
        got = jobfiles.run_agent(pool, hostops.target(node), "keep-output", request)
    except HostError as exc:
        log.warning("job %s: output of %s not kept: %s", job_id, c.name, exc)
        return False
    with transaction(store.engine, write=True) as s:
        if s.get(JobRow, job_id) is None:
            return False
        s.execute(
            delete(JobOutputRow).where(
                JobOutputRow.job_id == job_id,
                JobOutputRow.attempt == attempt,
                JobOutputRow.node == node.name,
            )
        )
        s.add(
            JobOutputRow(
                job_id=job_id,
                attempt=attempt,
                node=node.name,
                path=str(got.get("path") or request["dir"]),
                bytes=int(got.get("bytes") or 0),
                tail=str(got.get("tail") or ""),
                saved_at=now(),
            )
        )
    return True


def prune(pool: Pool, store: Store, sid: str, older_than: float, most: int = 500) -> list[int]:
    """Forget the kept output of jobs that ended before ``older_than``; their ids.

    Their job directories are removed from the nodes that hold kept output
    of them (checkpoints go with them), then the tails from the store. At
    most ``most`` jobs a call; a node that does not answer keeps its
    directories, and its jobs' tails, for the next call.
    """
    with transaction(store.engine, write=False) as s:
        rows = s.execute(
            select(JobOutputRow.job_id, JobOutputRow.node)
            .join(JobRow, JobRow.id == JobOutputRow.job_id)
            .where(JobRow.state.in_(sorted(FINISHED_STATES)), JobRow.end_time < older_than)
            .order_by(JobOutputRow.job_id)
            .limit(most)
        ).all()
        nodes = {n.name: n for n in s.scalars(select(NodeRow))}
    by_node: dict[str, list[int]] = {}
    for job_id, node in rows:
        by_node.setdefault(node, []).append(job_id)
    kept: set[int] = set()
    for name, jobs in by_node.items():
        row = nodes.get(name)
        if row is None:
            continue  # the node is gone, and its directories with it
        request = {"base": f"{hostops.store_dir(row, sid)}/jobs", "jobs": jobs}
        try:
            jobfiles.run_agent(pool, hostops.target(row), "forget-jobs", request)
        except HostError as exc:
            log.warning("old job directories on %s not removed yet: %s", name, exc)
            kept.update(jobs)
    done = sorted({job_id for job_id, _ in rows} - kept)
    if done:
        with transaction(store.engine, write=True) as s:
            s.execute(delete(JobOutputRow).where(JobOutputRow.job_id.in_(done)))
    return done
