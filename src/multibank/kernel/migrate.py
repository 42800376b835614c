"""Applies Alembic migrations from inside the server's own event loop (serve, CLI, tests)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import Connection

from multibank.kernel.db import Database

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
_LOCK_ID = 7_314_159_265  # any constant: serialises concurrent upgrades on PostgreSQL


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    # The option is read through configparser's interpolation: a percent-encoded URL (a Unix
    # socket's `host=%2Fvar%2Frun%2Fpostgresql`, a password with `%40`) must escape its `%`.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.set_main_option("file_template", "%%(year)d_%%(month).2d_%%(day).2d_%%(rev)s_%%(slug)s")
    return cfg


async def upgrade(db: Database, revision: str = "head") -> None:
    cfg = alembic_config(db.url)

    def run(connection: Connection) -> None:
        if connection.dialect.name == "postgresql":
            # Several `multibank serve` processes may start together against one database.
            connection.execute(text(f"SELECT pg_advisory_xact_lock({_LOCK_ID})"))
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)

    async with db.engine.begin() as conn:
        await conn.run_sync(run)


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


async def current_revision(db: Database) -> str | None:
    """The revision the database is at; None when it was never migrated."""

    def read(connection: Connection) -> str | None:
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(connection).get_current_revision()

    async with db.engine.connect() as conn:
        return await conn.run_sync(read)
