"""Server-wide secrets: from settings in live mode, generated once and shared via the database in
sandbox so every process of one deployment signs and checks with the same keys."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from sqlalchemy import String
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel import carddata
from multibank.kernel.db import Base, Database
from multibank.kernel.loop import PeriodicWorker

ADMIN_TOKEN = "admin_token"
# How soon every running sandbox process takes a rotated admin token (AdminTokenWatcher).
ADMIN_TOKEN_REFRESH_SECONDS = 1.0


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


def new_admin_token() -> str:
    return f"mb_admin_{secrets.token_urlsafe(32)}"


async def admin_token(db: Database, configured: str | None, now_ms: int) -> tuple[str, bool]:
    if configured:
        return configured, False
    return await _get_or_create(db, ADMIN_TOKEN, new_admin_token(), now_ms)


async def replace_admin_token(session: AsyncSession, value: str, now_ms: int) -> None:
    """Makes `value` the sandbox's stored admin token, in `session`'s transaction (decision
    0067): the old one stops working in every process that watches it (`AdminTokenWatcher`)."""
    row = await session.get(ServerSecret, ADMIN_TOKEN)
    if row is None:
        session.add(ServerSecret(name=ADMIN_TOKEN, value=value, created_at=now_ms))
    else:
        row.value, row.created_at = value, now_ms


class AdminTokenWatcher(PeriodicWorker):
    """Keeps a sandbox process's admin token the one stored in the database, so a rotation
    (`multibank admin-token --rotate`, another process) takes effect everywhere within a second,
    without a restart. One primary-key read a second; not run when MULTIBANK_ADMIN_TOKEN is set."""

    name = "multibank-admin-token"

    def __init__(self, db: Database, on_change: Callable[[str], None], current: str | None) -> None:
        super().__init__(ADMIN_TOKEN_REFRESH_SECONDS, logging.getLogger("multibank.secrets"))
        self.db = db
        self.on_change = on_change
        self.current = current

    async def round(self) -> bool:
        try:
            async with self.db.sessionmaker() as session:
                value = await read_secret(session, ADMIN_TOKEN)
        except (OSError, SQLAlchemyError):
            # The database is away (its outage is logged where requests meet it): the token
            # stays the one last read until it answers again.
            return False
        if value and value != self.current:
            self.current = value
            self.on_change(value)
        return False


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
