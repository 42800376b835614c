"""The schema comes from Alembic migrations only (D9): after `upgrade head` the database matches
the models exactly, on SQLite and PostgreSQL."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import Connection

from multibank.kernel.db import Base
from multibank.models import load_all


async def test_migrations_match_the_models(container):
    load_all()

    def diff(conn: Connection) -> list[object]:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))

    async with container.db.engine.connect() as conn:
        differences = await conn.run_sync(diff)
    assert differences == []
