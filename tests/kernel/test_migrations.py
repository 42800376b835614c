"""The schema comes from Alembic migrations only (D9): after `upgrade head` the database matches
the models exactly, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import make_url, text
from sqlalchemy.engine import Connection

from multibank.kernel.db import Base, Database
from multibank.kernel.migrate import alembic_config, upgrade
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
        }
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
