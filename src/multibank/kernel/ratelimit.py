"""Rate limits of D7 on top of the `limits` library: memory by default, Redis when configured."""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable

from limits import RateLimitItem, parse_many
from limits.aio.storage import MovingWindowSupport, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from limits.storage import storage_from_string

from multibank.kernel.errors import TooManyRequests


def limit_header(items: list[RateLimitItem], exceeded: RateLimitItem) -> str:
    # contract §1: the exceeded limit first, then every `limit;w=windowSeconds`.
    windows = ", ".join(f"{i.amount};w={i.get_expiry()}" for i in items)
    return f"{exceeded.amount}, {windows}"


class InProcessStorage(Storage, MovingWindowSupport):
    """Moving windows in this process's memory: a storage backend on `limits`' published base
    classes (`limits.aio.storage.Storage`, `MovingWindowSupport`), with the moving-window
    semantics of its own `MemoryStorage`.

    Keys whose entries have all expired are forgotten at most once a second, inline: the
    library's storage tidies after every hit, hopping to a worker thread for each key it holds,
    which on a login was about as much event-loop CPU as the login's own handler (issue 11).
    Tidying only frees memory; a window counts by its entries' timestamps either way. One event
    loop uses it, and nothing in it awaits: each call is atomic."""

    STORAGE_SCHEME = None  # made by `RateLimiter`, never from a URI
    TIDY_EVERY_S = 1.0

    def __init__(self) -> None:
        super().__init__()
        # key -> (entry lifetime in seconds, entry timestamps newest first)
        self.events: dict[str, tuple[float, list[float]]] = {}
        self.counters: dict[str, tuple[float, int]] = {}  # key -> (expires at, count)
        self.tidied_at = 0.0

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return ValueError

    def tidy(self, now: float) -> None:
        """Forgets the entries and counters that have expired, at most once a second."""
        if now - self.tidied_at < self.TIDY_EVERY_S:
            return
        self.tidied_at = now
        for key, (expiry, stamps) in list(self.events.items()):
            live = bisect.bisect_left(stamps, -(now - expiry), key=lambda t: -t)
            if live == 0:
                del self.events[key]
            elif live < len(stamps):
                del stamps[live:]
        for key, (expires_at, _) in list(self.counters.items()):
            if expires_at <= now:
                del self.counters[key]

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        if amount > limit:
            return False
        now = time.time()
        self.tidy(now)
        _, stamps = self.events.setdefault(key, (float(expiry), []))
        if len(stamps) > limit - amount and stamps[limit - amount] >= now - expiry:
            return False
        stamps[:0] = [now] * amount
        return True

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        """(the oldest entry's time in the window, the number of entries in it)"""
        now = time.time()
        found = self.events.get(key)
        if not found or not found[1]:
            return now, 0
        stamps = found[1]
        inside = bisect.bisect_left(stamps, -(now - expiry), key=lambda t: -t)
        return stamps[inside - 1], inside

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        now = time.time()
        self.tidy(now)
        expires_at, count = self.counters.get(key, (0.0, 0))
        if expires_at <= now:
            expires_at, count = now + expiry, 0
        self.counters[key] = (expires_at, count + amount)
        return count + amount

    async def get(self, key: str) -> int:
        expires_at, count = self.counters.get(key, (0.0, 0))
        return count if expires_at > time.time() else 0

    async def get_expiry(self, key: str) -> float:
        return self.counters.get(key, (time.time(), 0))[0]

    async def check(self) -> bool:
        return True

    async def reset(self) -> int | None:
        count = len(self.events) + len(self.counters)
        self.events.clear()
        self.counters.clear()
        return count

    async def clear(self, key: str) -> None:
        self.events.pop(key, None)
        self.counters.pop(key, None)


class RateLimiter:
    def __init__(self, redis_url: str | None = None, namespace: str = "multibank") -> None:
        storage = (
            storage_from_string(f"async+{redis_url}", key_prefix=namespace)
            if redis_url
            else InProcessStorage()
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
        return TooManyRequests(limit_header(items, item), int(stats.reset_time - time.time()) + 1)

    async def reset(self) -> None:
        await self.storage.reset()
