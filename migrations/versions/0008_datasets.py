"""Datasets and node dataset caches.

``datasets``: named directories at a source (a path on a node) with their
manifest digest, size and file count; the operators' (``gctl dataset add``),
readable by every user. ``nodes`` gains ``cache_dir`` (where the node keeps
its cached copies; None: the work directory's ``datasets``) and
``cache_size_mb`` (its capacity; None: the disk's free space).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 18:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATOR = "pg_has_role(current_user, 'gctl_operator', 'MEMBER')"


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("source_node", sa.String(length=255), nullable=False),
        sa.Column("source_path", sa.Text(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
        sa.UniqueConstraint("name", name=op.f("uq_datasets_name")),
    )
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("cache_dir", sa.Text(), nullable=True))
        batch.add_column(sa.Column("cache_size_mb", sa.Integer(), nullable=True))
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("GRANT SELECT ON datasets TO gctl_user")
    op.execute("GRANT ALL ON datasets TO gctl_operator")
    op.execute("GRANT USAGE ON SEQUENCE datasets_id_seq TO gctl_operator")
    op.execute("ALTER TABLE datasets ENABLE ROW LEVEL SECURITY")
    op.execute("CREATE POLICY gctl_read ON datasets FOR SELECT USING (true)")
    op.execute(
        f"CREATE POLICY gctl_operator_all ON datasets FOR ALL USING ({OPERATOR})"
        f" WITH CHECK ({OPERATOR})"
    )


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("cache_size_mb")
        batch.drop_column("cache_dir")
    op.drop_table("datasets")
