"""Alembic environment: runs on a connection handed over by `multibank.kernel.migrate`, or on its
own async engine when called from the `alembic` command line."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from multibank.kernel.db import Base, Database
from multibank.models import load_all

load_all()
target_metadata = Base.metadata
config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_own_engine() -> None:
    db = Database(config.get_main_option("sqlalchemy.url") or "sqlite:///multibank.db")
    async with db.engine.connect() as conn:
        await conn.run_sync(_run)
    await db.dispose()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    asyncio.run(_run_own_engine())
