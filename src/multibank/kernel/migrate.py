"""Applies Alembic migrations from inside the server's own event loop (serve, CLI, tests)."""

from __future__ import annotations

from collections.abc import Callable
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
    await _migrate(db, lambda cfg: command.upgrade(cfg, revision))


async def downgrade(db: Database, revision: str) -> None:
    await _migrate(db, lambda cfg: command.downgrade(cfg, revision))


async def _migrate(db: Database, step: Callable[[Config], None]) -> None:
    """Runs `step` in one transaction. On SQLite with foreign keys off, as SQLite's way of
    changing a table (a new one filled, the old dropped, the new renamed; migration 0015) needs:
    with them on, dropping a table that others refer to fails. What they would have refused is
    checked before the commit (`_no_dangling_references`)."""
    cfg = alembic_config(db.url)

    def run(connection: Connection) -> None:
        if connection.dialect.name == "postgresql":
            # Several `multibank serve` processes may start together against one database.
            connection.execute(text(f"SELECT pg_advisory_xact_lock({_LOCK_ID})"))
        cfg.attributes["connection"] = connection
        step(cfg)
        if connection.dialect.name == "sqlite":
            _no_dangling_references(connection)

    async with db.engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:  # outside a transaction, where SQLite reads it
            await conn.run_sync(_foreign_keys, False)
        try:
            async with conn.begin():
                await conn.run_sync(run)
        finally:
            if sqlite:
                try:
                    await conn.run_sync(_foreign_keys, True)
                except BaseException:
                    # Never lent again without them: the pool opens a new connection instead.
                    await conn.invalidate()
                    raise


def _foreign_keys(connection: Connection, on: bool) -> None:
    """On the driver's connection: through SQLAlchemy the PRAGMA would begin a transaction
    (`kernel.db.create_engine`), in which SQLite ignores it."""
    dbapi = connection.connection.dbapi_connection
    assert dbapi is not None
    cursor = dbapi.cursor()
    try:
        cursor.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")
        cursor.execute("PRAGMA foreign_keys")
        row = cursor.fetchone()
        if row is None or bool(row[0]) != on:
            raise RuntimeError(f"SQLite did not turn foreign keys {'on' if on else 'off'}")
    finally:
        cursor.close()


def _no_dangling_references(connection: Connection) -> None:
    dangling = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if dangling:
        raise RuntimeError(f"the migration left rows referring to nothing: {dangling[:5]}")


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
