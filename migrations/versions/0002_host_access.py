"""Host access: engine address, work directory, last probe error; GPU model name, CPU affinity.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 14:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("docker_host", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("work_dir", sa.Text(), nullable=True))
        batch.add_column(sa.Column("last_error", sa.Text(), nullable=True))
    with op.batch_alter_table("gpus") as batch:
        batch.add_column(sa.Column("model_name", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("cpu_affinity", sa.String(length=255), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("gpus") as batch:
        batch.drop_column("cpu_affinity")
        batch.drop_column("model_name")
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("last_error")
        batch.drop_column("work_dir")
        batch.drop_column("docker_host")
