"""Datasets fetched by the nodes from a remote source.

``datasets.source_node`` becomes nullable: None when the source is not a
node's directory but a location the nodes fetch it from with ``rsync``
(``rsync://HOST/MODULE/PATH``, ``HOST::MODULE/PATH`` or
``[USER@]HOST:/PATH`` over SSH), which ``source_path`` then holds.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("datasets") as batch:
        batch.alter_column("source_node", existing_type=sa.String(length=255), nullable=True)


def downgrade() -> None:
    """Revert this revision: remote datasets cannot be kept (their rows are deleted)."""
    op.execute("DELETE FROM datasets WHERE source_node IS NULL")
    with op.batch_alter_table("datasets") as batch:
        batch.alter_column("source_node", existing_type=sa.String(length=255), nullable=False)
