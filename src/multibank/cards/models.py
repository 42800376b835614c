"""The managed-card instrument. A prepaid card's money lives in the ledger account with the
card's id (D23); a debit card has none and spends its parent managed account's."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base


class ManagedCard(Base):
    __tablename__ = "managed_cards"
    __table_args__ = (
        Index("ix_managed_cards_owner", "programme_id", "identity_id", "id"),
        # A card is found by its number through this keyed hash (simulator), never by the number.
        UniqueConstraint("programme_id", "number_hash"),
        UniqueConstraint("external_handle"),
        Index("ix_managed_cards_parent", "parent_account_id"),
        # The background step finds the cards whose next manufacturing step is due (D25).
        Index("ix_managed_cards_manufacturing_due", "manufacturing_due_at"),
        # The cards whose next lifecycle step (about-to-expire notice, expiry or renewal) is
        # due: the programme clock's steps read this index, never every card (cards/lifecycle.py).
        Index("ix_managed_cards_lifecycle_due", "lifecycle_due_at"),
        # A pool card's reference is unique in its programme (D31); NULL for other cards.
        UniqueConstraint("programme_id", "pool_reference"),
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    # NULL only while the card waits unassigned in the programme's card pool (D31): no owner's
    # query returns it until `POST /managed_cards/assign` gives it an identity.
    identity_id: Mapped[int | None] = mapped_column(ForeignKey("identities.id"), nullable=True)
    identity_type: Mapped[str] = mapped_column(String(10))
    profile_id: Mapped[int] = mapped_column(ForeignKey("profiles.id"))
    mode: Mapped[str] = mapped_column(String(12))  # PREPAID_MODE | DEBIT_MODE
    # Debit cards: the account they spend.
    parent_account_id: Mapped[int | None] = mapped_column(
        ForeignKey("managed_accounts.id"), nullable=True
    )
    external_handle: Mapped[str] = mapped_column(String(24))
    friendly_name: Mapped[str] = mapped_column(String(50))
    tag: Mapped[str | None] = mapped_column(String(50), nullable=True)
    currency: Mapped[str] = mapped_column(String(3))
    state: Mapped[str] = mapped_column(String(10))  # ACTIVE | BLOCKED | DESTROYED
    blocked_reason: Mapped[str | None] = mapped_column(String(10), nullable=True)
    destroyed_reason: Mapped[str | None] = mapped_column(String(10), nullable=True)
    type: Mapped[str] = mapped_column(String(10))  # VIRTUAL | PHYSICAL
    card_brand: Mapped[str] = mapped_column(String(12))
    level: Mapped[str] = mapped_column(String(10))  # CONSUMER | CORPORATE
    # The number is never stored in clear (D20): its first six and last four digits, a keyed
    # hash, and the number encrypted under the card-data key named in the stored value.
    number_first_six: Mapped[str] = mapped_column(String(6))
    number_last_four: Mapped[str] = mapped_column(String(4))
    number_hash: Mapped[str] = mapped_column(String(64))
    number_encrypted: Mapped[str] = mapped_column(String(200))
    # Raised by a renewal: the CVV (derived, never stored, D21) and its token change with it.
    version: Mapped[int] = mapped_column(Integer, default=1)
    name_on_card: Mapped[str] = mapped_column(String(27))
    name_on_card_line2: Mapped[str | None] = mapped_column(String(27), nullable=True)
    cardholder_mobile: Mapped[str] = mapped_column(String(20))
    billing_address: Mapped[dict[str, Any]] = mapped_column(JSON)
    start_mmyy: Mapped[str] = mapped_column(String(4))
    expiry_mmyy: Mapped[str] = mapped_column(String(4))
    expiry_period_months: Mapped[int] = mapped_column(Integer)
    renewal_type: Mapped[str] = mapped_column(String(10))  # NO_RENEW | RENEW
    created_at: Mapped[int]
    # Programme-clock ms at which the card's expiry month ends (D24): past it, a NO_RENEW card
    # is destroyed and a renewing one renewed.
    expires_at: Mapped[int] = mapped_column(BigInteger)
    # When CARD_ABOUT_TO_EXPIRE was sent for the current expiry (once); NULL before, and again
    # after a renewal.
    expiry_notice_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # When the card's next lifecycle step falls due (programme clock): the start of its expiry
    # month until the notice is sent, then `expires_at`; NULL once destroyed.
    lifecycle_due_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # A pool card's externalReference (its activation code's keyed hash is
    # `activation_code_hash`, shared with the physical activation code).
    pool_reference: Mapped[str | None] = mapped_column(String(50), nullable=True)
    # The card-level spend rules in their wire form (D22); NULL while none are set, and again
    # once the card is destroyed (its rules are gone).
    spend_rules: Mapped[dict[str, Any] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True
    )
    # Physical card (D25): NULL until the card is upgraded. `manufacturing_state` is the marker
    # of an upgraded card; `type` stays VIRTUAL until its first activation.
    product_reference: Mapped[str | None] = mapped_column(String(20), nullable=True)
    carrier_type: Mapped[str | None] = mapped_column(String(20), nullable=True)
    delivery_address: Mapped[dict[str, Any] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True
    )
    delivery_method: Mapped[str | None] = mapped_column(String(20), nullable=True)
    pending_activation: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    pin_blocked: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Consecutive wrong PINs in card-present purchases (D25): the third sets `pin_blocked`; a
    # right PIN, or a PIN unblock, sets it back to 0.
    pin_failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # REQUESTED | SENT_FOR_FULFILLMENT | DISPATCHED | DELIVERED
    manufacturing_state: Mapped[str | None] = mapped_column(String(24), nullable=True)
    # Programme-clock ms: when the current manufacturing run was requested (upgrade, damaged
    # or lost/stolen replacement), and when its next step falls due (NULL: none is due).
    manufacturing_requested_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    manufacturing_due_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # The activation code (of a physical card, or of a pool card at assign) as a keyed hash
    # bound to the card (card verification key, never in clear); the PIN
    # encrypted as the number is, under an associated-data label of its own.
    activation_code_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Wrong activation codes given for a pool card at assign (decision 0074): the third locks
    # the card, which then refuses every code, the right one included, as a PIN blocks.
    activation_failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    pin_encrypted: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # The replacement of this card: its own id (DAMAGED) or the new card's (LOST_STOLEN).
    replacement_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    replacement_reason: Mapped[str | None] = mapped_column(String(12), nullable=True)
    # LOST or STOLEN once reported: a user-blocked card reported lost keeps its USER block
    # reason (observed), so the report needs a column of its own.
    reported: Mapped[str | None] = mapped_column(String(6), nullable=True)

    @property
    def upgraded(self) -> bool:
        return self.manufacturing_state is not None


class CardMovement(Base):
    """A ledger transaction a card caused (authorisation, settlement, reversal, expiry,
    refund): the card's link to postings that may be on its parent account (a debit card has no
    ledger account of its own), so its statement can find them (D23, D30)."""

    __tablename__ = "card_movements"
    __table_args__ = (Index("ix_card_movements_card", "card_id", "created_at", "transaction_id"),)

    transaction_id: Mapped[int] = mapped_column(
        ForeignKey("ledger_transactions.id"), primary_key=True, autoincrement=False
    )
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    card_id: Mapped[int] = mapped_column(ForeignKey("managed_cards.id"))
    # The ledger account whose money moved: the prepaid card's own, or the debit card's parent.
    account_id: Mapped[int] = mapped_column(ForeignKey("ledger_accounts.id"))
    kind: Mapped[str] = mapped_column(String(30))
    created_at: Mapped[int]


class CardDataToken(Base):
    """A value the sandbox's `secure_session/tokenize` turned into a token (D21: a chosen PIN
    for an upgrade). The value is encrypted under the card-data key with the row's id and its
    own associated-data label; a token made with an owner's Bearer token is that identity's."""

    __tablename__ = "card_data_tokens"
    __table_args__ = (UniqueConstraint("programme_id", "token"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    identity_id: Mapped[int | None] = mapped_column(ForeignKey("identities.id"), nullable=True)
    token: Mapped[str] = mapped_column(String(24))
    field: Mapped[str] = mapped_column(String(12))  # CARD_NUMBER | CVV | PIN | PASSWORD
    value_encrypted: Mapped[str] = mapped_column(String(300))
    created_at: Mapped[int]
