"""IBAN allocation with several server instances on one database (issue 5): whichever instance
first reads a due allocation finishes it, exactly once, and every instance then shows the same
bank details; and the background step every server process runs allocates what is due, nobody
asking, once however many processes run it at the same moment (issue 32)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from stdnum import iban as stdnum_iban

from multibank.app import build_container, create_app, startup
from multibank.due_work import WORK
from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.programmes.due import run_due
from tests.api.test_iban_when_due import HOOKS, iban_events, pending
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


class Later(Clock):
    """The server's clock `seconds` ahead: a background round as it will run then."""

    def __init__(self, seconds: int) -> None:
        self.ahead_ms = seconds * 1000

    def system_ms(self) -> int:
        return super().system_ms() + self.ahead_ms


async def test_the_background_step_allocates_once_across_processes(
    client, programme, settings, container
):
    p = await programme(ibanAllocationDelaySeconds=30, webhookUrl=HOOKS)
    ident = await verified(client, p, "corporates")
    accounts = [await pending(client, p, ident) for _ in range(3)]
    # Three processes' databases (each its own engine and connections) on the one database.
    others = [Database(settings.database_url) for _ in range(2)]
    dbs = [container.db, *others]
    try:
        await asyncio.gather(*(run_due(db, container.clock, WORK) for db in dbs))  # not due yet
        for acc in accounts:
            assert [e["eventType"] for e in await iban_events(client, p, acc)] == [
                "ibans.REQUESTED"
            ]
        for _ in range(2):  # the rounds of three processes at once, 31 s on, twice
            await asyncio.gather(*(run_due(db, Later(31), WORK) for db in dbs))
    finally:
        for db in others:
            await db.dispose()
    allocated = []
    for acc in accounts:
        events = await iban_events(client, p, acc)
        assert [e["eventType"] for e in events] == ["ibans.REQUESTED", "ibans.CREATED"], events
        [details] = events[1]["payload"]["iban"]["bankAccountDetails"]
        allocated.append(details["details"]["iban"])
        r = await client.get(f"/multi/managed_accounts/{acc}/iban", headers=ident.headers)
        assert r.json()["state"] == "ALLOCATED"
        assert r.json()["bankAccountDetails"][0]["details"]["iban"] == details["details"]["iban"]
    assert len(set(allocated)) == 3
    assert all(stdnum_iban.is_valid(i) for i in allocated)
