"""`kernel.greenlets.spawn`: SQLAlchemy's `greenlet_spawn` contract on greenlets kept for the
next hand-over (decision 0032)."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest
from sqlalchemy.util.concurrency import await_

from multibank.kernel import greenlets
from multibank.kernel.greenlets import getcurrent, spawn

SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


async def _twice(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


def _sync_work(x: int) -> tuple[int, Any]:
    """Awaits twice from synchronous code, as `Direct` awaits its driver."""
    return await_(_twice(x)) + await_(_twice(1)), getcurrent()


async def test_it_runs_the_function_awaiting_what_it_awaits() -> None:
    value, first = await spawn(_sync_work, 5)
    assert value == 12
    value, second = await spawn(_sync_work, 1)
    assert value == 4
    assert second is first  # the same greenlet, kept between hand-overs
    assert first is not getcurrent()


class Boom(Exception):
    pass


def _fails() -> None:
    await_(asyncio.sleep(0))
    raise Boom("inside")


async def _raises() -> None:
    await asyncio.sleep(0)
    raise Boom("awaited")


def _catches_awaited() -> str:
    try:
        await_(_raises())
    except Boom as error:
        return f"caught {error}"
    return "not raised"


async def test_exceptions_go_both_ways_and_the_greenlet_is_kept() -> None:
    with pytest.raises(Boom, match="inside"):
        await spawn(_fails)
    # What an awaitable raises is raised where the function awaited it.
    assert await spawn(_catches_awaited) == "caught awaited"
    _, worker = await spawn(_sync_work, 0)
    assert worker in greenlets._free()


def _reads_context() -> str:
    return SEEN.get()


async def test_it_runs_in_the_callers_context() -> None:
    async def task(name: str) -> str:
        SEEN.set(name)
        await asyncio.sleep(0)
        return await spawn(_reads_context)

    assert await asyncio.gather(task("a"), task("b"), task("c")) == ["a", "b", "c"]


def _waits_forever(started: asyncio.Event) -> str:
    started.set()
    try:
        await_(asyncio.sleep(3600))
    except asyncio.CancelledError:
        return "cancelled inside"  # swallowed here: the task is still cancelled below
    return "woke"


async def test_a_cancelled_caller_cancels_the_function_and_keeps_the_greenlet() -> None:
    started = asyncio.Event()
    task = asyncio.ensure_future(spawn(_waits_forever, started))
    await started.wait()
    task.cancel()
    done = await asyncio.gather(task, return_exceptions=True)
    # The function saw the cancellation where it awaited, and its value came back.
    assert done == ["cancelled inside"]
    assert (await spawn(_sync_work, 2))[0] == 6


def _nested() -> int:
    inner: tuple[int, Any] = await_(spawn(_sync_work, 3))
    return inner[0]


async def test_a_function_may_spawn_another_through_await_() -> None:
    assert await spawn(_nested) == 8


async def test_concurrent_hand_overs_each_get_their_own_greenlet() -> None:
    results = await asyncio.gather(*(spawn(_sync_work, n) for n in range(20)))
    assert [value for value, _ in results] == [2 * n + 2 for n in range(20)]
    assert len({id(worker) for _, worker in results}) == 20
    assert len(greenlets._free()) <= greenlets._KEEP_AT_MOST
