"""When each profile sample's rate window began, so a rate measured across a freeze is known.

``profiles.since`` is the store time at which the window of steps a job's
reported rate was measured over began; None for samples taken before it
was recorded and for estimated rates (no window). A pack is judged only
on rates whose window began after the pack did.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("profiles") as batch:
        batch.add_column(sa.Column("since", sa.Double(), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("since")
