"""The state store's tables: SQLAlchemy 2 typed models of everything gctl knows.

Nodes and their GPUs (with topology), jobs with their full spec, the GPUs
each job holds now, every state a job passed through, observed profiles,
operator intents waiting for the daemon, and the append-only event log that
``gctl events``, ``gctl why`` and ``gctl watch`` read. Times are stored in
UTC. No secrets are stored: a node records the *path* of an SSH key, never
the key.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Double,
    ForeignKey,
    Index,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Constraint names Alembic can find again on every backend (SQLite batch mode needs them)."""


def now() -> float:
    """The current time as UTC epoch seconds (the one clock the store uses)."""
    return time.time()


def utc(ts: float | None) -> datetime | None:
    """Epoch seconds as an aware UTC datetime, which JSON output writes as ISO 8601."""
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


class Base(DeclarativeBase):
    """Declarative base carrying the naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {float: Double, dict[str, Any]: JSON, list[Any]: JSON}


class NodeRow(Base):
    """A GPU server gctl may run jobs on, and the operator's view of it."""

    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    host: Mapped[str] = mapped_column(String(255))
    port: Mapped[int] = mapped_column(default=22)
    ssh_user: Mapped[str | None] = mapped_column(String(255))
    key_path: Mapped[str | None] = mapped_column(Text)
    host_key_fingerprint: Mapped[str | None] = mapped_column(String(255))
    docker_host: Mapped[str | None] = mapped_column(String(255))
    work_dir: Mapped[str | None] = mapped_column(Text)
    emulated: Mapped[bool] = mapped_column(default=False)
    admin_state: Mapped[str] = mapped_column(String(16), default="up")
    reason: Mapped[str | None] = mapped_column(Text)
    reason_user: Mapped[str | None] = mapped_column(String(255))
    reason_time: Mapped[float | None]
    last_seen: Mapped[float | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(default=now)
    cache_dir: Mapped[str | None] = mapped_column(Text)
    """Where the node keeps cached datasets (None: the work directory's ``datasets``)."""
    cache_size_mb: Mapped[int | None]
    """The dataset cache's capacity (None: the free space of its disk)."""
    inventory: Mapped[int] = mapped_column(default=0)
    """Changes made to the node's GPU rows so far: one more in each transaction that adds,
    removes or changes any (:class:`gctl.store.gpurows.GpuRows` rereads only those nodes)."""

    gpus: Mapped[list[GpuRow]] = relationship(
        back_populates="node", cascade="all, delete-orphan", order_by="GpuRow.index"
    )


class GpuRow(Base):
    """One GPU of a node, with what the topology score table needs."""

    __tablename__ = "gpus"
    __table_args__ = (UniqueConstraint("node_id", "index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    index: Mapped[int]
    uuid: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(64))
    model_name: Mapped[str | None] = mapped_column(String(128))
    memory_mb: Mapped[int]
    socket: Mapped[int] = mapped_column(default=0)
    pcie_switch: Mapped[int] = mapped_column(default=0)
    numa_node: Mapped[int | None]
    cpu_affinity: Mapped[str | None] = mapped_column(String(255))
    nvlink_peers: Mapped[list[Any]] = mapped_column(default=list)
    emulated: Mapped[bool] = mapped_column(default=False)

    node: Mapped[NodeRow] = relationship(back_populates="gpus")


class JobRow(Base):
    """A submitted job: its full spec and where it stands now."""

    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_state_id", "state", "id"),
        Index("ix_jobs_end_time", "end_time"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    user: Mapped[str] = mapped_column(String(255), index=True)
    # The submitter's numeric ids, which the container runs as (checked again at start).
    uid: Mapped[int | None]
    gid: Mapped[int | None]
    image: Mapped[str] = mapped_column(Text)
    command: Mapped[list[Any]] = mapped_column(default=list)
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    mounts: Mapped[list[Any]] = mapped_column(default=list)
    gpus: Mapped[int]
    priority: Mapped[str] = mapped_column(String(16), default="normal")
    job_class: Mapped[str] = mapped_column(String(16), default="production")
    elastic_min: Mapped[int | None]
    elastic_max: Mapped[int | None]
    gpu_mem_mb: Mapped[int | None]
    # Seconds of running the job may have (``--time``); None: no limit.
    time_limit: Mapped[float | None]
    datasets: Mapped[list[Any]] = mapped_column(default=list)
    profile: Mapped[str | None] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16), default="PENDING")
    reason: Mapped[str | None] = mapped_column(Text)
    held: Mapped[bool] = mapped_column(default=False)
    submit_time: Mapped[float] = mapped_column(default=now)
    start_time: Mapped[float | None]
    end_time: Mapped[float | None]
    exit_code: Mapped[int | None]
    restarts: Mapped[int] = mapped_column(default=0)
    # Container generation: every (re)start from a checkpoint gets a new one,
    # so containers are named gctl-<id>-<attempt> and never clash.
    attempt: Mapped[int] = mapped_column(default=0)
    mechanism: Mapped[str | None] = mapped_column(String(16))
    # The daemon's unfinished multi-step operation on the job (a checkpoint
    # move), written before its first host action so a restart can finish it.
    op: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    # A start that failed for a passing cause is retried from this time on (back-off).
    retry_at: Mapped[float | None]
    start_failures: Mapped[int] = mapped_column(default=0)
    # The step of the newest checkpoint the daemon saw, and how many times in a row the
    # job stopped unfinished without a checkpoint past it (see gctl.daemon.ends).
    checkpoint_step: Mapped[int | None]
    stalls: Mapped[int] = mapped_column(default=0)
    # What a finished job used, stored as it finishes (gctl.services.jobs.set_state) for
    # accounting: its seconds running, its GPU-seconds, the most GPUs it held at once and
    # the nodes it ran on as one Slurm hostlist. None: unfinished, or it finished before
    # they were kept (gctl.services.acct works them out from the histories then).
    run_seconds: Mapped[float | None]
    gpu_seconds: Mapped[float | None]
    gpus_held: Mapped[int | None]
    nodes_held: Mapped[str | None] = mapped_column(Text)

    allocations: Mapped[list[AllocationRow]] = relationship(
        back_populates="job", cascade="all, delete-orphan"
    )


class AllocationRow(Base):
    """A GPU a job holds now, and how (exclusive, packed or time-sliced)."""

    __tablename__ = "allocations"
    __table_args__ = (UniqueConstraint("job_id", "gpu_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id", ondelete="CASCADE"), index=True)
    mode: Mapped[str] = mapped_column(String(16), default="exclusive")
    since: Mapped[float] = mapped_column(default=now)

    job: Mapped[JobRow] = relationship(back_populates="allocations")
    gpu: Mapped[GpuRow] = relationship()


class AllocationHistoryRow(Base):
    """A GPU a job held, and from when until when: what accounting reads (``gctl acct``).

    Written when an allocation ends (:func:`gctl.store.allocations.release`),
    so the GPUs a job holds now are in ``allocations`` and the ones it held
    before are here. The node and GPU are kept by name and index, not by
    key, so the record outlives a node's removal.
    """

    __tablename__ = "allocation_history"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    node: Mapped[str] = mapped_column(String(255))
    gpu_index: Mapped[int]
    gpu_model: Mapped[str] = mapped_column(String(64))
    mode: Mapped[str] = mapped_column(String(16))
    since: Mapped[float]
    until: Mapped[float]


class JobOutputRow(Base):
    """Where one attempt's output was saved on its node when its container was removed.

    ``path`` is the file in the job's directory on ``node``; ``tail`` is its
    last lines (bounded), kept here so the output stays readable when the
    node is away or the file is gone. Readable by the job's owner and
    operators only: output may hold secrets.
    """

    __tablename__ = "job_outputs"
    __table_args__ = (UniqueConstraint("job_id", "attempt", "node"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int]
    node: Mapped[str] = mapped_column(String(255))
    path: Mapped[str] = mapped_column(Text)
    bytes: Mapped[int] = mapped_column(BigInteger)
    tail: Mapped[str] = mapped_column(Text)
    saved_at: Mapped[float] = mapped_column(default=now)


class DaemonLeaseRow(Base):
    """The one daemon allowed to act on this store, and when it last said it is alive.

    A single row (id 1). A daemon takes it when it is free or its holder's
    heartbeat is older than the lease time, and renews it every pass. The
    epoch counts takeovers: every daemon write checks it, so a daemon that
    lost the lease (paused past it, say) can write nothing more. A free lease
    has an empty holder and keeps its epoch.
    """

    __tablename__ = "daemon_lease"

    id: Mapped[int] = mapped_column(primary_key=True)
    holder: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int]
    started_at: Mapped[float]
    heartbeat_at: Mapped[float]
    epoch: Mapped[int] = mapped_column(default=0)


class StoreInfoRow(Base):
    """Facts about the store itself, by key; ``store_id`` names it on the hosts.

    Every container gctl starts carries its store's id, and job directories
    and checkpoint copies live under it, so two stores reaching the same
    host never touch each other's jobs.
    """

    __tablename__ = "store_info"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class JobStateRow(Base):
    """One state a job entered, when and why (its history)."""

    __tablename__ = "job_states"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    state: Mapped[str] = mapped_column(String(16))
    at: Mapped[float] = mapped_column(default=now)
    reason: Mapped[str | None] = mapped_column(Text)


class ProfileRow(Base):
    """An observed profile sample of a running job.

    ``since`` is when the window its rate was measured over began (store
    time); None when the job's report gives no window (an estimated rate).
    """

    __tablename__ = "profiles"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[float] = mapped_column(default=now)
    gpu_util: Mapped[float]
    memory_mb: Mapped[int]
    progress_rate: Mapped[float]
    since: Mapped[float | None]


class CoRunRow(Base):
    """A measured slow-down of a job beside another on shared GPUs: interference learned online.

    One row per pack of two jobs (the latest measurement of it). Job ids are
    kept without a foreign key: what two kinds of job do to each other stays
    known after the jobs are purged.
    """

    __tablename__ = "coruns"
    __table_args__ = (UniqueConstraint("job_id", "partner_id", "packed_at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int]
    partner_id: Mapped[int]
    packed_at: Mapped[float]
    kind: Mapped[str] = mapped_column(String(255))
    partner_kind: Mapped[str] = mapped_column(String(255))
    gpu_type: Mapped[str] = mapped_column(String(64))
    slowdown: Mapped[float]
    at: Mapped[float] = mapped_column(default=now)


class BatchCurveRow(Base):
    """A job's fitted batch-size curve on one GPU model: seconds per step = alpha + beta * batch.

    ``points`` are the ``[batch, seconds]`` it was fitted to. Kept without a
    foreign key, so a later job of the same kind can borrow it.
    """

    __tablename__ = "batch_curves"
    __table_args__ = (UniqueConstraint("job_id", "gpu_type"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int]
    kind: Mapped[str] = mapped_column(String(255), index=True)
    gpu_type: Mapped[str] = mapped_column(String(64))
    alpha: Mapped[float]
    beta: Mapped[float]
    points: Mapped[list[Any]] = mapped_column(default=list)
    at: Mapped[float] = mapped_column(default=now)


class DatasetRow(Base):
    """A named directory jobs read, at its source, and what it holds.

    The source is a path on a node (``source_node``), or a location the nodes
    fetch it from with rsync (``source_node`` None, ``source_path`` the URL).
    """

    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    source_node: Mapped[str | None] = mapped_column(String(255))
    source_path: Mapped[str] = mapped_column(Text)
    digest: Mapped[str] = mapped_column(String(64))
    """The manifest hash (:func:`gctl.hosts.agent.manifest`): paths, sizes, content hashes."""
    bytes: Mapped[int] = mapped_column(BigInteger)
    files: Mapped[int]
    user: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[float] = mapped_column(default=now)


class IntentRow(Base):
    """Something an operator asked for that the daemon carries out (suspend, migrate, ...)."""

    __tablename__ = "intents"
    __table_args__ = (Index("ix_intents_status_id", "status", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    node_id: Mapped[int | None] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    args: Mapped[dict[str, Any]] = mapped_column(default=dict)
    user: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    created_at: Mapped[float] = mapped_column(default=now)
    done_at: Mapped[float | None]
    result: Mapped[str | None] = mapped_column(Text)


class EventRow(Base):
    """Append-only log entry: who did what, when, and why.

    Job and node are kept by id and name without foreign keys, so the log
    outlives what it talks about.
    """

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[float] = mapped_column(default=now, index=True)
    user: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(32))
    job_id: Mapped[int | None] = mapped_column(index=True)
    node: Mapped[str | None] = mapped_column(String(255), index=True)
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)
