"""Rate limits of D7 on top of the `limits` library: memory by default, Redis when configured."""

from __future__ import annotations

import time
from collections.abc import Iterable

from limits import RateLimitItem, parse_many
from limits.aio.storage import MemoryStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from limits.storage import storage_from_string

from multibank.kernel.errors import TooManyRequests


def _header(items: list[RateLimitItem], exceeded: RateLimitItem) -> str:
    # contract §1: the exceeded limit first, then every `limit;w=windowSeconds`.
    windows = ", ".join(f"{i.amount};w={i.get_expiry()}" for i in items)
    return f"{exceeded.amount}, {windows}"


class TidyMemoryStorage(MemoryStorage):
    """`limits`' in-process storage, tidying out expired entries at most once a second.

    The library tidies after every hit, and hops to a worker thread for each key it holds to do
    it: on a login that was about as much event-loop CPU as the login's own handler (issue 11).
    Tidying only frees memory; a moving window counts by the entries' timestamps either way."""

    TIDY_EVERY_S = 1.0
    _tidied_at = 0.0

    async def _MemoryStorage__schedule_expiry(self) -> None:
        now = time.monotonic()
        if now - self._tidied_at < self.TIDY_EVERY_S:
            return
        self._tidied_at = now
        await super()._MemoryStorage__schedule_expiry()  # type: ignore[misc]


class RateLimiter:
    def __init__(self, redis_url: str | None = None, namespace: str = "multibank") -> None:
        storage = (
            storage_from_string(f"async+{redis_url}", key_prefix=namespace)
            if redis_url
            else TidyMemoryStorage()
        )
        assert isinstance(storage, Storage)
        self.storage = storage
        self.strategy = MovingWindowRateLimiter(self.storage)
        self._parsed: dict[str, list[RateLimitItem]] = {}

    def _items(self, limits: str) -> list[RateLimitItem]:
        if limits not in self._parsed:
            self._parsed[limits] = parse_many(limits)
        return self._parsed[limits]

    async def hit(self, name: str, limits: str, keys: Iterable[tuple[str, str]]) -> None:
        """Counts one call against every (dimension, value) key, raising 429 if any is spent.

        All keys are tested before any is hit, so a refused call does not use up the others. A
        hit can still fail when concurrent calls took the last slots after the test; the call is
        then refused too, or concurrent bursts would all pass.
        """
        await self.hit_each(name, [(limits, dim, value) for dim, value in keys])

    async def hit_each(self, name: str, checks: Iterable[tuple[str, str, str]]) -> None:
        """`hit` with limits of their own per key: (limits, dimension, value) triples, e.g. a
        tight per-e-mail limit beside a generous per-IP one. Empty values are not counted."""
        planned = [
            (self._items(limits), dim, value) for limits, dim, value in checks if value and limits
        ]
        for items, dim, value in planned:
            for item in items:
                if not await self.strategy.test(item, name, dim, value):
                    raise await self._refusal(items, item, name, dim, value)
        for items, dim, value in planned:
            for item in items:
                if not await self.strategy.hit(item, name, dim, value):
                    raise await self._refusal(items, item, name, dim, value)

    async def check(self, name: str, limits: str, dim: str, value: str) -> None:
        """Raises 429 when the key has spent any of its windows, counting nothing: for limits
        on failures, which are counted (`hit_each`) only once the attempt has failed."""
        if not value or not limits:
            return
        items = self._items(limits)
        for item in items:
            if not await self.strategy.test(item, name, dim, value):
                raise await self._refusal(items, item, name, dim, value)

    async def _refusal(
        self, items: list[RateLimitItem], item: RateLimitItem, name: str, dim: str, value: str
    ) -> TooManyRequests:
        stats = await self.strategy.get_window_stats(item, name, dim, value)
        return TooManyRequests(_header(items, item), int(stats.reset_time - time.time()) + 1)

    async def reset(self) -> None:
        await self.storage.reset()
