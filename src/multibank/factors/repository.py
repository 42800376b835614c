"""Every query on factors and step-up challenges; each is scoped by programme and user (or by
programme and session, which belongs to one user)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Select, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.factors.models import AuthFactor, ScaChallenge
from multibank.kernel.tokens import AuthSession
from multibank.users.models import User

PENDING = "PENDING"
EXPIRED = "EXPIRED"


async def user(
    db: AsyncSession, programme_id: int, user_id: int, lock: bool = False
) -> User | None:
    """The session's user; `lock` serialises enrolments of one user across sessions (PostgreSQL;
    SQLite writes are serial anyway)."""
    stmt = select(User).where(User.programme_id == programme_id, User.id == user_id)
    if lock:
        stmt = stmt.with_for_update()
    return (await db.execute(stmt)).scalar_one_or_none()


def _factors(programme_id: int, user_id: int) -> Select[AuthFactor]:
    return select(AuthFactor).where(
        AuthFactor.programme_id == programme_id, AuthFactor.user_id == user_id
    )


async def factors_of(db: AsyncSession, programme_id: int, user_id: int) -> Sequence[AuthFactor]:
    stmt = _factors(programme_id, user_id).order_by(AuthFactor.created_at, AuthFactor.id)
    return (await db.execute(stmt)).scalars().all()


async def factor(
    db: AsyncSession, programme_id: int, user_id: int, channel: str
) -> AuthFactor | None:
    stmt = _factors(programme_id, user_id).where(AuthFactor.channel == channel)
    return (await db.execute(stmt)).scalar_one_or_none()


def _challenges(programme_id: int) -> Select[ScaChallenge]:
    return select(ScaChallenge).where(ScaChallenge.programme_id == programme_id)


async def challenge(
    db: AsyncSession, programme_id: int, user_id: int, challenge_id: int
) -> ScaChallenge | None:
    stmt = _challenges(programme_id).where(
        ScaChallenge.user_id == user_id, ScaChallenge.id == challenge_id
    )
    return (await db.execute(stmt)).scalar_one_or_none()


async def challenge_in_flight(
    db: AsyncSession, programme_id: int, session_id: int, now_ms: int
) -> ScaChallenge | None:
    """The session's pending challenge that has not timed out yet, if any."""
    stmt = _challenges(programme_id).where(
        ScaChallenge.session_id == session_id,
        ScaChallenge.status == PENDING,
        ScaChallenge.expires_at > now_ms,
    )
    return (await db.execute(stmt.limit(1))).scalar_one_or_none()


async def expire_timed_out(
    db: AsyncSession, programme_id: int, session_id: int, now_ms: int
) -> None:
    """Pending challenges of the session whose time is up become EXPIRED (as of their expiry)."""
    await db.execute(
        update(ScaChallenge)
        .where(
            ScaChallenge.programme_id == programme_id,
            ScaChallenge.session_id == session_id,
            ScaChallenge.status == PENDING,
            ScaChallenge.expires_at <= now_ms,
        )
        .values(status=EXPIRED, settled_at=ScaChallenge.expires_at)
        .execution_options(synchronize_session=False)
    )


async def expire_pending_of_channel(
    db: AsyncSession, programme_id: int, user_id: int, channel: str, now_ms: int
) -> None:
    """An unlinked device cannot answer its challenges any more: they end EXPIRED now."""
    await db.execute(
        update(ScaChallenge)
        .where(
            ScaChallenge.programme_id == programme_id,
            ScaChallenge.user_id == user_id,
            ScaChallenge.channel == channel,
            ScaChallenge.status == PENDING,
        )
        .values(status=EXPIRED, settled_at=now_ms)
        .execution_options(synchronize_session=False)
    )


async def mark_stepped_up(
    db: AsyncSession, programme_id: int, session_id: int, now_ms: int
) -> None:
    """The session is stepped up for the rest of its life (D7); `stepped_up_at` keeps when it
    last did, which later sessions of its user may rely on for a while (decision 0059)."""
    await db.execute(
        update(AuthSession)
        .where(AuthSession.programme_id == programme_id, AuthSession.id == session_id)
        .values(stepped_up=True, stepped_up_at=now_ms)
    )
