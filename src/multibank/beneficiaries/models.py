"""A batch of beneficiaries to add or remove, confirmed by one challenge, and the beneficiaries
(D38). A beneficiary's details are kept as sent (`details`, `information`), with the keys that
find its duplicates and its payments beside them (instrument, IBAN, account number)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base

CREATE, REMOVE = "CREATE", "REMOVE"
# Batch states (v3.63.md §2.2): CHALLENGE_COMPLETED is an event's, the batch reads COMPLETED.
INITIALISED, FAILED, PENDING_CHALLENGE = "INITIALISED", "FAILED", "PENDING_CHALLENGE"
CHALLENGE_FAILED, CHALLENGE_COMPLETED, COMPLETED = (
    "CHALLENGE_FAILED",
    "CHALLENGE_COMPLETED",
    "COMPLETED",
)
# Beneficiary states.
INVALID, ACTIVE, REMOVED = "INVALID", "ACTIVE", "REMOVED"
INSTRUMENT, BANK = "instrument", "bank"


class BeneficiaryBatch(Base):
    __tablename__ = "beneficiary_batches"
    __table_args__ = (
        Index("ix_beneficiary_batches_owner", "programme_id", "identity_id", "created_at", "id"),
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    identity_id: Mapped[int]
    operation: Mapped[str] = mapped_column(String(10))  # CREATE | REMOVE
    tag: Mapped[str | None] = mapped_column(String(50), nullable=True)
    state: Mapped[str] = mapped_column(String(25))
    # Its challenge, once started: the channel, who started it, when; the wrong answers.
    challenge_channel: Mapped[str | None] = mapped_column(String(10), nullable=True)
    challenge_user_id: Mapped[int | None] = mapped_column(nullable=True)
    challenge_started_at: Mapped[int | None] = mapped_column(nullable=True)
    challenge_failures: Mapped[int] = mapped_column(default=0, server_default="0")
    created_at: Mapped[int]
    updated_at: Mapped[int]


class Beneficiary(Base):
    __tablename__ = "beneficiaries"
    __table_args__ = (
        Index("ix_beneficiaries_owner", "programme_id", "identity_id", "created_at", "id"),
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    identity_id: Mapped[int]
    batch_id: Mapped[int]  # the batch that created it
    # An open remove batch it is in (None once that batch is decided).
    remove_batch_id: Mapped[int | None] = mapped_column(nullable=True)
    # Every batch it took part in, as answered: [{batchId, operation}].
    batches: Mapped[list[dict[str, str]]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(25))
    validation_failure: Mapped[str | None] = mapped_column(String(50), nullable=True)
    external_refs: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    group: Mapped[str | None] = mapped_column(String(150), nullable=True)
    information: Mapped[dict[str, Any]] = mapped_column(JSON)
    details: Mapped[dict[str, Any]] = mapped_column(JSON)
    kind: Mapped[str] = mapped_column(String(10))  # instrument | bank
    # What finds a duplicate and what a payment pays: the instrument, or the bank account.
    instrument_type: Mapped[str | None] = mapped_column(String(20), nullable=True)
    instrument_id: Mapped[int | None] = mapped_column(nullable=True)
    iban: Mapped[str | None] = mapped_column(String(34), nullable=True)
    account_number: Mapped[str | None] = mapped_column(String(8), nullable=True)
    sort_code: Mapped[str | None] = mapped_column(String(6), nullable=True)
    created_at: Mapped[int]
    updated_at: Mapped[int]
