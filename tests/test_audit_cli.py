"""CLI actions in the operator audit log (issue 35 §4, decision 0057), run in-process as
tests/test_cli.py runs the CLI, on the test session's database, read through the operator API:
each leaves one record by `cli`, a refused one none, and no secret is in any."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from multibank.kernel.db import Database
from tests.test_cli import cli, cli_database, ok, unique_name
from tests.test_cli_devloop import refused

PORTAL = "/portal/api/programmes"


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with cli_database(monkeypatch, database_url):
        yield


async def audit_of(
    client: httpx.AsyncClient, admin: dict[str, str], pid: str
) -> list[dict[str, Any]]:
    r = await client.get(f"{PORTAL}/{pid}/audit?limit=100", headers=admin)
    assert r.status_code == 200, r.text
    records: list[dict[str, Any]] = r.json()["records"]
    return records


async def test_cli_actions_are_audited_as_cli(cli_env, client, admin_headers) -> None:
    name = unique_name()
    made = json.loads(ok(await cli("programme", "create", "--name", name, "--json")))
    pid = made["programmeId"]
    ok(
        await cli(
            "programme",
            "card-fee",
            name,
            "--fee",
            "purchase",
            "--currency",
            "EUR",
            "--amount",
            "15",
        )
    )
    # Refused: a currency the programme does not have; nothing changed, nothing recorded.
    refused(
        await cli(
            "programme",
            "card-fee",
            name,
            "--fee",
            "purchase",
            "--currency",
            "JPY",
            "--amount",
            "15",
        )
    )
    found = await audit_of(client, admin_headers, pid)
    assert [(r["actor"], r["action"]) for r in found] == [
        ("cli", "card_fee.set"),
        ("cli", "programme.create"),
    ]
    created = found[1]
    assert created["target"] == {"kind": "programme", "id": pid}
    fields = {c["field"]: c for c in created["changes"]}
    assert fields["settings.failedLoginLimit"]["after"] == 5  # the default
    fee = {c["field"]: (c["before"], c["after"]) for c in found[0]["changes"]}
    before, after = fee["cardFees.purchase"]
    assert after["EUR"] == 15 and before["EUR"] != 15
    assert made["apiKey"] not in json.dumps(found)


async def test_a_reset_is_audited_under_the_programmes_new_id(
    cli_env, client, admin_headers
) -> None:
    name = unique_name()
    old = json.loads(ok(await cli("programme", "create", "--name", name, "--json")))["programmeId"]
    ok(await cli("programme", "reset", name, "--yes"))
    listed = (await client.get(PORTAL, headers=admin_headers)).json()
    new = next(p["programmeId"] for p in listed if p["name"] == name)
    assert new != old
    [record] = await audit_of(client, admin_headers, new)
    assert (record["actor"], record["action"]) == ("cli", "programme.reset")
    assert record["target"] == {"kind": "programme", "id": new}
    assert f"was programme {old}" in (record["note"] or "")


async def _lift_append_only(conn: AsyncConnection) -> None:
    """What someone with the owner's rights could do: the triggers out of the way."""
    if conn.dialect.name == "postgresql":
        await conn.execute(
            text("ALTER TABLE audit_records DISABLE TRIGGER audit_records_append_only")
        )
    else:
        await conn.execute(text("DROP TRIGGER audit_records_no_update"))
        await conn.execute(text("DROP TRIGGER audit_records_no_delete"))


async def test_audit_verify_names_the_first_break(fresh_database_url, monkeypatch) -> None:
    """Issue 41 §5: `multibank audit verify` walks the chain; a record changed or removed behind
    the server's back is named, with the first break, and the command exits 1."""
    with cli_database(monkeypatch, fresh_database_url):
        ok(await cli("db", "upgrade"))
        names = [unique_name() for _ in range(3)]
        for name in names:
            ok(await cli("programme", "create", "--name", name))
        said = ok(await cli("audit", "verify"))
        assert "audit verify: ok, 3 record(s); head seq 3 hash " in said
        db = Database(fresh_database_url)
        try:
            async with db.engine.begin() as conn:
                rows = (
                    await conn.execute(text("SELECT id, seq FROM audit_records ORDER BY seq"))
                ).all()
                assert [seq for _, seq in rows] == [1, 2, 3]
                await _lift_append_only(conn)
                await conn.execute(
                    text("UPDATE audit_records SET actor = 'someone else' WHERE seq = 2")
                )
            broken = await cli("audit", "verify")
            assert broken.exit_code == 1, broken.output
            assert f"breaks at record {rows[1][0]} (seq 2, programme.create by someone else" in (
                broken.stderr
            )
            assert "does not match its hash" in broken.stderr
            async with db.engine.begin() as conn:
                await conn.execute(text("UPDATE audit_records SET actor = 'cli' WHERE seq = 2"))
            ok(await cli("audit", "verify"))  # put back as it was: whole again
            async with db.engine.begin() as conn:
                await conn.execute(text("DELETE FROM audit_records WHERE seq = 2"))
            removed = await cli("audit", "verify")
            assert removed.exit_code == 1
            assert f"breaks at record {rows[2][0]} (seq 3" in removed.stderr
            assert "seq 2 is missing" in removed.stderr
        finally:
            await db.dispose()
