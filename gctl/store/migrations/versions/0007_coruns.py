"""Co-runs: measured slow-downs of jobs sharing GPUs, from which interference is predicted.

On PostgreSQL the table is the operators' (the daemon writes it), readable
by every user, like ``profiles``.

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
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("GRANT SELECT ON coruns TO gctl_user")
    op.execute("GRANT ALL ON coruns TO gctl_operator")
    op.execute("GRANT USAGE ON SEQUENCE coruns_id_seq TO gctl_operator")
    op.execute("ALTER TABLE coruns ENABLE ROW LEVEL SECURITY")
    op.execute("CREATE POLICY gctl_read ON coruns FOR SELECT USING (true)")
    op.execute(
        f"CREATE POLICY gctl_operator_all ON coruns FOR ALL USING ({OPERATOR})"
        f" WITH CHECK ({OPERATOR})"
    )


def downgrade() -> None:
    """Revert this revision."""
    op.drop_table("coruns")
