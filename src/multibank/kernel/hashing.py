"""Argon2id password hashing, off the event loop (D7)."""

from __future__ import annotations

import secrets

import anyio.to_thread
import argon2


class PasswordHasher:
    """Argon2id with the server's cost settings; hashing runs in a worker thread so a login
    never stalls the event loop for other requests."""

    def __init__(self, memory_kib: int, time_cost: int, parallelism: int) -> None:
        self._ph = argon2.PasswordHasher(
            time_cost=time_cost,
            memory_cost=memory_kib,
            parallelism=parallelism,
            type=argon2.Type.ID,
        )
        self._dummy: str | None = None

    async def hash(self, password: str) -> str:
        return await anyio.to_thread.run_sync(self._ph.hash, password)

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
            await anyio.to_thread.run_sync(self._verify_sync, self._dummy, password)
            return False
        return await anyio.to_thread.run_sync(self._verify_sync, encoded, password)

    async def matches_any(self, encoded: list[str], password: str) -> bool:
        for h in encoded:
            if await self.verify(h, password):
                return True
        return False
