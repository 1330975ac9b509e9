"""The state store: SQLAlchemy models, engine setup, schema migrations and repository helpers."""
