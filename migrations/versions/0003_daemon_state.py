"""Daemon state: container attempt, suspend mechanism and pending operation of jobs; the lease.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 18:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("mechanism", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("op", sa.JSON(), nullable=True))
    op.create_table(
        "daemon_lease",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("heartbeat_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_daemon_lease")),
    )


def downgrade() -> None:
    """Revert this revision."""
    op.drop_table("daemon_lease")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("op")
        batch.drop_column("mechanism")
        batch.drop_column("attempt")
