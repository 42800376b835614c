"""Card payments keep the ledger whole under concurrency, through two real `multibank serve`
processes on one PostgreSQL database (D9, D22, D23):

- 100 authorisations at once through four debit cards whose parent account is funded for 30 of
  them: exactly 30 are approved (the guarded ledger update), the rest DENIED_NOT_ENOUGH_FUNDS;
- 100 at once on a debit card whose spend limit covers 30 of them: exactly 30 approved (the
  card's row lock), the rest DENIED_SPEND_CONTROL;
- 20 settlements of one authorisation at once: one applies, the others find it settled;
- `multibank ledger verify` is clean after each.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.test_ledger_concurrency import (
    assert_ledger_verify_ok,
    fresh_database,
    new_programme,
    two_servers,
)
from tests.conftest import ADMIN_TOKEN, DB_KIND, Prog
from tests.factories import Identity, deposit, open_account, verified

pytestmark = pytest.mark.skipif(
    DB_KIND != "postgres", reason="several server processes share one PostgreSQL database"
)
AMOUNT, PARALLEL, FUNDED_FOR, SETTLERS = 100, 100, 30, 20
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# Idle connections are dropped well before the server closes them (uvicorn keeps one 5 s, the
# client's default too): a request sent on one the server is closing at that moment fails with
# ReadError. It did, on the 100 requests that follow the seconds of `ledger verify`.
LIMITS = httpx.Limits(max_connections=PARALLEL, keepalive_expiry=1)


def _sim(p: Prog) -> dict[str, str]:
    return {"programme-key": p.api_key}


async def _debit_card(
    client: httpx.AsyncClient,
    p: Prog,
    ident: Identity,
    funds: int,
    spend_limit: int,
    account: str | None = None,
) -> tuple[str, str]:
    """A debit card with spend limit ALWAYS `spend_limit` on `account`, or on a new EUR account
    holding `funds`."""
    if account is None:
        account = (await open_account(client, ident, "EUR"))["id"]
        assert await deposit(client, p, account, funds) == "COMPLETED"
    body: dict[str, Any] = {
        "profileId": p.profiles["corporateDebitManagedCard"],
        "friendlyName": "Ops",
        "nameOnCard": "Ada Lovelace",
        "cardholderMobileNumber": "+35699123456",
        "billingAddress": {
            "addressLine1": "1 Analytical Street",
            "city": "Valletta",
            "postCode": "VLT 1000",
            "country": "MT",
        },
        "mode": "DEBIT_MODE",
        "parentManagedAccountId": account,
    }
    r = await client.post("/multi/managed_cards", headers=ident.headers, json=body)
    assert r.status_code == 200, r.text
    card = r.json()["id"]
    rules = {
        "spendLimit": [{"value": {"currency": "EUR", "amount": spend_limit}, "interval": "ALWAYS"}]
    }
    r = await client.post(
        f"/multi/managed_cards/{card}/spend_rules", headers=ident.headers, json=rules
    )
    assert r.status_code == 204, r.text
    return card, account


async def _hundred_authorisations(
    clients: list[httpx.AsyncClient], p: Prog, cards: list[str]
) -> Counter[str]:
    body = {"merchantName": "Shop", "transactionAmount": {"currency": "EUR", "amount": AMOUNT}}
    answers = await asyncio.gather(
        *(
            clients[i % len(clients)].post(
                f"/simulate/api/cards/{cards[i % len(cards)]}/authorise", headers=_sim(p), json=body
            )
            for i in range(PARALLEL)
        )
    )
    assert all(a.status_code == 200 for a in answers), [
        a.text for a in answers if a.status_code != 200
    ][:3]
    return Counter(a.json()["code"] for a in answers)


async def _balances(client: httpx.AsyncClient, ident: Identity, account: str) -> tuple[int, int]:
    r = await client.get(f"/multi/managed_accounts/{account}", headers=ident.headers)
    assert r.status_code == 200, r.text
    b = r.json()["balances"]
    return b["availableBalance"], b["actualBalance"]


async def test_two_serve_processes_authorise_and_settle_card_payments_once(tmp_path: Path):
    async with (
        fresh_database(tmp_path) as url,
        two_servers(url, tmp_path) as bases,
        contextlib.AsyncExitStack() as stack,
    ):
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=b, timeout=120, limits=LIMITS)
            )
            for b in bases
        ]
        first = clients[0]
        p = await new_programme(first, ADMIN)
        ident = await verified(first, p, "corporates")

        # Funds for 30, spent through four cards at once: only the guarded update decides.
        card, account = await _debit_card(first, p, ident, AMOUNT * FUNDED_FOR, 10**9)
        cards = [card]
        for _ in range(3):
            cards.append((await _debit_card(first, p, ident, 0, 10**9, account))[0])
        codes = await _hundred_authorisations(clients, p, cards)
        assert codes == {
            "APPROVED": FUNDED_FOR,
            "DENIED_NOT_ENOUGH_FUNDS": PARALLEL - FUNDED_FOR,
        }
        assert await _balances(first, ident, account) == (0, AMOUNT * FUNDED_FOR)
        await assert_ledger_verify_ok(url)

        # A spend limit for 30.
        card, account = await _debit_card(first, p, ident, AMOUNT * PARALLEL, AMOUNT * FUNDED_FOR)
        codes = await _hundred_authorisations(clients, p, [card])
        assert codes == {"APPROVED": FUNDED_FOR, "DENIED_SPEND_CONTROL": PARALLEL - FUNDED_FOR}
        assert await _balances(first, ident, account) == (
            AMOUNT * (PARALLEL - FUNDED_FOR),
            AMOUNT * PARALLEL,
        )
        await assert_ledger_verify_ok(url)

        # One authorisation settled by 20 requests at once: once.
        card, account = await _debit_card(first, p, ident, 1000, 1000)
        body = {"merchantName": "Shop", "transactionAmount": {"currency": "EUR", "amount": 300}}
        r = await first.post(f"/simulate/api/cards/{card}/authorise", headers=_sim(p), json=body)
        auth = r.json()["authorisationId"]
        settle = f"/simulate/api/cards/{card}/authorisations/{auth}/settle"
        answers = await asyncio.gather(
            *(clients[i % 2].post(settle, headers=_sim(p)) for i in range(SETTLERS))
        )
        assert all(a.status_code == 200 for a in answers)
        assert Counter(a.json()["code"] for a in answers) == {
            "COMPLETED": 1,
            "DENIED_AUTHORISATION_NOT_PENDING": SETTLERS - 1,
        }
        fee = 10  # the default purchase fee (D19)
        assert await _balances(first, ident, account) == (1000 - 300 - fee, 1000 - 300 - fee)
        await assert_ledger_verify_ok(url)
