"""Fencing and launch failures: the store's id, the lease epoch, start back-off, checkpoint stalls.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 18:00:00
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision; the store gets a new random id."""
    info = op.create_table(
        "store_info",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_store_info")),
    )
    op.bulk_insert(info, [{"key": "store_id", "value": secrets.token_hex(8)}])
    with op.batch_alter_table("daemon_lease") as batch:
        batch.add_column(sa.Column("epoch", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("retry_at", sa.Double(), nullable=True))
        batch.add_column(
            sa.Column("start_failures", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("checkpoint_step", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("stalls", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("stalls")
        batch.drop_column("checkpoint_step")
        batch.drop_column("start_failures")
        batch.drop_column("retry_at")
    with op.batch_alter_table("daemon_lease") as batch:
        batch.drop_column("epoch")
    op.drop_table("store_info")
