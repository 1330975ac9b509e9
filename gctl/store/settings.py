"""Store settings read without importing SQLAlchemy: the schema revision, SQLite's busy timeout."""

from __future__ import annotations

HEAD = "0012"
"""The newest migration; a test checks it against the migrations directory."""

BUSY_TIMEOUT_S = 30.0
"""How long a SQLite connection waits for another writer before giving up."""
