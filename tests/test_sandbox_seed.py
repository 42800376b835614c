"""`multibank sandbox seed`: run in-process (CliRunner) on a database of the test's own, then
checked through the HTTP API of an application on that same database, as a client would: each
printed token works, each account holds 1000.00 EUR and has its IBAN, each SMS factor is active,
each identity is verified and its e-mail too. A live programme is refused.

The CLI calls asyncio.run, which cannot run inside the test's loop: it runs in a thread."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from click.testing import Result
from typer.testing import CliRunner

from multibank.app import build_container, create_app
from multibank.cli import app as cli_app
from multibank.settings import Settings, get_settings

PASSWORD_RULES = re.compile(r"^(?=.*[a-z])(?=.*[A-Z])(?=.*[0-9])(?=.*[^A-Za-z0-9]).{8,30}$")
IBAN = re.compile(r"^[A-Z]{2}[0-9]{2}[A-Z0-9]{10,30}$")
DIGITS = re.compile(r"^[0-9]{1,19}$")
FIELDS = ["email", "password", "identityId", "rootUserId", "accountId", "iban", "token"]
CHEAP_HASHES = {"argon2_memory_kib": 1024, "argon2_time_cost": 1}


@pytest.fixture
async def seed_db(fresh_database_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """The CLI works on a database of this test's own, migrated (as `db upgrade` leaves it: no
    programme, no admin token). Seeding never makes a database (test_cli.py)."""
    monkeypatch.setenv("MULTIBANK_DATABASE_URL", fresh_database_url)
    for name, value in CHEAP_HASHES.items():
        monkeypatch.setenv(f"MULTIBANK_{name.upper()}", str(value))
    get_settings.cache_clear()
    try:
        ok(await cli("db", "upgrade"))
        yield fresh_database_url
    finally:
        get_settings.cache_clear()


async def cli(*args: str) -> Result:
    return await asyncio.to_thread(CliRunner().invoke, cli_app, list(args))


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result.stdout


@contextlib.asynccontextmanager
async def api(url: str) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A client of an application on the database at `url` (as `multibank serve` would be), and
    the operator API admin token it uses."""
    settings = Settings(database_url=url, log_level="WARNING", **CHEAP_HASHES)
    container = build_container(settings)
    application = create_app(container=container)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            yield c, container.admin_token or ""


async def check_identity(
    client: httpx.AsyncClient, api_key: str, kind: str, seeded: dict[str, Any]
) -> None:
    """What a client holding the printed credentials sees."""
    assert list(seeded) == FIELDS
    assert seeded["email"].endswith("@example.com")
    assert PASSWORD_RULES.match(seeded["password"])
    for key in ("identityId", "rootUserId", "accountId"):
        assert DIGITS.match(seeded[key]), (key, seeded[key])
    assert IBAN.match(seeded["iban"])
    h = {"api-key": api_key, "Authorization": f"Bearer {seeded['token']}"}

    r = await client.get("/multi/managed_accounts", headers=h)
    assert r.status_code == 200, r.text
    [account] = r.json()["accounts"]
    assert account["id"] == seeded["accountId"]
    assert account["currency"] == "EUR"
    assert account["state"] == {"state": "ACTIVE"}
    assert account["balances"] == {"availableBalance": 100000, "actualBalance": 100000}

    r = await client.get(f"/multi/managed_accounts/{seeded['accountId']}/iban", headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "ALLOCATED"
    ibans = [d["details"].get("iban") for d in r.json()["bankAccountDetails"]]
    assert seeded["iban"] in ibans

    r = await client.get("/multi/authentication_factors", headers=h)
    assert r.status_code == 200, r.text
    assert r.json() == {"factors": [{"type": "OTP", "status": "ACTIVE", "channel": "SMS"}]}

    r = await client.get(f"/multi/{kind}", headers=h)
    assert r.status_code == 200, r.text
    me = r.json()
    assert me["id"]["id"] == seeded["identityId"]
    assert me["rootUser"]["id"]["id"] == seeded["rootUserId"]
    assert me["rootUser"]["email"] == seeded["email"]
    assert me["rootUser"]["emailVerified"] is True
    assert me["rootUser"]["mobileNumberVerified"] is True  # by the SMS enrolment
    if kind == "corporates":
        r = await client.get("/multi/corporates/kyb", headers=h)
        assert r.status_code == 200, r.text
        assert r.json()["kybStatus"] == "APPROVED"
    else:
        r = await client.get("/multi/consumers/kyc", headers=h)
        assert r.status_code == 200, r.text
        assert r.json()["fullDueDiligence"] == "APPROVED"

    # The e-mail and password log in (a new token when this one has lapsed).
    r = await client.post(
        "/multi/login_with_password",
        headers={"api-key": api_key},
        json={"email": seeded["email"], "password": {"value": seeded["password"]}},
    )
    assert r.status_code == 200, r.text
    assert r.json()["token"] != seeded["token"]


async def add_card(
    client: httpx.AsyncClient, api_key: str, kind: str, seeded: dict[str, Any], profile: str
) -> None:
    """Every field of the identity's address is filled in, and the address is a card's billing
    address as the demo app's add-card page sends it (tests/api/test_demo_app_cards.py)."""
    h = {"api-key": api_key, "Authorization": f"Bearer {seeded['token']}"}
    me = (await client.get(f"/multi/{kind}", headers=h)).json()
    address = (
        me["company"]["businessAddress"] if kind == "corporates" else me["rootUser"]["address"]
    )
    fields = {"addressLine1", "addressLine2", "city", "postCode", "state", "country"}
    assert set(address) == fields, address
    assert all(isinstance(v, str) and v.strip() for v in address.values()), address
    card = {
        "profileId": profile,
        "friendlyName": "Seeded",
        "nameOnCard": "Seeded Card",
        "cardholderMobileNumber": "+447700900123",
        "billingAddress": address,
        "mode": "PREPAID_MODE",
        "currency": me["baseCurrency"],
    }
    r = await client.post("/multi/managed_cards", headers=h, json=card)
    assert r.status_code == 200, r.text
    assert r.json()["billingAddress"] == address


def text_fields(out: str, kind: str) -> dict[str, str]:
    """The fields of one identity in the text output."""
    block = out.split(f"\n{kind}\n", 1)[1]
    labels = {
        "e-mail": "email",
        "password": "password",
        "identity id": "identityId",
        "root user id": "rootUserId",
        "account id": "accountId",
        "IBAN": "iban",
        "token": "token",
    }
    found: dict[str, str] = {}
    for line in block.splitlines():
        label, _, value = line.strip().partition(":")
        if line.startswith("  ") and label in labels and labels[label] not in found:
            found[labels[label]] = value.split()[0]
    return {key: found[key] for key in FIELDS}


async def test_seed_json_on_a_new_database(seed_db):
    """On a database with no programme: the `default` programme, then the two identities."""
    result = await cli("sandbox", "seed", "--json")
    out = ok(result)
    assert out.count("\n") == 1, out
    data = json.loads(out)
    assert list(data) == ["programme", "programmeId", "apiKey", "corporate", "consumer"]
    assert data["programme"] == "default"
    assert data["apiKey"].startswith("mb_sbx_")
    assert data["corporate"]["email"] != data["consumer"]["email"]
    # The database had no operator admin token: it was generated now, and said once (stderr).
    said = re.search(r"^admin token: (\S+) \(generated now; ", result.stderr, re.M)
    assert said, result.stderr

    async with api(seed_db) as (client, admin_token):
        await check_identity(client, data["apiKey"], "corporates", data["corporate"])
        await check_identity(client, data["apiKey"], "consumers", data["consumer"])
        assert said.group(1) == admin_token
        r = await client.get(
            f"/portal/api/programmes/{data['programmeId']}/summary",
            headers={"Authorization": f"Bearer {admin_token}"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["apiKey"] == data["apiKey"]
        profiles = r.json()["profiles"]
        for kind, card_profile in (
            ("corporates", "corporatePrepaidManagedCard"),
            ("consumers", "consumerPrepaidManagedCard"),
        ):
            await add_card(client, data["apiKey"], kind, data[kind[:-1]], profiles[card_profile])

    # The default programme `multibank serve` shows is the one seeded; the ledger adds up.
    shown = json.loads(ok(await cli("programme", "show", "default", "--json")))
    assert shown["programmeId"] == data["programmeId"]
    assert "ledger verify: ok" in ok(await cli("ledger", "verify"))


async def test_seed_text_output_of_a_named_programme(seed_db):
    created = json.loads(ok(await cli("programme", "create", "--name", "trial", "--json")))
    # Step-up demanded: the account is still opened (the seeding session steps up by SMS).
    ok(await cli("programme", "create", "--name", "strict", "--step-up-required"))

    out = ok(await cli("sandbox", "seed", "--programme", "trial"))
    assert out.startswith(f"programme 'trial': id {created['programmeId']}\n")
    assert f"  api-key: {created['apiKey']}\n" in out
    assert "123456" in out
    assert "(1000.00 EUR)" in out
    corporate, consumer = text_fields(out, "corporate"), text_fields(out, "consumer")
    # `programme create` makes no operator admin token: the first seed did, and said so once.
    assert out.rstrip().splitlines()[-1].startswith("admin token: ")
    assert out.rstrip().endswith("(generated now; `multibank admin-token` shows it again)")
    assert "default" not in ok(await cli("programme", "list"))

    result = await cli("sandbox", "seed", "--programme", "strict", "--json")
    strict = json.loads(ok(result))
    assert "admin token" not in result.output

    async with api(seed_db) as (client, _):
        await check_identity(client, created["apiKey"], "corporates", corporate)
        await check_identity(client, created["apiKey"], "consumers", consumer)
        await check_identity(client, strict["apiKey"], "corporates", strict["corporate"])


async def test_seed_refuses_a_live_programme(seed_db):
    ok(await cli("programme", "create", "--name", "production", "--live"))
    listed = ok(await cli("programme", "list"))

    result = await cli("sandbox", "seed", "--programme", "production")
    assert result.exit_code == 1, (result.output, result.exception)
    assert result.stdout == ""
    opened, message = result.stderr.strip().splitlines()  # the database, then the refusal
    assert opened.startswith("database: ")
    assert "production" in message and "live" in message and "sandbox" in message

    # Nothing was created: no `default` programme either.
    assert ok(await cli("programme", "list")) == listed


async def test_seed_of_an_unknown_programme_fails(seed_db):
    result = await cli("sandbox", "seed", "--programme", "nosuch")
    assert result.exit_code == 1, (result.output, result.exception)
    assert "nosuch" in result.stderr and "not found" in result.stderr
    assert result.stdout == ""


async def test_seed_deposits_are_audited(seed_db):
    """Issue 41 §5: the money `sandbox seed` puts in is in the audit log, one record per account,
    by `cli`."""
    from sqlalchemy import select

    from multibank.audit.models import AuditRecord
    from multibank.kernel.db import Database

    seeded = json.loads(ok(await cli("sandbox", "seed", "--json")))
    db = Database(seed_db)
    try:
        async with db.transaction() as session:
            rows = list(
                await session.scalars(
                    select(AuditRecord)
                    .where(AuditRecord.action == "account.deposit")
                    .order_by(AuditRecord.seq)
                )
            )
    finally:
        await db.dispose()
    accounts = [seeded["corporate"]["accountId"], seeded["consumer"]["accountId"]]
    assert [(r.actor, r.target_kind, r.target_id) for r in rows] == [
        ("cli", "account", a) for a in accounts
    ]
    assert all(str(r.programme_id) == seeded["programmeId"] for r in rows)
    assert all("1000.00 EUR by sandbox seed" in (r.note or "") for r in rows)
