"""A count of changes to each node's GPU rows, so readers reread only the nodes that changed.

``nodes.inventory`` starts at 0 and goes up by one in the transaction
that adds, removes or changes any of the node's GPU rows (a probe that
found new hardware). The daemon reads every node each tick; with it, it
reads a node's GPU rows again only when the count (or the node itself)
changed, instead of every GPU of the cluster each time.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27 21:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("inventory", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("inventory")
