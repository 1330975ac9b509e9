"""The store's own id, which names its containers, job directories and checkpoint copies."""

from __future__ import annotations

from sqlalchemy import Connection, Engine, select

from gctl.store.models import StoreInfoRow

STORE_ID = "store_id"
"""The ``store_info`` key of the store's id (made by the migration that created the table)."""


def store_id(bind: Engine | Connection) -> str:
    """The id of the store ``bind`` reaches (a short random hex string, fixed for its life)."""
    query = select(StoreInfoRow.value).where(StoreInfoRow.key == STORE_ID)
    if isinstance(bind, Connection):
        value = bind.execute(query).scalar()
    else:
        with bind.connect() as conn:
            value = conn.execute(query).scalar()
    if value is None:
        raise LookupError("the store has no store_id; run 'gctl db upgrade'")
    return str(value)
