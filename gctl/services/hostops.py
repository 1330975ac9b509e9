"""Reaching stored nodes: SSH targets and Docker engines built from what the store records."""

from __future__ import annotations

from gctl.hosts.engine import Engine
from gctl.hosts.ssh import Pool, Target
from gctl.store.models import NodeRow

DEFAULT_WORK_DIR = "/var/lib/gctl"
"""Where job directories live on a host unless the node says otherwise."""


def target(row: NodeRow) -> Target:
    """How to reach a stored node over SSH, with its confirmed host key."""
    return Target(
        node=row.name,
        host=row.host,
        port=row.port,
        user=row.ssh_user,
        key_path=row.key_path,
        fingerprint=row.host_key_fingerprint,
    )


def engine(pool: Pool, row: NodeRow) -> Engine:
    """A stored node's Docker engine, over the pool's connection to it."""
    return Engine(pool, target(row), docker_host=row.docker_host)


def job_dir(row: NodeRow, job_id: int) -> str:
    """A job's directory on a node's host (progress and checkpoints, kept across restarts)."""
    return f"{row.work_dir or DEFAULT_WORK_DIR}/jobs/{job_id}"
