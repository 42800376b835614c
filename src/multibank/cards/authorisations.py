"""The card authorisations table: one row per approved authorisation, the state of its hold
(D23). The money itself is in the ledger (`cards.money`); this row says what of the hold is
still open, what was settled and refunded, and lets a settlement, reversal or expiry take the
authorisation once (its row is locked and its state checked first)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String, text
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base

PENDING_SETTLEMENT, COMPLETED, REVERSED, EXPIRED = (
    "PENDING_SETTLEMENT",
    "COMPLETED",
    "REVERSED",
    "EXPIRED",
)
OPEN = text("state = 'PENDING_SETTLEMENT'")


class CardAuthorisation(Base):
    __tablename__ = "card_authorisations"
    __table_args__ = (
        # A debit card's spend in a window (availableToSpend, D22): its authorisations by time.
        Index("ix_card_authorisations_card", "card_id", "created_at"),
        # The holds that fall due (expiry on the programme clock), found from the index alone.
        Index(
            "ix_card_authorisations_open",
            "expires_at",
            sqlite_where=OPEN,
            postgresql_where=OPEN,
        ),
    )

    # The AUTHORISATION ledger transaction's id: the authorisationId of the wire.
    id: Mapped[int] = mapped_column(
        ID, ForeignKey("ledger_transactions.id"), primary_key=True, autoincrement=False
    )
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    card_id: Mapped[int] = mapped_column(ForeignKey("managed_cards.id"))
    # The ledger account whose money is held: the prepaid card's own or the debit card's parent.
    account_id: Mapped[int] = mapped_column(ForeignKey("ledger_accounts.id"))
    # That account's reserved book, the hold's counterpart (decision 0045).
    reserved_account_id: Mapped[int] = mapped_column(ForeignKey("ledger_accounts.id"))
    currency: Mapped[str] = mapped_column(String(3))
    held_amount: Mapped[int]
    # What the reserved book still holds for this authorisation: 0 once it is closed.
    open_amount: Mapped[int]
    settled_amount: Mapped[int] = mapped_column(default=0)
    # Fees charged by its settlement and its refunds (they count as spent, D22).
    fee_amount: Mapped[int] = mapped_column(default=0)
    refunded_amount: Mapped[int] = mapped_column(default=0)
    state: Mapped[str] = mapped_column(String(20))
    auth_code: Mapped[str] = mapped_column(String(6))
    # merchantName, merchantId, merchantCategoryCode, merchantTerminalCountry (alpha-2), ...
    merchant: Mapped[dict[str, Any]] = mapped_column(JSON)
    settlement_id: Mapped[int | None] = mapped_column(ID, nullable=True)
    expires_at: Mapped[int]  # programme clock, epoch ms
    created_at: Mapped[int]
