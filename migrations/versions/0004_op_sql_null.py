"""A job with no move in progress has ``jobs.op`` SQL NULL, not the JSON value ``null``.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_jobs = sa.table("jobs", sa.column("op", sa.JSON()))


def upgrade() -> None:
    """Turn the JSON ``null`` a finished move left behind into SQL NULL."""
    op.execute(_jobs.update().where(sa.cast(_jobs.c.op, sa.Text) == "null").values(op=sa.null()))


def downgrade() -> None:
    """Nothing to undo: SQL NULL reads back as no move in progress either way."""
