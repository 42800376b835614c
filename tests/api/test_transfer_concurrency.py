"""Transfers keep the ledger whole under concurrency (issue 12), on the database under test:

- 50 transfers A→B and 50 B→A at once on the same two accounts: no deadlock, no 5xx, every one
  accounted for, money conserved (A + B + revenue is what was deposited), `ledger verify` clean;
- the same `idempotency-ref` sent 20 times at once: one transfer, 20 identical answers;
- both through one app, through two app instances sharing the database, and through two real
  `multibank serve` processes.

Each transfer takes both accounts' rows in id order (test_ledger_concurrency.py has the same
proofs for fee charges), so opposite directions cannot wait on each other in a cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import Counter
from collections.abc import Sequence

import httpx

from multibank.kernel.db import Database
from tests.api.fees_support import PORTAL, ledger_ok, revenue
from tests.api.test_ledger_concurrency import (
    assert_ledger_verify_ok,
    fresh_database,
    new_programme,
    second_client,  # noqa: F401 (a fixture)
    two_servers,
)
from tests.conftest import ADMIN_TOKEN, Prog
from tests.factories import Identity, deposit, login, open_account, verified

EACH_WAY = 50
SAME_REF = 20
SESSIONS = 4
FEE = 3
FUNDS = 10_000


async def pair(client: httpx.AsyncClient, p: Prog) -> tuple[Identity, str, str, list[str]]:
    """A verified corporate with two funded EUR accounts and SESSIONS live tokens (so requests
    do not queue on one session row and really race on the accounts)."""
    ident = await verified(client, p, "corporates")
    a = (await open_account(client, ident, "EUR"))["id"]
    b = (await open_account(client, ident, "EUR"))["id"]
    for acc in (a, b):
        assert await deposit(client, p, acc, FUNDS) == "COMPLETED"
    tokens = [ident.token]
    for _ in range(SESSIONS - 1):
        r = await login(client, p, ident.email)
        assert r.status_code == 200, r.text
        tokens.append(r.json()["token"])
    return ident, a, b, tokens


async def set_fee(client: httpx.AsyncClient, admin: dict[str, str], p: Prog) -> None:
    r = await client.patch(
        f"{PORTAL}/{p.id}/profiles/{p.profiles['transfers']}",
        headers=admin,
        json={"fees": {"EUR": FEE}},
    )
    assert r.status_code == 200, r.text


def create(
    client: httpx.AsyncClient,
    p: Prog,
    token: str,
    src: str,
    dst: str,
    amount: int,
    ref: str | None = None,
) -> asyncio.Future[httpx.Response]:
    headers = {**p.headers, "Authorization": f"Bearer {token}"}
    if ref:
        headers["idempotency-ref"] = ref
    body = {
        "profileId": p.profiles["transfers"],
        "source": {"type": "managed_accounts", "id": src},
        "destination": {"type": "managed_accounts", "id": dst},
        "destinationAmount": {"currency": "EUR", "amount": amount},
    }
    return asyncio.ensure_future(client.post("/multi/transfers", headers=headers, json=body))


async def balance(client: httpx.AsyncClient, ident: Identity, acc: str) -> int:
    r = await client.get(f"/multi/managed_accounts/{acc}", headers=ident.headers)
    assert r.status_code == 200, r.text
    b = r.json()["balances"]
    assert b["availableBalance"] == b["actualBalance"], b
    return int(b["actualBalance"])


async def both_ways(
    clients: Sequence[httpx.AsyncClient], db: Database, p: Prog, admin: dict[str, str]
) -> None:
    await set_fee(clients[0], admin, p)
    ident, a, b, tokens = await pair(clients[0], p)
    jobs = []
    for i in range(EACH_WAY):
        for j, (src, dst, amount) in enumerate(((a, b, 7 + i % 5), (b, a, 11 + i % 3))):
            n = 2 * i + j
            jobs.append(
                create(clients[n % len(clients)], p, tokens[n % SESSIONS], src, dst, amount)
            )
    responses = await asyncio.gather(*jobs)
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {200: 2 * EACH_WAY}, (
        statuses,
        [r.text for r in responses if r.status_code != 200][:3],
    )
    done = [r.json() for r in responses]
    assert all(t["state"] == "COMPLETED" for t in done)
    assert len({t["id"] for t in done}) == 2 * EACH_WAY
    out_a = sum(t["destinationAmount"]["amount"] for t in done if t["source"]["id"] == a)
    out_b = sum(t["destinationAmount"]["amount"] for t in done if t["source"]["id"] == b)
    want_a = FUNDS - out_a - EACH_WAY * FEE + out_b
    want_b = FUNDS - out_b - EACH_WAY * FEE + out_a
    for c in clients:
        assert await balance(c, ident, a) == want_a
        assert await balance(c, ident, b) == want_b
    # Conserved: what was deposited is in the two accounts and the revenue.
    assert want_a + want_b + await revenue(db, p) == 2 * FUNDS
    r = await clients[-1].get("/multi/transfers", headers=ident.headers, params={"limit": 1})
    assert r.json()["count"] == 2 * EACH_WAY
    await ledger_ok(clients[-1], admin, p)


async def one_ref_twenty_times(
    clients: Sequence[httpx.AsyncClient], db: Database, p: Prog, admin: dict[str, str]
) -> None:
    ident, a, b, tokens = await pair(clients[0], p)
    # Refs belong to the user who sent them (D6): every session here is the same root user.
    ref = f"same-{os.urandom(6).hex()}"
    responses = await asyncio.gather(
        *(
            create(clients[i % len(clients)], p, tokens[i % SESSIONS], a, b, 250, ref)
            for i in range(SAME_REF)
        )
    )
    replies = {(r.status_code, r.content) for r in responses}
    assert len(replies) == 1, Counter((r.status_code, r.text) for r in responses)
    assert responses[0].status_code == 200
    assert await balance(clients[-1], ident, a) == FUNDS - 250
    assert await balance(clients[-1], ident, b) == FUNDS + 250
    r = await clients[-1].get("/multi/transfers", headers=ident.headers)
    assert r.json()["count"] == 1
    await ledger_ok(clients[-1], admin, p)


async def test_fifty_each_way_through_one_app(
    client, programme, container, admin_headers, database_url
):
    await both_ways([client], container.db, await programme(), admin_headers)
    await assert_ledger_verify_ok(database_url)


async def test_one_ref_twenty_times_through_one_app(client, programme, container, admin_headers):
    await one_ref_twenty_times([client], container.db, await programme(), admin_headers)


async def test_two_app_instances(
    client,
    second_client,  # noqa: F811
    programme,
    container,
    admin_headers,
    database_url,
):
    clients = [client, second_client]
    await both_ways(clients, container.db, await programme(), admin_headers)
    await one_ref_twenty_times(clients, container.db, await programme(), admin_headers)
    await assert_ledger_verify_ok(database_url)


async def test_two_serve_processes(tmp_path):
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with fresh_database(tmp_path) as url, two_servers(url, tmp_path) as bases:
        db = Database(url)
        try:
            async with contextlib.AsyncExitStack() as stack:
                limits = httpx.Limits(max_connections=2 * EACH_WAY)
                clients = [
                    await stack.enter_async_context(
                        httpx.AsyncClient(base_url=b, timeout=60, limits=limits)
                    )
                    for b in bases
                ]
                await both_ways(clients, db, await new_programme(clients[0], admin), admin)
                await one_ref_twenty_times(
                    clients, db, await new_programme(clients[1], admin), admin
                )
                await assert_ledger_verify_ok(url)
        finally:
            await db.dispose()
