"""Messages to people (codes, invites, reset links), recorded in an outbox in the request's own
transaction and delivered after commit by a notifier, so a rolled-back request sends nothing.

Sandbox programmes never deliver (D1): their messages stay in the outbox for inspection. Live
rows are delivered by `multibank.kernel.outbox` through a `Notifier`: `SmtpNotifier` for e-mail
when SMTP is configured, `LogNotifier` otherwise and for SMS (docs/decisions/0008).
"""

from __future__ import annotations

import asyncio
import logging
import smtplib
import ssl
from collections.abc import Mapping
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Protocol

from sqlalchemy import Index, Integer, String, Text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base
from multibank.kernel.ids import new_id

log = logging.getLogger("multibank.notify")


class OutboxMessage(Base):
    __tablename__ = "outbox_messages"
    __table_args__ = (Index("ix_outbox_pending", "delivered_at", "created_at"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int]
    channel: Mapped[str] = mapped_column(String(10))  # EMAIL | SMS
    recipient: Mapped[str] = mapped_column(String(255))
    subject: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(Text)
    deliver: Mapped[bool]  # False for sandbox programmes
    created_at: Mapped[int]
    delivered_at: Mapped[int | None] = mapped_column(nullable=True)
    # Delivery bookkeeping (kernel/outbox.py): sends started, the last failure, and the time before
    # which no process may take the row (a running send's lease, or the back-off after a failure).
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    last_error: Mapped[str | None] = mapped_column(String(500), nullable=True)
    next_attempt_at: Mapped[int | None] = mapped_column(nullable=True)


class SmtpSettings(Protocol):
    """What the notifiers are built from: the SMTP settings (`multibank.settings.Settings` has
    them). Named here so the kernel stays below the settings (issue 42 §1)."""

    @property
    def smtp_host(self) -> str | None: ...
    @property
    def smtp_port(self) -> int: ...
    @property
    def smtp_from(self) -> str | None: ...
    @property
    def smtp_username(self) -> str | None: ...
    @property
    def smtp_password(self) -> str | None: ...
    @property
    def smtp_starttls(self) -> bool: ...
    @property
    def smtp_ssl(self) -> bool: ...
    @property
    def smtp_timeout_seconds(self) -> float: ...


class Notifier(Protocol):
    """Hands one message to whatever carries it. Raising means "not sent": the outbox keeps the
    message and tries again later."""

    async def send(self, message: OutboxMessage) -> None: ...


class LogNotifier:
    """Delivers by writing the message to the log (development, and SMS until a provider is
    configured). The body, which holds the code, is not logged."""

    async def send(self, message: OutboxMessage) -> None:
        log.info(
            "notification",
            extra={
                "message_id": str(message.id),
                "channel": message.channel,
                "recipient": message.recipient,
                "subject": message.subject,
            },
        )


class SmtpNotifier:
    """E-mail through an SMTP server, with the standard library's blocking client run in a worker
    thread so the event loop never waits on the network."""

    # Over 8 parameters: the SMTP connection's settings, keyword-only, named by `from_settings`.
    def __init__(
        self,
        *,
        host: str,
        port: int,
        sender: str,
        username: str | None = None,
        password: str | None = None,
        starttls: bool = True,
        implicit_tls: bool = False,
        timeout: float = 10.0,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.sender = sender
        self.username = username
        self.password = password
        self.starttls = starttls
        self.implicit_tls = implicit_tls
        self.timeout = timeout
        self.tls_context = tls_context

    @classmethod
    def from_settings(cls, settings: SmtpSettings) -> SmtpNotifier:
        if not settings.smtp_host or not settings.smtp_from:
            raise ValueError("SMTP needs MULTIBANK_SMTP_HOST and MULTIBANK_SMTP_FROM")
        return cls(
            host=settings.smtp_host,
            port=settings.smtp_port,
            sender=settings.smtp_from,
            username=settings.smtp_username,
            password=settings.smtp_password,
            starttls=settings.smtp_starttls,
            implicit_tls=settings.smtp_ssl,
            timeout=settings.smtp_timeout_seconds,
        )

    def compose(self, message: OutboxMessage) -> EmailMessage:
        mail = EmailMessage()
        mail["From"] = self.sender
        mail["To"] = message.recipient
        mail["Subject"] = message.subject
        mail["Date"] = formatdate(usegmt=True)
        mail["Message-ID"] = make_msgid(idstring=str(message.id))
        mail.set_content(message.body)
        return mail

    async def send(self, message: OutboxMessage) -> None:
        if message.channel != "EMAIL":
            raise ValueError(f"SMTP cannot deliver a {message.channel} message")
        await asyncio.to_thread(self._send_blocking, self.compose(message))

    def _send_blocking(self, mail: EmailMessage) -> None:
        context = self.tls_context or ssl.create_default_context()
        smtp: smtplib.SMTP
        if self.implicit_tls:
            smtp = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=context)
        else:
            smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
        with smtp:
            smtp.ehlo()
            if self.starttls and not self.implicit_tls:
                smtp.starttls(context=context)
                smtp.ehlo()
            if self.username:
                smtp.login(self.username, self.password or "")
            refused = smtp.send_message(mail)
            if refused:  # some recipients refused while others were accepted
                raise smtplib.SMTPRecipientsRefused(refused)


class ChannelNotifier:
    """Sends each message through the notifier of its channel (EMAIL, SMS), or a fallback."""

    def __init__(self, channels: Mapping[str, Notifier], fallback: Notifier) -> None:
        self.channels = dict(channels)
        self.fallback = fallback

    async def send(self, message: OutboxMessage) -> None:
        await self.channels.get(message.channel, self.fallback).send(message)


def build_notifier(settings: SmtpSettings) -> Notifier:
    """E-mail through SMTP when `MULTIBANK_SMTP_HOST` is set, everything else to the log."""
    log_notifier = LogNotifier()
    if not settings.smtp_host:
        return log_notifier
    return ChannelNotifier({"EMAIL": SmtpNotifier.from_settings(settings)}, log_notifier)


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
