"""Server-wide secrets: from settings in live mode, generated once and shared via the database in
sandbox so every process of one deployment signs and checks with the same keys."""

from __future__ import annotations

import secrets

from sqlalchemy import String
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel import carddata
from multibank.kernel.db import Base, Database


class ServerSecret(Base):
    """Secrets generated in sandbox on first start, shared by every process through the database.
    A kernel table (no programme owns it), so the kernel imports no domain model."""

    __tablename__ = "server_secrets"

    name: Mapped[str] = mapped_column(String(50), primary_key=True)
    value: Mapped[str] = mapped_column(String(500))
    created_at: Mapped[int]


async def _get_or_create(db: Database, name: str, make: str, now_ms: int) -> tuple[str, bool]:
    async with db.sessionmaker() as session:
        row = await session.get(ServerSecret, name)
        if row is not None:
            return row.value, False
        session.add(ServerSecret(name=name, value=make, created_at=now_ms))
        try:
            await session.commit()
            return make, True
        except IntegrityError:  # another process created it first
            await session.rollback()
    async with db.sessionmaker() as session:
        existing: ServerSecret | None = await session.get(ServerSecret, name)
        assert existing is not None
        return existing.value, False


async def admin_token(db: Database, configured: str | None, now_ms: int) -> tuple[str, bool]:
    if configured:
        return configured, False
    return await _get_or_create(db, "admin_token", f"mb_admin_{secrets.token_urlsafe(32)}", now_ms)


async def jwt_keys(db: Database, configured: str | None, now_ms: int, generate: str) -> str:
    if configured:
        return configured
    value, _ = await _get_or_create(db, "jwt_keys", generate, now_ms)
    return value


async def card_keys(
    db: Database, data_keys: str | None, verification_key: str | None, now_ms: int
) -> tuple[str, str]:
    """The card-data keys and the card verification key (D20, D21): configured, or in sandbox
    generated once and shared through the database."""
    if not data_keys:
        data_keys, _ = await _get_or_create(
            db, "card_data_keys", carddata.generate_data_keys(), now_ms
        )
    if not verification_key:
        verification_key, _ = await _get_or_create(
            db, "card_verification_key", carddata.generate_verification_key(), now_ms
        )
    return data_keys, verification_key


async def read_secret(session: AsyncSession, name: str) -> str | None:
    row = await session.get(ServerSecret, name)
    return row.value if row else None
