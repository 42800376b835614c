"""CLI actions in the operator audit log (issue 35 §4, decision 0057), run in-process as
tests/test_cli.py runs the CLI, on the test session's database, read through the operator API:
each leaves one record by `cli`, a refused one none, and no secret is in any."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

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
