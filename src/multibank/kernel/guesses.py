"""Wrong guesses of a secret (the admin token), counted in the database every process of a
deployment shares, so the limit holds across processes and restarts without Redis (decision
0074).

One row per wrong guess: (what was guessed, by whom, when). A check and its count are one
transaction that holds the guesser's key (PostgreSQL: a transaction-scoped advisory lock on a
hash of it; SQLite: the one writer), so concurrent guesses from one address are taken one at a
time and none slips past a spent limit. The windows are moving, as `limits`' moving window is:
a guess counts for each window it falls in. Rows older than the longest window are removed
when a guess is counted; nothing outlives the transaction (PgBouncer in transaction mode)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from limits import RateLimitItem, parse_many
from sqlalchemy import BigInteger, Index, String, delete, select, text
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base, Database, dialect_name
from multibank.kernel.errors import TooManyRequests
from multibank.kernel.ids import new_id
from multibank.kernel.ratelimit import limit_header


class Guess(Base):
    __tablename__ = "wrong_guesses"
    __table_args__ = (
        Index("ix_wrong_guesses_key", "scope", "key", "at"),
        Index("ix_wrong_guesses_at", "at"),
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    scope: Mapped[str] = mapped_column(String(30))  # "admin-auth"
    key: Mapped[str] = mapped_column(String(100))  # the client address
    at: Mapped[int] = mapped_column(BigInteger)  # wall clock, ms


def _lock_id(scope: str, key: str) -> int:
    """A signed 64-bit advisory lock id for the key (collisions only make two keys wait)."""
    raw = hashlib.sha256(f"guesses:{scope}:{key}".encode()).digest()[:8]
    return int.from_bytes(raw, "big", signed=True)


def refusal(items: list[RateLimitItem], stamps: list[int], now_ms: int) -> TooManyRequests | None:
    """The 429 for a key whose wrong guesses (`stamps`, ms, newest first) spent a window."""
    for item in items:
        window_ms = item.get_expiry() * 1000
        inside = [t for t in stamps if t > now_ms - window_ms]
        if len(inside) >= item.amount:
            frees_at = inside[item.amount - 1] + window_ms
            return TooManyRequests(limit_header(items, item), -(-(frees_at - now_ms) // 1000))
    return None


class GuessLimit:
    """`limits` (e.g. "10/minute;100/hour") on the wrong guesses of one scope, per key."""

    def __init__(self, scope: str, limits: str) -> None:
        self.scope, self.limits = scope, limits
        self.items = parse_many(limits)
        self.longest_ms = max(item.get_expiry() for item in self.items) * 1000
        self.most = max(item.amount for item in self.items)

    async def attempt(self, db: Database, key: str, guess_is_right: Callable[[], bool]) -> bool:
        """Raises TooManyRequests (429) when `key` has spent a window, without calling
        `guess_is_right`; otherwise calls it and counts a wrong guess. Database errors are
        raised as they are: the caller decides to fail closed."""
        now = int(time.time() * 1000)
        async with db.transaction() as session:
            if dialect_name(session) == "postgresql":
                lock = text("SELECT pg_advisory_xact_lock(:id)")
                await session.execute(lock, {"id": _lock_id(self.scope, key)})
            stmt = (
                select(Guess.at)
                .where(
                    Guess.scope == self.scope,
                    Guess.key == key,
                    Guess.at > now - self.longest_ms,
                )
                .order_by(Guess.at.desc())
                .limit(self.most)
            )
            stamps = list(await session.scalars(stmt))
            refused = refusal(self.items, stamps, now)
            if refused is not None:
                raise refused
            if guess_is_right():
                return True
            old = delete(Guess).where(Guess.scope == self.scope, Guess.at <= now - self.longest_ms)
            await session.execute(old)
            session.add(Guess(id=new_id(), scope=self.scope, key=key[:100], at=now))
            return False
