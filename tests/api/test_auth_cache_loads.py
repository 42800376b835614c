"""`AuthCache.load_once` (decision 0022): requests that find the same credential stale at once
wait for one read of it instead of each sending their own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from multibank.api import deps
from multibank.api.authcache import AuthCache, cache_of
from multibank.api.scope import SCOPE_KEY, RequestScope
from multibank.kernel.clock import ProgrammeClock
from multibank.programmes.service import hash_api_key
from tests.factories import verified


class Loads:
    """A load that waits until released, counting how often it ran."""

    def __init__(self, value: object = "row") -> None:
        self.ran = 0
        self.release = asyncio.Event()
        self.value = value
        self.fail = False

    async def __call__(self) -> object:
        self.ran += 1
        await self.release.wait()
        if self.fail:
            self.fail = False  # the next one succeeds
            raise RuntimeError("database went away")
        return self.value


async def _started(*tasks: asyncio.Task[object]) -> None:
    """Lets each task run up to its first wait."""
    for _ in range(3):
        await asyncio.sleep(0)
    assert not any(t.done() for t in tasks)


async def _one_then_another(
    cache: AuthCache,
    key: tuple[str, int],
    first: Loads,
    second: Loads,
    between: Callable[[], None] = lambda: None,
) -> tuple[asyncio.Task[object], asyncio.Task[object]]:
    """Two requests that miss `key`, the second once the first has begun its load (and
    `between` has run): both started, both waiting."""
    one = asyncio.create_task(cache.load_once(key, first))
    await _started(one)
    between()
    two = asyncio.create_task(cache.load_once(key, second))
    await _started(two)
    return one, two


async def test_requests_that_miss_together_share_one_load() -> None:
    cache, load = AuthCache(), Loads()
    tasks = [asyncio.create_task(cache.load_once(("session", 1), load)) for _ in range(16)]
    await _started(*tasks)
    load.release.set()
    assert await asyncio.gather(*tasks) == ["row"] * 16
    assert load.ran == 1
    # Done: the next miss loads again.
    assert await cache.load_once(("session", 1), load) == "row"
    assert load.ran == 2


async def test_other_keys_load_apart() -> None:
    cache, load = AuthCache(), Loads()
    load.release.set()
    one = cache.load_once(("session", 1), load)
    two = cache.load_once(("session", 2), load)
    assert await asyncio.gather(one, two) == ["row", "row"]
    assert load.ran == 2


async def test_a_failed_load_fails_alone_and_its_waiters_load_for_themselves() -> None:
    cache, load = AuthCache(), Loads()
    load.fail = True
    first = asyncio.create_task(cache.load_once(("programme", "h"), load))
    await _started(first)
    waiters = [asyncio.create_task(cache.load_once(("programme", "h"), load)) for _ in range(3)]
    await _started(*waiters)
    load.release.set()
    with pytest.raises(RuntimeError):
        await first
    assert await asyncio.gather(*waiters) == ["row"] * 3
    assert load.ran == 4  # the failed one, then each waiter's own


async def test_a_cancelled_loader_hands_its_waiters_nothing_and_they_load() -> None:
    cache, load = AuthCache(), Loads()
    first, waiter = await _one_then_another(cache, ("session", 7), load, load)
    first.cancel()  # its client went away
    with pytest.raises(asyncio.CancelledError):
        await first
    load.release.set()
    assert await waiter == "row"
    assert load.ran == 2


async def test_a_cancelled_waiter_does_not_cancel_the_load() -> None:
    cache, load = AuthCache(), Loads()
    first, waiter = await _one_then_another(cache, ("session", 7), load, load)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    load.release.set()
    assert await first == "row"
    assert load.ran == 1


async def test_after_a_change_is_dropped_requests_do_not_join_a_load_begun_before_it() -> None:
    """A load that began before a logout committed may return the old row: a request that comes
    after the drop reads again."""
    cache, old, fresh = AuthCache(), Loads("old row"), Loads("new row")
    dropped = lambda: cache.clear(sessions=True)  # noqa: E731
    before, after = await _one_then_another(cache, ("session", 3), old, fresh, dropped)
    old.release.set()
    fresh.release.set()
    assert await asyncio.gather(before, after) == ["old row", "new row"]
    assert (old.ran, fresh.ran) == (1, 1)


async def test_dropping_programmes_keeps_the_loads_of_sessions() -> None:
    cache, load = AuthCache(), Loads()
    dropped = lambda: cache.clear(programmes=True)  # noqa: E731
    first, second = await _one_then_another(cache, ("session", 3), load, load, dropped)
    load.release.set()
    assert await asyncio.gather(first, second) == ["row", "row"]
    assert load.ran == 1


async def test_a_request_holding_its_connection_reads_its_key_and_session_alone(
    client, programme, container, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared load may itself wait for a connection: a request that already holds its
    transaction's connection must not wait for it (a full pool would wait on itself), and reads
    the key's programme and the session itself instead."""
    p = await programme()
    ident = await verified(client, p, "corporates")
    assert (await client.get("/multi/corporates", headers=ident.headers)).status_code == 200
    decoded = container.tokens().verify(ident.token)
    assert decoded is not None
    session_id = decoded[0]
    cache = cache_of(container)
    programme_row = cache.programme(hash_api_key(p.api_key))  # remembered by the read
    assert programme_row is not None

    release = asyncio.Event()
    shared = cache.load_once

    async def stalled(key: Any, load: Any) -> Any:
        await release.wait()  # the shared load waits (for a connection, say)
        return await shared(key, load)

    cache.clear(programmes=True, sessions=True)
    monkeypatch.setattr(cache, "load_once", stalled)
    reader = asyncio.create_task(client.get("/multi/corporates", headers=ident.headers))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not reader.done()  # waiting in the shared load

    scope = RequestScope(container.db, read_only=False)
    unit = scope.session
    try:
        await unit.connection()  # the write's session holds its connection now
        assert unit.in_transaction()
        request = SimpleNamespace(
            method="POST",
            scope={"multibank": container, SCOPE_KEY: scope},
            state=SimpleNamespace(),
        )
        limits = deps._limits(container)
        now_ms = ProgrammeClock(container.clock, programme_row.clock_offset_ms).now_ms()
        async with asyncio.timeout(10):
            found = await deps.authenticate_programme(request, p.api_key)
            row = await deps._live_session(
                request, scope, cache, session_id, programme_row, now_ms, limits
            )
        assert found.id == programme_row.id
        assert row.id == session_id
        await unit.commit()
    finally:
        await unit.close()
    release.set()
    assert (await reader).status_code == 200
