"""IBAN allocation with several server instances on one database (issue 5): whichever instance
first reads a due allocation finishes it, exactly once, and every instance then shows the same
bank details."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from stdnum import iban as stdnum_iban

from multibank.app import build_container, create_app, startup
from tests.factories import open_account, verified


@pytest.fixture
async def other_servers(settings) -> AsyncIterator[list[httpx.AsyncClient]]:
    containers = [build_container(settings) for _ in range(2)]
    clients = []
    for i, c in enumerate(containers):
        await startup(c)
        transport = httpx.ASGITransport(app=create_app(container=c), raise_app_exceptions=False)
        clients.append(httpx.AsyncClient(transport=transport, base_url=f"http://s{i}"))
    try:
        yield clients
    finally:
        for cl in clients:
            await cl.aclose()
        for c in containers:
            await c.db.dispose()


async def test_due_allocation_happens_once_across_instances(client, other_servers, programme):
    p = await programme(ibanAllocationDelaySeconds=30)
    ident = await verified(client, p, "corporates")
    accounts = [await open_account(client, ident, "GBP") for _ in range(3)]
    for acc in accounts:
        r = await client.post(f"/multi/managed_accounts/{acc['id']}/iban", headers=ident.headers)
        assert r.json() == {"state": "PENDING_ALLOCATION", "bankAccountDetails": []}
    r = await client.post(
        "/simulate/api/clock/advance", headers={"programme-key": p.api_key}, json={"seconds": 31}
    )
    assert r.status_code == 200
    servers = [client, *other_servers]
    reads = [
        servers[i % len(servers)].get(
            f"/multi/managed_accounts/{accounts[i % 3]['id']}/iban", headers=ident.headers
        )
        for i in range(18)
    ]
    replies = await asyncio.gather(*reads)
    assert {r.status_code for r in replies} == {200}
    by_account: dict[str, set[str]] = {}
    for i, r in enumerate(replies):
        body = r.json()
        assert body["state"] == "ALLOCATED", body
        by_account.setdefault(accounts[i % 3]["id"], set()).add(
            body["bankAccountDetails"][0]["details"]["accountNumber"]
            + body["bankAccountDetails"][1]["details"]["iban"]
        )
    # One allocation per account, whoever read it; and no two accounts share details.
    assert all(len(v) == 1 for v in by_account.values()), by_account
    ibans = [next(iter(v))[8:] for v in by_account.values()]
    assert len(set(ibans)) == 3
    assert all(stdnum_iban.is_valid(i) for i in ibans)


async def test_the_first_allocation_of_a_database_may_happen_on_a_read(tmp_path) -> None:
    """A read runs in autocommit (decision 0013), where PostgreSQL has no savepoints: the
    account-number counter of a fresh database is created without one."""
    from multibank.settings import Settings
    from tests.api.test_ledger_concurrency import fresh_database
    from tests.conftest import ADMIN_TOKEN, Prog

    async with fresh_database(tmp_path) as url:
        c = build_container(
            Settings(
                database_url=url,
                admin_token=ADMIN_TOKEN,
                argon2_memory_kib=1024,
                argon2_time_cost=1,
            )
        )
        await startup(c)
        transport = httpx.ASGITransport(app=create_app(container=c), raise_app_exceptions=False)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://fresh") as client:
                from multibank.cli import ensure_default_programme

                description, _ = await ensure_default_programme(c.db)
                d = description.model_dump(mode="json")
                p = Prog(d["programmeId"], d["apiKey"], d["profiles"], d["feeTypes"])
                r = await client.patch(
                    f"/portal/api/programmes/{p.id}/settings",
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                    json={"ibanAllocationDelaySeconds": 30},
                )
                assert r.status_code == 200, r.text
                ident = await verified(client, p, "corporates")
                acc = await open_account(client, ident, "EUR")
                path = f"/multi/managed_accounts/{acc['id']}/iban"
                r = await client.post(path, headers=ident.headers)
                assert r.json()["state"] == "PENDING_ALLOCATION"
                r = await client.post(
                    "/simulate/api/clock/advance",
                    headers={"programme-key": p.api_key},
                    json={"seconds": 31},
                )
                assert r.status_code == 200
                r = await client.get(path, headers=ident.headers)  # the read allocates
                assert r.status_code == 200, r.text
                assert r.json()["state"] == "ALLOCATED"
        finally:
            await c.db.dispose()
