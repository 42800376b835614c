"""Argon2id password hashing, off the event loop (D7)."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import argon2

T = TypeVar("T")


class PasswordHasher:
    """Argon2id with the server's cost settings; hashing runs in a worker thread so a login
    never stalls the event loop for other requests."""

    def __init__(self, memory_kib: int, time_cost: int, parallelism: int, threads: int = 0) -> None:
        self._ph = argon2.PasswordHasher(
            time_cost=time_cost,
            memory_cost=memory_kib,
            parallelism=parallelism,
            type=argon2.Type.ID,
        )
        self._dummy: str | None = None
        # At most one hash per core at a time: sixteen logins at once hash no faster on 16
        # threads than on 2, and each wants its 19 MiB in cache (issue 11, goal 3). The pool's
        # threads take the next waiting hash themselves: a limiter released on the event loop
        # left a hash thread idle until the loop came round to hand it the next one.
        self._threads = threads or os.cpu_count() or 1
        self._pool: ThreadPoolExecutor | None = None

    async def _run(self, call: Callable[..., T], *args: object) -> T:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="argon2")
        return await asyncio.get_running_loop().run_in_executor(self._pool, call, *args)

    def close(self) -> None:
        """Lets the hash threads end (a later hash starts new ones)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    async def hash(self, password: str) -> str:
        return await self._run(self._ph.hash, password)

    def _verify_sync(self, encoded: str, password: str) -> bool:
        try:
            return self._ph.verify(encoded, password)
        except (argon2.exceptions.VerificationError, argon2.exceptions.InvalidHashError):
            return False

    async def verify(self, encoded: str | None, password: str) -> bool:
        """False for a wrong password; with no hash (unknown user) a dummy hash is checked, so
        both answers take the same time (D7)."""
        if encoded is None:
            if self._dummy is None:
                self._dummy = await self.hash(secrets.token_urlsafe(16))
            await self._run(self._verify_sync, self._dummy, password)
            return False
        return await self._run(self._verify_sync, encoded, password)

    async def matches_any(self, encoded: list[str], password: str) -> bool:
        for h in encoded:
            if await self.verify(h, password):
                return True
        return False
