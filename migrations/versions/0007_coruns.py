"""Co-runs and batch curves: what interference and batch balancing are learned from.

``coruns``: measured slow-downs of jobs sharing GPUs; ``batch_curves``: a
job's fitted batch-size to step-time curve per GPU model. On PostgreSQL both
are the operators' (the daemon writes them), readable by every user, like
``profiles``.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATOR = "pg_has_role(current_user, 'gctl_operator', 'MEMBER')"
TABLES = ("coruns", "batch_curves")


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "coruns",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("partner_id", sa.Integer(), nullable=False),
        sa.Column("packed_at", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(length=255), nullable=False),
        sa.Column("partner_kind", sa.String(length=255), nullable=False),
        sa.Column("gpu_type", sa.String(length=64), nullable=False),
        sa.Column("slowdown", sa.Double(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_coruns")),
        sa.UniqueConstraint("job_id", "partner_id", "packed_at", name=op.f("uq_coruns_job_id")),
    )
    op.create_table(
        "batch_curves",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=255), nullable=False),
        sa.Column("gpu_type", sa.String(length=64), nullable=False),
        sa.Column("alpha", sa.Double(), nullable=False),
        sa.Column("beta", sa.Double(), nullable=False),
        sa.Column("points", sa.JSON(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batch_curves")),
        sa.UniqueConstraint("job_id", "gpu_type", name=op.f("uq_batch_curves_job_id")),
    )
    op.create_index(op.f("ix_batch_curves_kind"), "batch_curves", ["kind"])
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(f"GRANT SELECT ON {table} TO gctl_user")
        op.execute(f"GRANT ALL ON {table} TO gctl_operator")
        op.execute(f"GRANT USAGE ON SEQUENCE {table}_id_seq TO gctl_operator")
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY gctl_read ON {table} FOR SELECT USING (true)")
        op.execute(
            f"CREATE POLICY gctl_operator_all ON {table} FOR ALL USING ({OPERATOR})"
            f" WITH CHECK ({OPERATOR})"
        )


def downgrade() -> None:
    """Revert this revision."""
    for table in TABLES:
        op.drop_table(table)
