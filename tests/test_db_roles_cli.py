"""Two PostgreSQL roles (issue 41 §5, decision 0075): the schema's owner runs `multibank db upgrade
--server-role ROLE`, which grants the server's role what the server needs; connected as that role,
nothing can rewrite history: UPDATE, DELETE and TRUNCATE of postings and audit records, a
transaction's details, an event's payload, `ALTER TABLE … DISABLE TRIGGER`, `SET
session_replication_role` and new tables all fail, while the server itself works. PostgreSQL only:
SQLite has no roles. Each test makes a role of its own, with a unique name, and drops it."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import make_url, text
from sqlalchemy.exc import DBAPIError

from multibank.kernel.db import Database
from multibank.kernel.migrate import grant_server_role, upgrade
from tests.api import test_ratelimits
from tests.api.test_portal_web import PORTAL_API
from tests.conftest import ADMIN_TOKEN, DB_KIND, PG_ADMIN_URL, Prog, _pg_admin
from tests.factories import deposit, open_account, verified
from tests.test_cli import cli, cli_database, ok

pytestmark = pytest.mark.skipif(
    DB_KIND != "postgres", reason="database roles are PostgreSQL's; a SQLite file has none"
)
server = test_ratelimits.server  # servers of their own, here on the role's connection
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# Each must fail for the server's role: (statement, what PostgreSQL says).
FORBIDDEN = [
    *(
        (sql.format(table=table), "permission denied")
        for table in ("postings", "audit_records")
        for sql in (
            "UPDATE {table} SET id = id",
            "DELETE FROM {table}",
            "TRUNCATE {table}",
        )
    ),
    ("UPDATE ledger_transactions SET details = details", "permission denied"),
    ("DELETE FROM ledger_transactions", "permission denied"),
    ("UPDATE webhook_events SET payload = payload", "permission denied"),
    ("DELETE FROM webhook_events", "permission denied"),
    ("ALTER TABLE postings DISABLE TRIGGER postings_append_only", "must be owner"),
    ("ALTER TABLE audit_records DISABLE TRIGGER ALL", "must be owner"),
    ("SET session_replication_role = replica", "permission denied"),
    ("CREATE TABLE sneaky (id int)", "permission denied"),
    ("DROP TABLE postings", "must be owner"),
]


@pytest.fixture
async def server_role(fresh_database_url: str) -> AsyncIterator[tuple[str, str]]:
    """(the role's name, the database URL that connects as it), on a database of the test's own."""
    role = f"h_app_{secrets.token_hex(5)}"
    await _pg_admin(f'CREATE ROLE "{role}" LOGIN')
    try:
        yield role, make_url(fresh_database_url).set(username=role).render_as_string(False)
    finally:
        owner = Database(fresh_database_url)
        try:
            async with owner.engine.begin() as conn:
                await conn.execute(text(f'DROP OWNED BY "{role}"'))
        finally:
            await owner.dispose()
        await _pg_admin(f'DROP ROLE IF EXISTS "{role}"')


async def test_the_server_role_cannot_rewrite_history(
    fresh_database_url, server_role, monkeypatch
) -> None:
    role, role_url = server_role
    with cli_database(monkeypatch, fresh_database_url):
        said = ok(await cli("db", "upgrade", "--server-role", role))
        assert f"role {role}: granted what the server needs" in said
        ok(await cli("db", "upgrade", "--server-role", role))  # again: the same grants
    db = Database(role_url)
    try:
        for sql, says in FORBIDDEN:
            with pytest.raises(DBAPIError, match=says):
                async with db.engine.begin() as conn:
                    await conn.execute(text(sql))
        async with db.engine.begin() as conn:  # what it may do
            await conn.execute(text("SELECT count(*) FROM postings"))
            await conn.execute(text("UPDATE webhook_events SET attempts = attempts"))
            await conn.execute(text("UPDATE ledger_transactions SET state = state"))
    finally:
        await db.dispose()


async def test_db_upgrade_refuses_a_role_that_could(fresh_database_url, monkeypatch) -> None:
    """The check: the owner itself, a superuser, a missing role are refused in one line."""
    owner = make_url(PG_ADMIN_URL).username or "postgres"
    with cli_database(monkeypatch, fresh_database_url):
        for role, says in (
            (owner, "superuser"),
            (f"h_missing_{secrets.token_hex(4)}", "does not exist"),
            ("bad name; DROP TABLE x", "not a plain role name"),
        ):
            r = await cli("db", "upgrade", "--server-role", role)
            assert r.exit_code == 1 and says in r.stderr, (role, r.output)


async def test_the_server_runs_as_its_role(
    fresh_database_url, server_role, server, container, monkeypatch
) -> None:
    """A server connected as its role serves a whole journey: a programme, a customer, an
    account and a deposit, settings changed (audited), a wrong admin token (counted), a card
    pool; and `audit verify` runs as the role too."""
    role, role_url = server_role
    with cli_database(monkeypatch, fresh_database_url):
        ok(await cli("db", "upgrade", "--server-role", role))
    srv = await server(database_url=role_url)
    srv.container.card_keyring = container.card_keyring
    client = srv.client()
    r = await client.post(PORTAL_API, headers=ADMIN, json={"name": f"r{secrets.token_hex(4)}"})
    assert r.status_code == 201, r.text
    made = r.json()
    p = Prog(made["programmeId"], made["apiKey"], made["profiles"], made["feeTypes"])
    ident = await verified(client, p, "corporates")
    account = (await open_account(client, ident, "EUR"))["id"]
    await deposit(client, p, account, 500)
    r = await client.patch(
        f"{PORTAL_API}/{p.id}/settings", headers=ADMIN, json={"failedLoginLimit": 7}
    )
    assert r.status_code == 200, r.text
    wrong = {"Authorization": "Bearer wrong"}
    assert (await client.get(PORTAL_API, headers=wrong)).status_code == 401
    r = await client.post(
        f"{PORTAL_API}/{p.id}/card_pool",
        headers=ADMIN,
        json={"profileId": p.profiles["corporatePrepaidManagedCard"], "count": 1},
    )
    assert r.status_code == 201, r.text
    with cli_database(monkeypatch, role_url):
        assert "audit verify: ok" in ok(await cli("audit", "verify"))


async def test_serve_as_the_server_role_asks_for_the_owners_upgrade(
    fresh_database_url, server_role, monkeypatch
) -> None:
    """A schema behind the release, and `serve` started as the server's role: one line saying to
    run `db upgrade` as the owner, exit 2, no traceback."""
    role, role_url = server_role
    db = Database(fresh_database_url)
    try:
        await upgrade(db, "0027")
        await grant_server_role(db, role)
    finally:
        await db.dispose()
    with cli_database(monkeypatch, role_url):
        r = await cli("serve", "--port", "18577")
    assert r.exit_code == 2, r.output
    assert "run `multibank db upgrade` as the schema's owner" in r.stderr
    assert "Traceback" not in r.output
