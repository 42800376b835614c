"""Alembic migrations: the only source of the schema (D9)."""
