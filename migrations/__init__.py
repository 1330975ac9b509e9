"""Alembic environment of the state store (carried inside the package so installs can upgrade)."""
