"""Signed-in operators of the web portal (D17): a session per sign-in with the admin token, kept
in the database (so signing out ends it in every server process), carried by an HttpOnly,
SameSite=Strict cookie, with its own CSRF token that every form posts back.

A session belongs to the admin token it signed in with: the row is found by an HMAC of the cookie
keyed with that token, so once the server runs with another token (a restart after a rotation)
no session made under the old one is found again (decision 0038)."""

from __future__ import annotations

import hashlib
import hmac
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


def _hash(token: str, admin_token: str) -> str:
    return hmac.new(admin_token.encode(), token.encode(), hashlib.sha256).hexdigest()


async def sign_in(db: AsyncSession, now_ms: int, admin_token: str) -> str:
    """A new session under `admin_token`; answers the cookie's value (only its keyed hash is
    kept)."""
    token = secrets.token_urlsafe(32)
    db.add(
        PortalSession(
            token_hash=_hash(token, admin_token),
            csrf=secrets.token_urlsafe(24),
            created_at=now_ms,
            expires_at=now_ms + TTL_MS,
        )
    )
    await db.flush()
    return token


async def current(
    db: AsyncSession, token: str | None, now_ms: int, admin_token: str | None
) -> Signed | None:
    """The live session the cookie names, made under this admin token; None otherwise."""
    if not token or not admin_token:
        return None
    key = _hash(token, admin_token)
    row = (
        await db.execute(select(PortalSession).where(PortalSession.token_hash == key))
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
