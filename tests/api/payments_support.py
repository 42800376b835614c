"""Helpers of the payment tests (transfers, sends, outgoing wire transfers): programme settings
and fees through the operator API, factor enrolment, balances, statements and the simulator, as
a client developer and an operator would use them."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.fees_support import PORTAL
from tests.conftest import Prog
from tests.factories import CODE, Identity, deposit, open_account, verified

OTP = "/multi/authentication_factors/otp/SMS"


async def settings(
    client: httpx.AsyncClient, admin: dict[str, str], p: Prog, **values: Any
) -> None:
    r = await client.patch(f"{PORTAL}/{p.id}/settings", headers=admin, json=values)
    assert r.status_code == 200, r.text


async def profile(
    client: httpx.AsyncClient, admin: dict[str, str], p: Prog, kind: str, **values: Any
) -> None:
    r = await client.patch(
        f"{PORTAL}/{p.id}/profiles/{p.profiles[kind]}", headers=admin, json=values
    )
    assert r.status_code == 200, r.text


async def enrol_sms(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    r = await client.post(OTP, headers=headers)
    assert r.status_code == 204, r.text
    r = await client.post(f"{OTP}/verify", headers=headers, json={"verificationCode": CODE})
    assert r.status_code == 204, r.text


async def enrol_push(client: httpx.AsyncClient, headers: dict[str, str], channel: str) -> None:
    r = await client.post(f"/multi/authentication_factors/push/{channel}", headers=headers)
    assert r.status_code == 200, r.text


async def balances(client: httpx.AsyncClient, ident: Identity, account_id: str) -> tuple[int, int]:
    """(available, actual)."""
    r = await client.get(f"/multi/managed_accounts/{account_id}", headers=ident.headers)
    assert r.status_code == 200, r.text
    b = r.json()["balances"]
    return b["availableBalance"], b["actualBalance"]


async def entries(client: httpx.AsyncClient, ident: Identity, acc: str) -> list[dict[str, Any]]:
    """The account's statement, newest first, the account's own create event left out."""
    r = await client.get(
        f"/multi/managed_accounts/{acc}/statement",
        headers=ident.headers,
        params={"showFundMovementsOnly": "false"},
    )
    assert r.status_code == 200, r.text
    return [e for e in r.json()["entry"] if e["transactionId"]["type"] != "INSTRUMENT_CREATE"]


async def advance(client: httpx.AsyncClient, p: Prog, seconds: int) -> None:
    r = await client.post(
        "/simulate/api/clock/advance",
        headers={"programme-key": p.api_key},
        json={"seconds": seconds},
    )
    assert r.status_code == 200, r.text


async def simulate(client: httpx.AsyncClient, p: Prog, path: str) -> httpx.Response:
    return await client.post(f"/simulate/api{path}", headers={"programme-key": p.api_key})


async def customer(
    client: httpx.AsyncClient,
    p: Prog,
    kind: str = "corporates",
    funds: int = 0,
    currency: str = "EUR",
    sms: bool = True,
) -> tuple[Identity, str]:
    """A verified identity with one account (with its IBAN) holding `funds`, and (with `sms`)
    an enrolled SMS factor."""
    ident = await verified(client, p, kind)
    acc = (await open_account(client, ident, currency, iban=True))["id"]
    if funds:
        assert await deposit(client, p, acc, funds, currency) == "COMPLETED"
    if sms:
        await enrol_sms(client, ident.headers)
    return ident, acc
