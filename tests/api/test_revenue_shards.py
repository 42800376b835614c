"""The programme's revenue row does not serialise unrelated customers (issue 11, goal 2).

A fee charge of one customer is held open half-way (its transaction has credited revenue and
holds that row's lock); a charge of another customer, whose account picks another revenue
shard, completes meanwhile. Before shards every charge waited for the one revenue row. Only
PostgreSQL locks rows; SQLite has one writer for everything."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import update

from multibank.container import Container
from multibank.ledger import service as ledger
from multibank.ledger.models import REVENUE, LedgerAccount
from tests.api.fees_support import charge, revenue
from tests.conftest import DB_KIND
from tests.factories import deposit, open_account, verified


@pytest.mark.skipif(DB_KIND != "postgres", reason="row locks are PostgreSQL's")
async def test_a_charge_does_not_wait_for_another_customers_open_charge(
    client, programme, container: Container
) -> None:
    p = await programme()
    first = await verified(client, p, "corporates")
    a = await open_account(client, first, "EUR")
    second = await verified(client, p, "corporates")
    b = await open_account(client, second, "EUR")
    while ledger.revenue_shard(int(b["id"])) == ledger.revenue_shard(int(a["id"])):
        b = await open_account(client, second, "EUR")
    for ident, acc in ((first, a), (second, b)):
        await deposit(client, p, acc["id"], 10_000)
        assert (await charge(client, ident, acc["id"])).status_code == 200  # shards exist

    async with container.db.transaction() as held:
        # The first customer's charge, half-way: its revenue shard is credited, not committed.
        shard = await ledger.system_account(
            held, int(p.id), REVENUE, "EUR", 0, shard=ledger.revenue_shard(int(a["id"]))
        )
        await held.execute(
            update(LedgerAccount)
            .where(LedgerAccount.id == shard)
            .values(available=LedgerAccount.available + 1, actual=LedgerAccount.actual + 1)
        )
        r = await asyncio.wait_for(charge(client, second, b["id"]), 20)
        assert r.status_code == 200, r.text
        await held.rollback()
    assert await revenue(container.db, p) == 3 * 100


def test_revenue_is_spread_over_shards_by_source_account() -> None:
    """Real ids: one per millisecond, so their low (sequence) bits are all 0."""
    ids = [((10**11 + ms) << 22) | (7 << 12) for ms in range(200)]  # node 7, sequence 0
    counts = [0] * ledger.REVENUE_SHARDS
    for account_id in ids:
        counts[ledger.revenue_shard(account_id)] += 1
    assert min(counts) >= 10, counts  # each shard takes a fair part (25 on average)
