"""Signed-in operators of the web portal (D17): a session per sign-in with the admin token, kept
in the database (so signing out ends it in every server process), carried by an HttpOnly,
SameSite=Strict cookie, with its own CSRF token that every form posts back."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import String, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import Base

COOKIE = "mb_portal"
TTL_MS = 8 * 3600_000  # a working day


class PortalSession(Base):
    __tablename__ = "portal_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    csrf: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[int]
    expires_at: Mapped[int]
    ended_at: Mapped[int | None] = mapped_column(nullable=True)


@dataclass(frozen=True)
class Signed:
    token_hash: str
    csrf: str


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def sign_in(db: AsyncSession, now_ms: int) -> str:
    """A new session; answers the cookie's value (only its hash is kept)."""
    token = secrets.token_urlsafe(32)
    db.add(
        PortalSession(
            token_hash=_hash(token),
            csrf=secrets.token_urlsafe(24),
            created_at=now_ms,
            expires_at=now_ms + TTL_MS,
        )
    )
    await db.flush()
    return token


async def current(db: AsyncSession, token: str | None, now_ms: int) -> Signed | None:
    if not token:
        return None
    row = (
        await db.execute(select(PortalSession).where(PortalSession.token_hash == _hash(token)))
    ).scalar_one_or_none()
    if row is None or row.ended_at is not None or row.expires_at <= now_ms:
        return None
    return Signed(row.token_hash, row.csrf)


async def sign_out(db: AsyncSession, signed: Signed, now_ms: int) -> None:
    row = await db.get(PortalSession, signed.token_hash)
    if row is not None:
        row.ended_at = now_ms
        await db.flush()


def csrf_ok(signed: Signed, given: str | None) -> bool:
    return bool(given) and secrets.compare_digest(signed.csrf.encode(), (given or "").encode())
