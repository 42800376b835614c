"""Tables of the operator model (D4)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base

# The mode of a programme's old row after `multibank programme reset` (decision 0051): it keeps
# the customers and ledger it had (postings are never deleted), no key, profile nor name of use,
# and no API, portal or CLI answer shows it.
ARCHIVED = "archived"


class Programme(Base):
    __tablename__ = "programmes"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    mode: Mapped[str] = mapped_column(String(10))  # sandbox | live
    step_up_required: Mapped[bool] = mapped_column(Boolean, default=False)
    failed_login_limit: Mapped[int] = mapped_column(Integer, default=5)
    iban_allocation_delay_seconds: Mapped[int] = mapped_column(Integer, default=2)
    password_expiry_days: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Payments (D13, D14): SCA of sends and wire transfers, wrong answers a challenge allows,
    # the low-value exemption's limits, and how long a submitted wire transfer takes.
    sends_sca_required: Mapped[bool] = mapped_column(Boolean, default=True, server_default="1")
    owt_sca_required: Mapped[bool] = mapped_column(Boolean, default=True, server_default="1")
    sca_challenge_limit: Mapped[int] = mapped_column(Integer, default=5, server_default="5")
    low_value_max_amount: Mapped[int] = mapped_column(default=3000, server_default="3000")
    low_value_max_count: Mapped[int] = mapped_column(Integer, default=5, server_default="5")
    low_value_max_total: Mapped[int] = mapped_column(default=10000, server_default="10000")
    owt_processing_delay_seconds: Mapped[int] = mapped_column(
        Integer, default=2, server_default="2"
    )
    # Webhooks (D16): where events go (none: no delivery), and a live programme's signing secret
    # (a sandbox programme signs with its API key).
    webhook_url: Mapped[str | None] = mapped_column(String(2000), nullable=True)
    webhook_secret: Mapped[str | None] = mapped_column(String(100), nullable=True)
    # Sandbox only: how far this programme's clock runs ahead of the server's (D8 clock/advance).
    clock_offset_ms: Mapped[int] = mapped_column(default=0)
    # The operator's card fees (D19), `{"purchase": {"EUR": 10}, ...}`; a missing entry is the
    # default of `programmes.card_fees`.
    card_fees: Mapped[dict[str, dict[str, int]] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True
    )
    created_at: Mapped[int]


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(12))
    # Kept only for sandbox programmes so `programme show` can print the key again (docs/decisions).
    sandbox_plaintext: Mapped[str | None] = mapped_column(String(100), nullable=True)
    label: Mapped[str | None] = mapped_column(String(100), nullable=True)
    created_at: Mapped[int]
    revoked_at: Mapped[int | None] = mapped_column(nullable=True)


IDENTITY_AND_ACCOUNT_KINDS = (
    "corporate",
    "consumer",
    "corporateManagedAccount",
    "consumerManagedAccount",
)
# Money movement (D12): one profile of each per programme, carrying the fee of a payment per
# currency in minor units, which the source pays on top of the amount.
MOVEMENT_KINDS = ("transfers", "sends", "outgoingWireTransfers")
# Managed cards (D19): one profile per identity type and mode; the mode and identity type are
# in the kind (`cards.service.CARD_PROFILES`).
CARD_KINDS = (
    "corporatePrepaidManagedCard",
    "corporateDebitManagedCard",
    "consumerPrepaidManagedCard",
    "consumerDebitManagedCard",
)
# Linked accounts (the 3.63 line, D39): one profile per programme, over EUR and GBP (those of
# the programme's currencies), every country.
LINKED_ACCOUNTS_KIND = "linkedAccounts"
LINKED_ACCOUNT_CURRENCIES = ("EUR", "GBP")
PROFILE_KINDS = IDENTITY_AND_ACCOUNT_KINDS + MOVEMENT_KINDS + CARD_KINDS + (LINKED_ACCOUNTS_KIND,)
DEFAULT_MOVEMENT_FEES = {"transfers": 0, "sends": 0, "outgoingWireTransfers": 100}


class Profile(Base):
    __tablename__ = "profiles"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"), index=True)
    kind: Mapped[str] = mapped_column(String(40))
    currencies: Mapped[list[str]] = mapped_column(JSON)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    # Movement kinds only: {currency: fee in minor units}; a currency not named costs 0.
    fees: Mapped[dict[str, int] | None] = mapped_column(JSON, nullable=True)
    # Outgoing wire transfer profiles: whether a returned transfer gives its fee back (D14).
    return_fee_refunded: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    # Card profiles only: the operator's profile-level spend rules in their wire form (D22),
    # checked with each card's own at authorisation; NULL while none are set.
    spend_rules: Mapped[dict[str, Any] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True
    )
    created_at: Mapped[int]


class FeeType(Base):
    __tablename__ = "fee_types"
    __table_args__ = (UniqueConstraint("programme_id", "name"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"), index=True)
    name: Mapped[str] = mapped_column(String(50))
    # {feeGroup: {currency: minor units}}
    amounts: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[int]
