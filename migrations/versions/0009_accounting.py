"""Accounting, time limits and kept output.

``jobs`` gains ``time_limit`` (seconds of running allowed; None: none), an
index on ``end_time`` (accounting selects finished jobs by it) and what a
job used, stored when it finishes (``run_seconds``, ``gpu_seconds``,
``gpus_held``, ``nodes_held``; None for jobs that finished before).
``allocation_history``: every GPU a job held and for how long, written
when an allocation ends, readable by everyone (as ``allocations`` is).
``job_outputs``: where each attempt's output was saved on its node, with a
bounded tail; on PostgreSQL readable only by the job's owner and operators.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 20:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATOR = "pg_has_role(current_user, 'gctl_operator', 'MEMBER')"
OWNS_JOB = 'EXISTS (SELECT 1 FROM jobs j WHERE j.id = job_id AND j."user" = current_user)'
READERS = {"allocation_history": "true", "job_outputs": f"{OWNS_JOB} OR {OPERATOR}"}
"""Who may read each new table (row-level security); only operators write them."""


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("time_limit", sa.Double(), nullable=True))
        batch.add_column(sa.Column("run_seconds", sa.Double(), nullable=True))
        batch.add_column(sa.Column("gpu_seconds", sa.Double(), nullable=True))
        batch.add_column(sa.Column("gpus_held", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("nodes_held", sa.Text(), nullable=True))
        batch.create_index("ix_jobs_end_time", ["end_time"])
    op.create_table(
        "allocation_history",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(length=64), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("since", sa.Double(), nullable=False),
        sa.Column("until", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_allocation_history_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_allocation_history")),
    )
    op.create_index(op.f("ix_allocation_history_job_id"), "allocation_history", ["job_id"])
    op.create_table(
        "job_outputs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("tail", sa.Text(), nullable=False),
        sa.Column("saved_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_outputs_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_outputs")),
        sa.UniqueConstraint("job_id", "attempt", "node", name=op.f("uq_job_outputs_job_id")),
    )
    op.create_index(op.f("ix_job_outputs_job_id"), "job_outputs", ["job_id"])
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, readers in READERS.items():
        op.execute(f"GRANT SELECT ON {table} TO gctl_user")
        op.execute(f"GRANT ALL ON {table} TO gctl_operator")
        op.execute(f"GRANT USAGE ON SEQUENCE {table}_id_seq TO gctl_operator")
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY gctl_read ON {table} FOR SELECT USING ({readers})")
        op.execute(
            f"CREATE POLICY gctl_operator_all ON {table} FOR ALL USING ({OPERATOR})"
            f" WITH CHECK ({OPERATOR})"
        )


def downgrade() -> None:
    """Revert this revision."""
    op.drop_table("job_outputs")
    op.drop_table("allocation_history")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_end_time")
        batch.drop_column("nodes_held")
        batch.drop_column("gpus_held")
        batch.drop_column("gpu_seconds")
        batch.drop_column("run_seconds")
        batch.drop_column("time_limit")
