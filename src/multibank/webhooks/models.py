"""Webhook events and their delivery attempts (D16).

An event is written in the transaction of the change that causes it, with the exact bytes that
will be sent, so every attempt sends the same payload under the same `call-ref`. Its delivery
state lives on the row: PENDING (with the programme-clock time of the next attempt), then
DELIVERED or FAILED. `lease_until` (server clock) is set while a process is sending it, so no
other process sends it at the same time."""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base

PENDING = "PENDING"
DELIVERED = "DELIVERED"
FAILED = "FAILED"
# The condition of the partial indexes, as the statements that use them spell it (a literal).
_PENDING = text(f"state = '{PENDING}'")


class WebhookEvent(Base):
    __tablename__ = "webhook_events"
    __table_args__ = (
        # Pending events only (partial: a delivered or failed event leaves them), so finding
        # due work costs the same whatever the history (migration 0027, decision 0062): the
        # oldest first, and a resource's pending events in order (its oldest, its next ones).
        Index("ix_webhook_events_pending", "id", postgresql_where=_PENDING, sqlite_where=_PENDING),
        Index(
            "ix_webhook_events_pending_resource",
            "programme_id",
            "resource",
            "id",
            postgresql_where=_PENDING,
            sqlite_where=_PENDING,
        ),
        # One resource's events in the order they happened.
        Index("ix_webhook_events_resource", "programme_id", "resource", "id"),
        Index("ix_webhook_events_programme", "programme_id", "id"),
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    path: Mapped[str] = mapped_column(String(60))  # "/managed_accounts/watch"
    # What happened, for the operator's filter: the path's topic and the event's type or state,
    # e.g. "managed_accounts.CREATED", "outgoing_wire_transfers.SUBMITTED".
    event_type: Mapped[str] = mapped_column(String(80))
    resource: Mapped[str] = mapped_column(String(80))  # "managed_accounts:123"
    call_ref: Mapped[str] = mapped_column(String(64), unique=True)
    payload: Mapped[str] = mapped_column(Text)  # the JSON body, byte for byte
    state: Mapped[str] = mapped_column(String(10))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[int | None] = mapped_column(nullable=True)  # programme clock
    lease_until: Mapped[int | None] = mapped_column(nullable=True)  # server clock
    last_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str | None] = mapped_column(String(300), nullable=True)
    delivered_at: Mapped[int | None] = mapped_column(nullable=True)
    created_at: Mapped[int]  # programme clock


class WebhookAttempt(Base):
    __tablename__ = "webhook_attempts"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    event_id: Mapped[int] = mapped_column(ForeignKey("webhook_events.id"), index=True)
    url: Mapped[str] = mapped_column(String(2100))
    attempted_at: Mapped[int]  # programme clock, as `published-timestamp`
    duration_ms: Mapped[int] = mapped_column(Integer)
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str | None] = mapped_column(String(300), nullable=True)
    # The start of the receiver's answer, never more.
    excerpt: Mapped[str | None] = mapped_column(String(200), nullable=True)
    outcome: Mapped[str] = mapped_column(String(10))  # DELIVERED | RETRY | FAILED
