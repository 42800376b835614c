"""Messages to people (codes, invites, reset links), recorded in an outbox in the request's own
transaction and delivered after commit by a notifier, so a rolled-back request sends nothing.

Sandbox programmes never deliver (D1): their messages stay in the outbox for inspection.
"""

from __future__ import annotations

import logging
from typing import Protocol

from sqlalchemy import Index, String, Text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import Base
from multibank.kernel.ids import new_id

log = logging.getLogger("multibank.notify")


class OutboxMessage(Base):
    __tablename__ = "outbox_messages"
    __table_args__ = (Index("ix_outbox_pending", "delivered_at", "created_at"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    programme_id: Mapped[int]
    channel: Mapped[str] = mapped_column(String(10))  # EMAIL | SMS
    recipient: Mapped[str] = mapped_column(String(255))
    subject: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(Text)
    deliver: Mapped[bool]  # False for sandbox programmes
    created_at: Mapped[int]
    delivered_at: Mapped[int | None] = mapped_column(nullable=True)


class Notifier(Protocol):
    async def send(self, message: OutboxMessage) -> None: ...


class LogNotifier:
    """Delivers by writing the message to the log (development and tests)."""

    async def send(self, message: OutboxMessage) -> None:
        log.info(
            "notification",
            extra={
                "channel": message.channel,
                "recipient": message.recipient,
                "subject": message.subject,
            },
        )


async def record(
    db: AsyncSession,
    *,
    programme_id: int,
    sandbox: bool,
    channel: str,
    recipient: str,
    subject: str,
    body: str,
    now_ms: int,
) -> OutboxMessage:
    message = OutboxMessage(
        id=new_id(),
        programme_id=programme_id,
        channel=channel,
        recipient=recipient,
        subject=subject,
        body=body,
        deliver=not sandbox,
        created_at=now_ms,
    )
    db.add(message)
    await db.flush()
    return message
