"""Users: the numeric ids a job runs as; on PostgreSQL, row-level security for many users.

On PostgreSQL, where each user connects as a database role of their own
login name, two roles carry the rules: ``gctl_user`` (grant it to every
user: ``CREATE ROLE alice LOGIN IN ROLE gctl_user``) may read everything and
change only what is theirs, and ``gctl_operator`` (the daemon's role, the
operators') may do everything. The policies, enforced by the database for
anyone who connects without gctl too:

- ``jobs``: a user inserts and updates only jobs whose ``user`` is their
  role, never with ``priority`` high; only operators delete;
- ``intents`` and ``job_states``: a user adds them for their own jobs only;
- ``events``: a user adds events in their own name;
- everything else (nodes, GPUs, allocations, profiles, the lease, the
  store's id): operators only.

The table owner (who runs ``gctl init`` / ``gctl db upgrade``) is not bound
by them. SQLite has one user: its store file is private to operators
(``gctl init`` makes it so).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 19:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

USER_WRITES = {
    "jobs": ("INSERT", "UPDATE"),
    "intents": ("INSERT",),
    "events": ("INSERT",),
    "job_states": ("INSERT",),
}
"""What ``gctl_user`` may write, table by table (row-level security narrows it)."""
OPERATOR_ONLY = ("nodes", "gpus", "allocations", "profiles", "daemon_lease", "store_info")
OPERATOR = "pg_has_role(current_user, 'gctl_operator', 'MEMBER')"
OWNS_JOB = 'EXISTS (SELECT 1 FROM jobs j WHERE j.id = job_id AND j."user" = current_user)'
MINE = f'"user" = current_user OR {OPERATOR}'
MINE_NOT_HIGH = f"""("user" = current_user AND priority <> 'high') OR {OPERATOR}"""
MY_JOBS = f'("user" = current_user AND {OWNS_JOB}) OR {OPERATOR}'
Policy = tuple[str, str, str | None, str | None]
"""A policy's name, command, USING and WITH CHECK expressions."""
READ: Policy = ("gctl_read", "SELECT", "true", None)
POLICIES: dict[str, list[Policy]] = {
    "jobs": [
        READ,
        ("gctl_own_insert", "INSERT", None, MINE_NOT_HIGH),
        ("gctl_own_update", "UPDATE", MINE, MINE_NOT_HIGH),
        ("gctl_operator_delete", "DELETE", OPERATOR, None),
    ],
    "intents": [
        READ,
        (
            "gctl_own_insert",
            "INSERT",
            None,
            f'("user" = current_user AND {OWNS_JOB}) OR {OPERATOR}',
        ),
        ("gctl_operator_update", "UPDATE", OPERATOR, OPERATOR),
        ("gctl_operator_delete", "DELETE", OPERATOR, None),
    ],
    "events": [
        READ,
        ("gctl_own_insert", "INSERT", None, MINE),
        ("gctl_operator_delete", "DELETE", OPERATOR, None),
    ],
    "job_states": [
        READ,
        ("gctl_own_insert", "INSERT", None, f"{OWNS_JOB} OR {OPERATOR}"),
        ("gctl_operator_delete", "DELETE", OPERATOR, None),
    ],
    **{table: [READ, ("gctl_operator_all", "ALL", OPERATOR, OPERATOR)] for table in OPERATOR_ONLY},
}


def _role(name: str) -> None:
    op.execute(
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{name}')"
        f" THEN CREATE ROLE {name} NOLOGIN; END IF; END $$"
    )


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("uid", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("gid", sa.Integer(), nullable=True))
    if op.get_bind().dialect.name != "postgresql":
        return
    _role("gctl_user")
    _role("gctl_operator")
    op.execute("GRANT gctl_user TO gctl_operator")
    tables = list(POLICIES)
    op.execute(f"GRANT SELECT ON {', '.join(tables)}, alembic_version TO gctl_user")
    for table, writes in USER_WRITES.items():
        op.execute(f"GRANT {', '.join(writes)} ON {table} TO gctl_user")
        op.execute(f"GRANT USAGE ON SEQUENCE {table}_id_seq TO gctl_user")
    op.execute(f"GRANT ALL ON {', '.join(tables)} TO gctl_operator")
    op.execute("GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO gctl_operator")
    for table, policies in POLICIES.items():
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        for name, command, using, check in policies:
            sql = f"CREATE POLICY {name} ON {table} FOR {command}"
            if using is not None:
                sql += f" USING ({using})"
            if check is not None:
                sql += f" WITH CHECK ({check})"
            op.execute(sql)


def downgrade() -> None:
    """Revert this revision (the roles stay: other databases may use them)."""
    if op.get_bind().dialect.name == "postgresql":
        for table, policies in POLICIES.items():
            for name, *_ in policies:
                op.execute(f"DROP POLICY IF EXISTS {name} ON {table}")
            op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("gid")
        batch.drop_column("uid")
