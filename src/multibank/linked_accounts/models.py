"""A linked account (v3.63.md §4.2, D39), its verification runs and their steps."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base

# The account's states (`LinkedAccountState`).
PENDING_VERIFICATION = "PENDING_VERIFICATION"
BLOCKED = "BLOCKED"
ACTIVE = "ACTIVE"
REJECTED = "REJECTED"
REMOVED = "REMOVED"
STATES = (PENDING_VERIFICATION, BLOCKED, ACTIVE, REJECTED, REMOVED)
# A run's states.
RUN_PENDING = "PENDING"
RUN_VERIFIED = "VERIFIED"
RUN_REJECTED = "REJECTED"
# A run's steps, in the order they are shown, and their statuses.
DECLARATION = "USER_DECLARATION_SCA_CHALLENGE"
TRANSFER_INSTRUCTION = "TRANSFER_INSTRUCTION"
INTERNAL_CHECKS = "INTERNAL_CHECKS"
STEPS = (DECLARATION, TRANSFER_INSTRUCTION, INTERNAL_CHECKS)
PENDING_USER = "PENDING_USER"
PENDING_REVIEW = "PENDING_REVIEW"
COMPLETED = "COMPLETED"
STEP_REJECTED = "REJECTED"


class LinkedAccount(Base):
    __tablename__ = "linked_accounts"
    __table_args__ = (
        # Lists are one identity's accounts, newest first.
        Index("ix_linked_accounts_owner", "programme_id", "identity_id", "created_at", "id"),
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    identity_id: Mapped[int] = mapped_column(ForeignKey("identities.id"))
    identity_type: Mapped[str] = mapped_column(String(10))
    profile_id: Mapped[int] = mapped_column(ForeignKey("profiles.id"))
    tag: Mapped[str | None] = mapped_column(String(50), nullable=True)
    friendly_name: Mapped[str | None] = mapped_column(String(50), nullable=True)
    name: Mapped[str] = mapped_column(String(100))
    type: Mapped[str] = mapped_column(String(10))  # BUSINESS | PERSONAL
    country: Mapped[str] = mapped_column(String(2))
    currency: Mapped[str] = mapped_column(String(3))
    # `accountReference` as the wire has it: `{iban, bankIdentifierCode}`, `{accountNumber,
    # sortCode, secondaryReference}` or `{accountDescriptor}`.
    account_reference: Mapped[dict[str, Any]] = mapped_column(JSON)
    # The reference in one normal form (`IBAN:…`, `UK:sort code:number`, `DESC:…`): the same
    # account linked twice is found by it (LINKED_ACCOUNT_ALREADY_ADDED).
    reference_key: Mapped[str] = mapped_column(String(120))
    state: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[int]


class VerificationRun(Base):
    __tablename__ = "linked_account_runs"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    # The programme's: its rows are exported and imported with the programme's (devloop).
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    linked_account_id: Mapped[int] = mapped_column(ForeignKey("linked_accounts.id"), index=True)
    state: Mapped[str] = mapped_column(String(10))  # PENDING | VERIFIED | REJECTED
    completed_at: Mapped[int | None] = mapped_column(nullable=True)
    overridden_reason: Mapped[str | None] = mapped_column(String(50), nullable=True)
    created_at: Mapped[int]


class VerificationStep(Base):
    __tablename__ = "linked_account_steps"
    __table_args__ = (UniqueConstraint("run_id", "step"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    run_id: Mapped[int] = mapped_column(ForeignKey("linked_account_runs.id"))
    step: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(20))
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    # The transfer instruction's reference (`LINK-` + 8 characters), looked up when a deposit
    # arrives with it.
    reference: Mapped[str | None] = mapped_column(String(13), nullable=True, index=True)
    completed_at: Mapped[int | None] = mapped_column(nullable=True)
