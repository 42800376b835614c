"""Applies Alembic migrations from inside the server's own event loop (serve, CLI, tests)."""

from __future__ import annotations

import re
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


# The server's own PostgreSQL role (decision 0075): the schema's owner runs the migrations, the
# server runs as a role that owns nothing and may not change what must never change. `db upgrade
# --server-role NAME` grants it what the server needs and checks what it must not have.

ROLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# Written once, never changed by the server: read and added to only.
APPEND_ONLY = ("postings", "audit_records")
# Changed by the server, but never in these columns (nor deleted): {table: column kept}.
KEPT_COLUMNS = {"ledger_transactions": "details", "webhook_events": "payload"}
READ_ONLY = ("alembic_version",)
# What the server's role must not be able to do, as (what, privilege check) pairs.
FORBIDDEN = [
    *(
        (f"{verb} {table}", f"has_table_privilege(:role, '{table}', '{verb}')")
        for table in APPEND_ONLY
        for verb in ("UPDATE", "DELETE", "TRUNCATE")
    ),
    *(
        (
            f"UPDATE {table}.{column}",
            f"has_column_privilege(:role, '{table}', '{column}', 'UPDATE')",
        )
        for table, column in KEPT_COLUMNS.items()
    ),
    *(
        (f"{verb} {table}", f"has_table_privilege(:role, '{table}', '{verb}')")
        for table in KEPT_COLUMNS
        for verb in ("DELETE", "TRUNCATE")
    ),
    ("CREATE in the schema", "has_schema_privilege(:role, current_schema(), 'CREATE')"),
]


class RoleProblem(Exception):
    """The server's role cannot be granted, or has more than it may: one line to show."""


async def grant_server_role(db: Database, role: str) -> None:
    """Grants `role` what the server needs on every table of the schema, after taking back
    everything it had, so running it again after a migration also covers the new tables; then
    checks it (`check_server_role`). PostgreSQL only; run as the schema's owner."""
    if not ROLE_NAME.match(role):
        raise RoleProblem(f"{role!r} is not a plain role name (letters, digits, _)")

    def run(connection: Connection) -> None:
        quoted = connection.dialect.identifier_preparer.quote(role)
        _require_plain_role(connection, role)
        tables = _tables(connection)
        statements = [
            f"REVOKE ALL ON ALL TABLES IN SCHEMA {_schema(connection)} FROM {quoted}",
            f"GRANT USAGE ON SCHEMA {_schema(connection)} TO {quoted}",
            f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {_schema(connection)} TO {quoted}",
        ]
        for table, columns in tables.items():
            name = connection.dialect.identifier_preparer.quote(table)
            if table in READ_ONLY:
                statements.append(f"GRANT SELECT ON {name} TO {quoted}")
            elif table in APPEND_ONLY:
                statements.append(f"GRANT SELECT, INSERT ON {name} TO {quoted}")
            elif table in KEPT_COLUMNS:
                changeable = ", ".join(
                    connection.dialect.identifier_preparer.quote(c)
                    for c in columns
                    if c != KEPT_COLUMNS[table]
                )
                statements.append(f"GRANT SELECT, INSERT ON {name} TO {quoted}")
                statements.append(f"GRANT UPDATE ({changeable}) ON {name} TO {quoted}")
            else:
                statements.append(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {name} TO {quoted}")
        for statement in statements:
            connection.execute(text(statement))

    async with db.engine.begin() as conn:
        await conn.run_sync(run)
    problems = await check_server_role(db, role)
    if problems:
        raise RoleProblem(f"the server's role {role} {'; '.join(problems)}")


async def check_server_role(db: Database, role: str) -> list[str]:
    """What is wrong with `role` as the server's role: each problem in a few words (none: [])."""

    def run(connection: Connection) -> list[str]:
        try:
            _require_plain_role(connection, role)
        except RoleProblem as exc:
            return [str(exc)]
        problems = [
            f"may {what}"
            for what, check in FORBIDDEN
            if connection.execute(text(f"SELECT {check}"), {"role": role}).scalar()
        ]
        for table in _tables(connection):
            for verb in ("SELECT", "INSERT"):
                allowed = connection.execute(
                    text("SELECT has_table_privilege(:role, :table, :verb)"),
                    {"role": role, "table": f"{_schema(connection)}.{table}", "verb": verb},
                ).scalar()
                if not allowed and not (table in READ_ONLY and verb == "INSERT"):
                    problems.append(f"cannot {verb} {table}")
        return problems

    async with db.engine.connect() as conn:
        return await conn.run_sync(run)


def _schema(connection: Connection) -> str:
    name = connection.execute(text("SELECT current_schema()")).scalar_one()
    return str(connection.dialect.identifier_preparer.quote(name))


def _tables(connection: Connection) -> dict[str, list[str]]:
    """The schema's tables and their columns."""
    rows = connection.execute(
        text(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name IN "
            "(SELECT tablename FROM pg_tables WHERE schemaname = current_schema()) "
            "ORDER BY table_name, ordinal_position"
        )
    ).all()
    out: dict[str, list[str]] = {}
    for table, column in rows:
        out.setdefault(str(table), []).append(str(column))
    return out


def _require_plain_role(connection: Connection, role: str) -> None:
    """The role exists, is not this connection's own (the owner's), is no superuser, and
    neither owns a table of the schema nor is a member of a role that does."""
    found = connection.execute(
        text("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = :role"), {"role": role}
    ).first()
    if found is None:
        raise RoleProblem(
            f"role {role} does not exist: create it first (CREATE ROLE {role} LOGIN PASSWORD '...')"
        )
    if found.rolsuper or found.rolbypassrls:
        raise RoleProblem(f"role {role} is a superuser (or bypasses row security)")
    if connection.execute(text("SELECT current_user = :role"), {"role": role}).scalar():
        raise RoleProblem(f"role {role} is the one running the migrations: use another")
    owns = connection.execute(
        text(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND pg_has_role(:role, tableowner, 'MEMBER') LIMIT 1"
        ),
        {"role": role},
    ).scalar()
    if owns is not None:
        raise RoleProblem(f"role {role} owns (or is a member of the owner of) table {owns}")
