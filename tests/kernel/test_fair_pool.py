"""The connection pool serves waiters in the order they came (decision 0014): a returned
connection goes to the longest waiter, never to a request that arrived after it."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.util.concurrency import greenlet_spawn
from sqlalchemy.util.queue import AsyncAdaptedQueue, Empty

from multibank.kernel.db import FairPool, FairQueue, normalise_url


@pytest.mark.parametrize("queue_class", [FairQueue, AsyncAdaptedQueue])
async def test_a_returned_connection_goes_to_the_longest_waiter(
    queue_class: type[AsyncAdaptedQueue[str]],
) -> None:
    queue = queue_class(1)
    first = asyncio.create_task(greenlet_spawn(queue.get, True, 5))
    second = asyncio.create_task(greenlet_spawn(queue.get, True, 5))
    await asyncio.sleep(0.01)  # both are waiting, "first" the longer
    queue.put_nowait("connection")
    # A request arriving now, before the waiters have run, finds nothing free.
    try:
        barged = queue.get(block=False)
    except Empty:
        barged = None
    if queue_class is AsyncAdaptedQueue:
        # SQLAlchemy's own queue lets the newcomer take it: what this pool exists to prevent.
        assert barged == "connection"
        for task in (first, second):
            task.cancel()
        return
    assert barged is None
    assert await first == "connection"
    assert not second.done()
    queue.put_nowait("connection")
    assert await second == "connection"


async def test_a_waiter_that_times_out_leaves_the_pool_whole(database_url: str) -> None:
    engine = create_async_engine(
        normalise_url(database_url),
        poolclass=FairPool,
        pool_size=1,
        max_overflow=0,
        pool_timeout=0.2,
    )
    holder = await engine.connect()
    await holder.execute(text("SELECT 1"))
    with pytest.raises(PoolTimeout):
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    await holder.close()
    # The one connection is there for the next caller at once: the timed-out waiter kept nothing.
    async with asyncio.timeout(1):
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    await engine.dispose()


async def test_a_connection_handed_to_a_waiter_that_gave_up_goes_to_the_next() -> None:
    queue = FairQueue(1)
    leaving = asyncio.create_task(greenlet_spawn(queue.get, True, 5))
    staying = asyncio.create_task(greenlet_spawn(queue.get, True, 5))
    await asyncio.sleep(0.01)
    queue.put_nowait("connection")  # handed to "leaving", which is cancelled before it runs
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert await staying == "connection"
