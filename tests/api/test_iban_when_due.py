"""An IBAN is allocated when its delay has passed, whoever asks (issue 32 §3.1): the clock's
advance allocates what it makes due before it answers, and a deposit or a wire transfer made
once the delay has passed finds the IBAN there without anyone reading the account first. The
allocation's webhook event (`ibans.CREATED`, with the IBAN) goes out once.

(Before, an allocation happened only when the account or its IBAN was read: a simulator deposit
answered DENIED_ACCOUNT_NOT_UPGRADED_TO_IBAN and a wire transfer 409 IBAN_UPGRADE_REQUIRED.)"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from stdnum import iban as stdnum_iban

from tests.api.test_payment_concurrency import _owt
from tests.conftest import ADMIN_TOKEN, Prog
from tests.factories import Identity, open_account, verified

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
HOOKS = "https://93.184.215.14/hooks"  # a public address: events are recorded for delivery


async def pending(client: httpx.AsyncClient, p: Prog, ident: Identity) -> str:
    """A new EUR account of `ident` whose IBAN was requested and is not allocated yet."""
    acc: str = (await open_account(client, ident, "EUR"))["id"]
    r = await client.post(f"/multi/managed_accounts/{acc}/iban", headers=ident.headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"state": "PENDING_ALLOCATION", "bankAccountDetails": []}
    return acc


async def iban_events(client: httpx.AsyncClient, p: Prog, acc: str) -> list[dict[str, Any]]:
    """The account's IBAN webhook events, oldest first, as the operator sees them recorded."""
    r = await client.get(
        f"/portal/api/programmes/{p.id}/webhooks/deliveries",
        headers=ADMIN,
        params={"eventType": "ibans", "limit": 100},
    )
    assert r.status_code == 200, r.text
    mine = [d for d in r.json()["deliveries"] if d["resource"] == f"managed_accounts:{acc}"]
    return list(reversed(mine))


async def sim_deposit(client: httpx.AsyncClient, p: Prog, path: str, **body: Any) -> str:
    r = await client.post(
        f"/simulate/api{path}",
        headers={"programme-key": p.api_key},
        json={"depositAmount": {"currency": "EUR", "amount": 10_000}, **body},
    )
    assert r.status_code == 200, r.text
    code: str = r.json()["code"]
    return code


async def test_the_clock_advance_allocates_what_it_makes_due(client, programme):
    p = await programme(ibanAllocationDelaySeconds=30, webhookUrl=HOOKS)
    ident = await verified(client, p, "corporates")
    acc = await pending(client, p, ident)
    r = await client.post(
        "/simulate/api/clock/advance", headers={"programme-key": p.api_key}, json={"seconds": 31}
    )
    assert r.status_code == 200, r.text
    # Nobody has read the account since: the advance allocated it, and its event says so.
    events = await iban_events(client, p, acc)
    assert [e["eventType"] for e in events] == ["ibans.REQUESTED", "ibans.CREATED"], events
    [details] = events[1]["payload"]["iban"]["bankAccountDetails"]
    iban = details["details"]["iban"]
    assert stdnum_iban.is_valid(iban)
    # Money sent to that IBAN (as a payer who got it from the account holder) arrives.
    assert await sim_deposit(
        client, p, "/accounts/deposit", destinationIbanDetails={"iban": iban}
    ) == ("COMPLETED")
    assert await sim_deposit(client, p, f"/accounts/{acc}/deposit") == "COMPLETED"
    r = await client.get(f"/multi/managed_accounts/{acc}/iban", headers=ident.headers)
    assert r.json()["state"] == "ALLOCATED"
    assert r.json()["bankAccountDetails"][0]["details"]["iban"] == iban
    # One allocation, one event, whoever looked afterwards.
    assert [e["eventType"] for e in await iban_events(client, p, acc)] == [
        "ibans.REQUESTED",
        "ibans.CREATED",
    ]


async def test_a_deposit_and_a_wire_transfer_after_the_delay_need_no_read(client, programme):
    p = await programme(ibanAllocationDelaySeconds=1, webhookUrl=HOOKS)
    ident = await verified(client, p, "corporates")
    paid_in, paying_out = await pending(client, p, ident), await pending(client, p, ident)
    await asyncio.sleep(1.05)  # the delay passes on the programme clock, nobody asking
    # The first incoming payment finds the IBAN there.
    assert await sim_deposit(client, p, f"/accounts/{paid_in}/deposit") == "COMPLETED"
    # Money for the second account comes by a transfer between the owner's accounts, which
    # reads neither account's IBAN.
    r = await client.post(
        "/multi/transfers",
        headers=ident.headers,
        json={
            "profileId": p.profiles["transfers"],
            "source": {"type": "managed_accounts", "id": paid_in},
            "destination": {"type": "managed_accounts", "id": paying_out},
            "destinationAmount": {"currency": "EUR", "amount": 5_000},
        },
    )
    assert r.status_code == 200, r.text
    r = await client.post(
        "/multi/outgoing_wire_transfers", headers=ident.headers, json=_owt(p, paying_out, 4_000)
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "PENDING_CHALLENGE"
    for acc in (paid_in, paying_out):
        types = [e["eventType"] for e in await iban_events(client, p, acc)]
        assert types == ["ibans.REQUESTED", "ibans.CREATED"], (acc, types)
