"""SQLite: every table's id is its rowid (INTEGER PRIMARY KEY)

A primary key declared BIGINT made each SQLite table a rowid table plus a unique index of ids:
finding a row by id searched two B-trees, and every INSERT wrote both. Declared INTEGER, the id
is the rowid itself (decision 0030); the columns that refer to ids are declared INTEGER too, as
the models say (a reference takes the type of what it refers to). Storage is the same: both
are SQLite's INTEGER affinity. SQLite cannot change a column's type in place, so each
table is rebuilt as SQLite documents (https://sqlite.org/lang_altertable.html#otheralter):
created anew from its own CREATE statement with the id's type changed, filled, the old one
dropped, the new one renamed, its indexes created again from their own statements. Foreign
keys are off meanwhile (`kernel.migrate.upgrade`), and checked before the commit.

PostgreSQL is untouched: its ids are bigint, as they were.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 13:00:00
"""

import re
from collections.abc import Sequence

from alembic import op
from sqlalchemy.engine import Connection

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Each table's id, and the columns that refer to an id (the models declare them with the
# type of the id they refer to), parents before children (either order works with foreign keys
# off; this one reads as the schema does).
COLUMNS = {
    "programmes": ("id",),
    "api_keys": ("id", "programme_id"),
    "profiles": ("id", "programme_id"),
    "fee_types": ("id", "programme_id"),
    "identities": ("id", "programme_id", "profile_id"),
    "users": ("id", "programme_id", "identity_id"),
    "auth_factors": ("id", "programme_id", "user_id"),
    "auth_sessions": ("id", "programme_id"),
    "sca_challenges": ("id", "programme_id", "user_id", "session_id"),
    "one_time_codes": ("id",),
    "outbox_messages": ("id",),
    "idempotency_records": ("id",),
    "ledger_accounts": ("id", "programme_id"),
    "managed_accounts": ("id", "programme_id", "identity_id", "profile_id"),
    "ledger_transactions": ("id", "programme_id"),
    "postings": ("id", "programme_id", "transaction_id", "account_id"),
    "payments": ("id", "programme_id", "identity_id", "profile_id"),
    "webhook_events": ("id", "programme_id"),
    "webhook_attempts": ("id", "event_id"),
}


def _retype(
    connection: Connection, table: str, columns: tuple[str, ...], old: str, new: str
) -> None:
    """Rebuilds `table` with `columns` declared `new` instead of `old`."""
    found = connection.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).scalar_one()
    header = re.compile(rf'^CREATE TABLE "?{table}"? \(')
    if not header.match(found):
        raise RuntimeError(f"unexpected CREATE statement for {table}: {found[:80]!r}")
    rebuilt = f"_rebuilt_{table}"
    created = header.sub(f"CREATE TABLE {rebuilt} (", found)
    for column in columns:
        declared = re.compile(rf"([(,]\s*){column} {old}\b")
        created, count = declared.subn(rf"\1{column} {new}", created)
        if count != 1:
            if re.search(rf"[(,]\s*{column} {new}\b", found):
                continue  # already so
            raise RuntimeError(f"{table}.{column} is not declared {old}")
    if created == header.sub(f"CREATE TABLE {rebuilt} (", found):
        return  # nothing to change
    indexes = [
        row[0]
        for row in connection.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('index', 'trigger')"
            " AND sql IS NOT NULL",
            (table,),
        )
    ]
    connection.exec_driver_sql(created)
    connection.exec_driver_sql(f'INSERT INTO {rebuilt} SELECT * FROM "{table}"')
    connection.exec_driver_sql(f'DROP TABLE "{table}"')
    connection.exec_driver_sql(f'ALTER TABLE {rebuilt} RENAME TO "{table}"')
    for statement in indexes:
        connection.exec_driver_sql(statement)


def _retype_all(old: str, new: str) -> None:
    connection = op.get_bind()
    if connection.dialect.name != "sqlite":
        return
    if connection.exec_driver_sql("PRAGMA foreign_keys").scalar_one():
        raise RuntimeError("tables are rebuilt with foreign keys off (kernel.migrate.upgrade)")
    for table, columns in COLUMNS.items():
        _retype(connection, table, columns, old, new)


def upgrade() -> None:
    _retype_all("BIGINT", "INTEGER")


def downgrade() -> None:
    _retype_all("INTEGER", "BIGINT")
