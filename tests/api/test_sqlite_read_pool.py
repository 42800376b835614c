"""SQLite's read connections (decision 0022): a read whose session renewal waits for the write
lock holds its connection meanwhile, and those reads must not leave the others none."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from multibank.container import Container
from tests.conftest import DB_KIND
from tests.factories import verified

RENEWALS_WAITING = 6  # more than the four connections reads had before decision 0022


@pytest.mark.skipif(DB_KIND != "sqlite", reason="SQLite's one write lock and its read pool")
async def test_reads_go_on_while_renewals_wait_for_the_write_lock(
    client, programme, container: Container
) -> None:
    p = await programme()
    idents = [await verified(client, p, "corporates") for _ in range(RENEWALS_WAITING + 1)]
    path = "/multi/corporates"
    for ident in idents:  # each session is renewed and remembered now
        assert (await client.get(path, headers=ident.headers)).status_code == 200
    # A renewal period later, by the programme's clock.
    r = await client.post(
        "/simulate/api/clock/advance", headers={"programme-key": p.api_key}, json={"seconds": 2}
    )
    assert r.status_code == 200
    last = idents[-1]
    assert (await client.get(path, headers=last.headers)).status_code == 200  # renewed now

    async with container.db.transaction() as writer:
        # The write lock is taken (BEGIN IMMEDIATE) and held while the reads come.
        await writer.execute(text("UPDATE programmes SET name = name WHERE id = :id"), {"id": 0})
        renewing = [
            asyncio.create_task(client.get(path, headers=ident.headers))
            for ident in idents[:RENEWALS_WAITING]
        ]
        await asyncio.sleep(0.2)  # each has reached its renewal, waiting for the lock
        assert not any(task.done() for task in renewing)
        # A read with nothing to write still finds a connection, and answers at once.
        async with asyncio.timeout(10):
            plain = await client.get(path, headers=last.headers)
        assert plain.status_code == 200
    # The lock is free: the renewals go through and their reads answer.
    answers = await asyncio.gather(*renewing)
    assert [a.status_code for a in answers] == [200] * RENEWALS_WAITING
