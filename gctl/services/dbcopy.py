"""Copying a store into another database: how a site moves from SQLite to PostgreSQL.

Every table's rows go over as they are, ids included, so job ids, event ids
and history stay the same; PostgreSQL's id sequences are then moved past the
copied ids. The target gets the schema first and must hold nothing yet. The
source's daemon lease is held for the whole copy, so no daemon changes the
source meanwhile (stop the daemon first; a running one makes the copy
refuse). The daemon lease itself is not copied.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Table, delete, func, insert, select, text

from gctl.services import access, db
from gctl.services.db import Store
from gctl.services.errors import ServiceError
from gctl.store.engine import transaction
from gctl.store.models import Base, DaemonLeaseRow, StoreInfoRow

CHUNK = 5_000
"""Rows read and inserted at a time."""


@dataclass(frozen=True, slots=True)
class Copied:
    """What a copy did: the target (password masked) and the rows of each table."""

    target: str
    rows: dict[str, int]

    def to_dict(self) -> dict[str, object]:
        """JSON form."""
        return {"target": self.target, "rows": self.rows}


def copy(source: Store, target_url: str) -> Copied:
    """Copy every row of ``source`` into the empty database at ``target_url``."""
    from gctl.daemon import lease  # the daemon's lease keeps daemons off the source meanwhile

    access.operator_only(source, "gctl db copy")
    target = db.connect(target_url)
    if target.url == source.url:
        raise ServiceError(f"the target {target.url} is the source itself")
    db.upgrade(target)
    tables = [t for t in Base.metadata.sorted_tables if t.name != DaemonLeaseRow.__tablename__]
    own = StoreInfoRow.__tablename__  # the new database's own id, replaced by the source's
    with transaction(target.engine, write=False) as s:
        used = [
            t.name
            for t in tables
            if t.name != own and s.scalar(select(func.count()).select_from(t))
        ]
    if used:
        raise ServiceError(
            f"the target {target.url} is not empty ({', '.join(used)}); nothing copied"
        )
    epoch = lease.acquire(source)
    try:
        rows = _copy_rows(source, target, tables)
    finally:
        lease.release(source, epoch)
    return Copied(target.url, rows)


def _copy_rows(source: Store, target: Store, tables: list[Table]) -> dict[str, int]:
    """All rows, parents before children, in one target transaction.

    The copy keeps the source's store id, so the containers and job
    directories on the hosts stay the copy's own.
    """
    counts: dict[str, int] = {}
    with source.engine.connect() as src, transaction(target.engine, write=True) as s:
        dst = s.connection()
        dst.execute(delete(StoreInfoRow))
        for table in tables:
            counts[str(table.name)] = 0
            result = src.execute(select(table).order_by(*table.primary_key.columns))
            while chunk := result.mappings().fetchmany(CHUNK):
                dst.execute(insert(table), [dict(r) for r in chunk])
                counts[str(table.name)] += len(chunk)
        if target.engine.dialect.name == "postgresql":
            for table in tables:
                _move_sequence(dst, table)
    return counts


def _move_sequence(conn: Connection, table: Table) -> None:
    """Set an integer id's sequence past the copied ids, so new rows get new ids."""
    (key,) = table.primary_key.columns
    if not key.autoincrement or key.type.python_type is not int:
        return
    conn.execute(
        text(
            "SELECT setval(pg_get_serial_sequence(:table, :column),"
            f" COALESCE((SELECT MAX({key.name}) FROM {table.name}), 0) + 1, false)"
        ),
        {"table": table.name, "column": key.name},
    )
