"""The schema comes from Alembic migrations only (D9): after `upgrade head` the database matches
the models exactly, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import make_url, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from multibank.kernel.db import Base, Database
from multibank.kernel.migrate import alembic_config, downgrade, upgrade
from multibank.models import load_all
from multibank.programmes import repository


async def test_migrations_match_the_models(container):
    load_all()

    def diff(conn: Connection) -> list[object]:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))

    async with container.db.engine.connect() as conn:
        differences = await conn.run_sync(diff)
    assert differences == []


async def test_programmes_of_an_older_database_get_their_payment_profiles(fresh_database_url):
    """Migration 0009 (D12): a programme created before money movement gets one transfer, one
    send and one outgoing-wire-transfer profile over the currencies its profiles serve, with the
    default fees, and its other profiles are untouched."""
    db = Database(fresh_database_url)
    try:
        await upgrade(db, "0008")
        async with db.engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO programmes (id, name, mode, step_up_required, failed_login_limit,"
                    " iban_allocation_delay_seconds, clock_offset_ms, created_at)"
                    " VALUES (1, 'old', 'sandbox', false, 5, 2, 0, 0)"
                )
            )
            for pid, kind, currencies in (
                (11, "corporate", '["EUR"]'),
                (12, "consumer", '["GBP"]'),
            ):
                await conn.execute(
                    text(
                        "INSERT INTO profiles (id, programme_id, kind, currencies, active,"
                        " created_at) VALUES (:id, 1, :kind, :currencies, true, 0)"
                    ),
                    {"id": pid, "kind": kind, "currencies": currencies},
                )
        await upgrade(db)
        async with db.transaction() as session:
            profiles = {p.kind: p for p in await repository.list_profiles(session, 1)}
        assert set(profiles) == {
            "corporate",
            "consumer",
            "transfers",
            "sends",
            "outgoingWireTransfers",
            # Migration 0018 (D19): and the four card profiles, over the same currencies.
            "corporatePrepaidManagedCard",
            "corporateDebitManagedCard",
            "consumerPrepaidManagedCard",
            "consumerDebitManagedCard",
            # Migration 0031 (D39): and the linked-account profile, over EUR and GBP.
            "linkedAccounts",
        }
        assert profiles["linkedAccounts"].currencies == ["EUR", "GBP"]
        assert profiles["corporatePrepaidManagedCard"].currencies == ["EUR", "GBP"]
        assert profiles["consumerDebitManagedCard"].fees is None
        assert profiles["corporate"].fees is None and profiles["corporate"].id == 11
        assert profiles["transfers"].currencies == ["EUR", "GBP"]
        assert profiles["transfers"].fees == {"EUR": 0, "GBP": 0}
        assert profiles["sends"].fees == {"EUR": 0, "GBP": 0}
        assert profiles["outgoingWireTransfers"].fees == {"EUR": 100, "GBP": 100}
    finally:
        await db.dispose()


def test_a_percent_encoded_url_reaches_alembic_as_it_is():
    """A Unix socket (`?host=%2Fvar%2Frun%2Fpostgresql`) or a password with `%40` is written
    percent-encoded; Alembic's configparser must not read that as interpolation."""
    url = "postgresql+asyncpg://app:p%40ss@/bank?host=%2Fvar%2Frun%2Fpostgresql"
    assert alembic_config(url).get_main_option("sqlalchemy.url") == url


async def test_a_database_whose_url_holds_a_percent_sign_is_migrated(fresh_database_url):
    """On SQLite a file named `100%.db`; on PostgreSQL a percent-encoded password (the
    server trusts local connections, so any password is accepted)."""
    url = make_url(fresh_database_url)
    if url.get_backend_name() == "sqlite":
        url = url.set(database=str(Path(url.database or "").with_name("100%.db")))
    else:
        url = url.set(password="p@ss%")
    rendered = url.render_as_string(hide_password=False)
    assert "%" in rendered
    db = Database(rendered)
    try:
        await upgrade(db)
        async with db.transaction() as session:
            assert await repository.list_profiles(session, 1) == []
    finally:
        await db.dispose()


async def test_an_older_sqlite_database_keeps_its_rows_when_ids_become_rowids(fresh_database_url):
    """Migration 0015 (decision 0030): on SQLite every table is rebuilt so that its id is the
    rowid (declared INTEGER, no separate index of ids); rows, references and indexes are kept,
    and foreign keys are enforced again afterwards. PostgreSQL's tables are left as they were."""
    db = Database(fresh_database_url)
    try:
        await upgrade(db, "0014")
        big = 913_770_704_262_664_192  # a time-ordered id of kernel/ids.py: beyond 32 bits
        async with db.engine.begin() as conn:
            for sql, params in (
                (
                    "INSERT INTO programmes (id, name, mode, step_up_required, failed_login_limit,"
                    " iban_allocation_delay_seconds, clock_offset_ms, created_at)"
                    " VALUES (:id, 'old', 'sandbox', false, 5, 2, 0, 0)",
                    {"id": big},
                ),
                (
                    "INSERT INTO ledger_accounts (id, programme_id, kind, currency, available,"
                    " actual, created_at, posting_count, movement_count)"
                    " VALUES (:id, :p, 'MANAGED_ACCOUNT', 'EUR', 700, 700, 0, 1, 1)",
                    {"id": big + 1, "p": big},
                ),
                (
                    "INSERT INTO ledger_transactions (id, programme_id, type, state, details,"
                    " created_at) VALUES (:id, :p, 'DEPOSIT', 'COMPLETED', '{}', 0)",
                    {"id": big + 2, "p": big},
                ),
                (
                    "INSERT INTO postings (id, programme_id, transaction_id, account_id, currency,"
                    " available_amount, actual_amount, available_after, actual_after, created_at)"
                    " VALUES (:id, :p, :t, :a, 'EUR', 700, 700, 700, 700, 0)",
                    {"id": big + 3, "p": big, "t": big + 2, "a": big + 1},
                ),
            ):
                await conn.execute(text(sql), params)
        await upgrade(db)
        async with db.engine.connect() as conn:
            posting = (
                await conn.execute(
                    text("SELECT id, transaction_id, account_id, actual_after FROM postings")
                )
            ).one()
            assert tuple(posting) == (big + 3, big + 2, big + 1, 700)
            balance = (
                await conn.execute(
                    text("SELECT available FROM ledger_accounts WHERE id = :id"), {"id": big + 1}
                )
            ).scalar_one()
            assert balance == 700
            if db.is_sqlite:
                for table in ("programmes", "ledger_accounts", "ledger_transactions", "postings"):
                    columns = (await conn.exec_driver_sql(f"PRAGMA table_info({table})")).all()
                    assert [(c[1], c[2], c[5]) for c in columns if c[5]] == [("id", "INTEGER", 1)]
                    # the id is the rowid itself: no index of ids beside the table
                    assert (
                        await conn.exec_driver_sql(f"SELECT rowid = id FROM {table}")
                    ).scalar_one() == 1
                indexes = {
                    row[0]
                    for row in await conn.exec_driver_sql(
                        "SELECT name FROM sqlite_master WHERE tbl_name = 'postings'"
                        " AND type = 'index'"
                    )
                }
                assert indexes == {
                    "ix_postings_entries",  # 0017 on: the statement's index
                    "ix_postings_account_seq",
                    "ix_postings_pending_id",
                    "ix_postings_transaction_id",
                }
                assert (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar_one() == 1
                assert (await conn.exec_driver_sql("PRAGMA foreign_key_check")).all() == []
        # Enforced again: a posting of no account is refused.
        with pytest.raises(IntegrityError):
            async with db.engine.begin() as conn:
                await conn.execute(
                    text(
                        "INSERT INTO postings (id, programme_id, transaction_id, account_id,"
                        " currency, available_amount, actual_amount, available_after,"
                        " actual_after, created_at) VALUES (1, :p, :t, 42, 'EUR', 1, 1, 1, 1, 0)"
                    ),
                    {"p": big, "t": big + 2},
                )
    finally:
        await db.dispose()


async def test_the_rowid_migration_goes_back_down(fresh_database_url):
    """0015 down again: ids are declared BIGINT as 0014 made them, and rows stay."""
    db = Database(fresh_database_url)
    try:
        await upgrade(db)
        await downgrade(db, "0014")
        if db.is_sqlite:
            async with db.engine.connect() as conn:
                columns = (await conn.exec_driver_sql("PRAGMA table_info(postings)")).all()
                assert [(c[1], c[2]) for c in columns if c[5]] == [("id", "BIGINT")]
        await upgrade(db)
        async with db.transaction() as session:
            assert await repository.list_profiles(session, 1) == []
    finally:
        await db.dispose()


async def test_audit_records_written_before_the_chain_are_chained(fresh_database_url):
    """Migration 0028 (issue 41 §5): the records of an older database join the hash chain,
    oldest first, so `audit verify` vouches for them too; and the migration goes back down."""
    from multibank.audit import chain

    db = Database(fresh_database_url)
    try:
        await upgrade(db, "0027")
        async with db.engine.begin() as conn:
            for n, (at, changes) in enumerate(
                [(30, None), (10, '{"settings.failedLoginLimit": [5, 6]}'), (20, '{"a": {"1": 2}}')]
            ):
                await conn.execute(
                    text(
                        "INSERT INTO audit_records (id, at, actor, action, changes, note)"
                        " VALUES (:id, :at, 'cli', 'programme.settings', :changes, :note)"
                    ),
                    {"id": 100 + n, "at": at, "changes": changes, "note": f"n{n}"},
                )
        await upgrade(db)
        async with db.transaction() as session:
            verdict = await chain.verify(session)
            order = (await session.execute(text("SELECT id FROM audit_records ORDER BY seq"))).all()
        assert verdict.broken_at is None and verdict.records == 3, verdict
        assert [row.id for row in order] == [101, 102, 100]  # by time
        await downgrade(db, "0027")
        await upgrade(db)
    finally:
        await db.dispose()
