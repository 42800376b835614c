"""One-time codes (e-mail and mobile verification, invites, lost-password nonces, OTPs), D1.

Sandbox programmes always use `123456`, and a wrong guess does not use a code up (D11). Live
programmes draw a random code, keep only its keyed hash, let it expire, and kill it after
`MAX_ATTEMPTS` wrong tries. Either way a code must have been issued before it can be verified.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import Index, Integer, String, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base
from multibank.kernel.ids import new_id

SANDBOX_CODE = "123456"
MAX_ATTEMPTS = 5
DEFAULT_TTL_MS = 10 * 60 * 1000


class OneTimeCode(Base):
    __tablename__ = "one_time_codes"
    __table_args__ = (Index("ix_one_time_codes_subject", "programme_id", "subject", "purpose"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int]
    subject: Mapped[str] = mapped_column(String(300))  # e.g. "user:123" or "email:x@y"
    purpose: Mapped[str] = mapped_column(String(30))
    code_hash: Mapped[str] = mapped_column(String(64))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[int]
    expires_at: Mapped[int]
    used_at: Mapped[int | None] = mapped_column(nullable=True)


@dataclass(frozen=True)
class Issued:
    code: str
    expires_at: int


def _hash(programme_id: int, subject: str, purpose: str, code: str) -> str:
    # Keyed by where the code belongs, so one leaked row cannot be replayed for another subject.
    key = f"{programme_id}:{subject}:{purpose}".encode()
    return hmac.new(key, code.encode(), hashlib.sha256).hexdigest()


async def latest(
    db: AsyncSession, programme_id: int, subject: str, purpose: str
) -> OneTimeCode | None:
    stmt = (
        select(OneTimeCode)
        .where(
            OneTimeCode.programme_id == programme_id,
            OneTimeCode.subject == subject,
            OneTimeCode.purpose == purpose,
        )
        .order_by(OneTimeCode.created_at.desc(), OneTimeCode.id.desc())
        .limit(1)
    )
    return (await db.execute(stmt)).scalar_one_or_none()


async def revoke(
    db: AsyncSession, programme_id: int, subject: str, purpose: str, now_ms: int
) -> None:
    """Kills every unused code of (subject, purpose), e.g. when the address it went to changes."""
    await db.execute(
        update(OneTimeCode)
        .where(
            OneTimeCode.programme_id == programme_id,
            OneTimeCode.subject == subject,
            OneTimeCode.purpose == purpose,
            OneTimeCode.used_at.is_(None),
        )
        .values(used_at=now_ms)
    )


async def issue(
    db: AsyncSession,
    *,
    programme_id: int,
    sandbox: bool,
    subject: str,
    purpose: str,
    now_ms: int,
    ttl_ms: int = DEFAULT_TTL_MS,
) -> Issued:
    """A new code for (subject, purpose); earlier unused ones die with it."""
    await revoke(db, programme_id, subject, purpose, now_ms)
    code = SANDBOX_CODE if sandbox else f"{secrets.randbelow(10**6):06d}"
    db.add(
        OneTimeCode(
            id=new_id(),
            programme_id=programme_id,
            subject=subject,
            purpose=purpose,
            code_hash=_hash(programme_id, subject, purpose, code),
            attempts=0,
            created_at=now_ms,
            expires_at=now_ms + ttl_ms,
        )
    )
    await db.flush()
    return Issued(code, now_ms + ttl_ms)


class CodeInvalid(Exception):
    """No live code, or the wrong one."""


class CodeExpired(CodeInvalid):
    pass


async def consume(
    db: AsyncSession,
    *,
    programme_id: int,
    sandbox: bool,
    subject: str,
    purpose: str,
    code: str,
    now_ms: int,
    keep: bool = False,
) -> None:
    """Checks `code` against the live code of (subject, purpose) and uses it up (unless `keep`).

    Raises CodeExpired or CodeInvalid. A wrong guess counts against a live code; the fifth kills it.
    """
    row = await latest(db, programme_id, subject, purpose)
    if row is None or row.used_at is not None:
        raise CodeInvalid
    if row.expires_at <= now_ms:
        raise CodeExpired
    expected = _hash(programme_id, subject, purpose, code)
    if not hmac.compare_digest(expected, row.code_hash):
        if not sandbox:
            row.attempts += 1
            if row.attempts >= MAX_ATTEMPTS:
                row.used_at = now_ms
            await db.flush()
        raise CodeInvalid
    if not keep:
        row.used_at = now_ms
        await db.flush()
