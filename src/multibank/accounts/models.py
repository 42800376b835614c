"""The managed-account instrument; its money lives in the ledger account with the same id."""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, String, text
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base

PENDING_ALLOCATION = "iban_state = 'PENDING_ALLOCATION'"


class ManagedAccount(Base):
    __tablename__ = "managed_accounts"
    __table_args__ = (
        Index("ix_managed_accounts_owner", "programme_id", "identity_id", "id"),
        # The few accounts whose IBAN allocation is pending, for the background step that
        # finishes each when due (payments/steps.py): every process looks every second.
        Index(
            "ix_managed_accounts_iban_pending",
            "iban_requested_at",
            sqlite_where=text(PENDING_ALLOCATION),
            postgresql_where=text(PENDING_ALLOCATION),
        ),
    )

    id: Mapped[int] = mapped_column(ID, ForeignKey("ledger_accounts.id"), primary_key=True)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    identity_id: Mapped[int] = mapped_column(ForeignKey("identities.id"))
    identity_type: Mapped[str] = mapped_column(String(10))
    profile_id: Mapped[int] = mapped_column(ForeignKey("profiles.id"))
    friendly_name: Mapped[str] = mapped_column(String(50))
    tag: Mapped[str | None] = mapped_column(String(50), nullable=True)
    currency: Mapped[str] = mapped_column(String(3))
    state: Mapped[str] = mapped_column(String(10))  # ACTIVE | BLOCKED | DESTROYED
    blocked_reason: Mapped[str | None] = mapped_column(String(10), nullable=True)
    destroyed_reason: Mapped[str | None] = mapped_column(String(10), nullable=True)
    # UNALLOCATED | PENDING_ALLOCATION | ALLOCATED
    iban_state: Mapped[str] = mapped_column(String(20), default="UNALLOCATED")
    iban_requested_at: Mapped[int | None] = mapped_column(nullable=True)
    iban: Mapped[str | None] = mapped_column(String(34), nullable=True, unique=True)
    bic: Mapped[str | None] = mapped_column(String(11), nullable=True)
    sort_code: Mapped[str | None] = mapped_column(String(6), nullable=True)
    account_number: Mapped[str | None] = mapped_column(String(8), nullable=True)
    created_at: Mapped[int]
