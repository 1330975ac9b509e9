"""Alembic revisions of the state store, oldest first."""
