"""One table for the three payment kinds (D12): what was asked, its fee, its state, and the
ledger transaction that moved (or reserved) its money. A transfer and a send name a destination
instrument; an outgoing wire transfer names an external beneficiary instead."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base

TRANSFER = "TRANSFER"
SEND = "SEND"
OWT = "OUTGOING_WIRE_TRANSFER"
# States (money-movement.md §1.2 to §1.4).
PENDING = "PENDING"
PENDING_CHALLENGE = "PENDING_CHALLENGE"
COMPLETED = "COMPLETED"
REJECTED = "REJECTED"
FAILED = "FAILED"
INVALID = "INVALID"
SUBMITTED = "SUBMITTED"
APPROVED = "APPROVED"
RETURNED = "RETURNED"
# The 3.63 line's states (v3.63.md §5.1, §6; D35): an OWT waiting for its payer to confirm the
# payee's name (Confirmation of Payee, D41), and a payment its payer cancelled before it went.
PENDING_CONFIRMATION = "PENDING_CONFIRMATION"
CANCELLED = "CANCELLED"
# A payment whose payer chose when it goes (D40): it waits for `scheduled_at`, nothing held.
SCHEDULED = "SCHEDULED"
# What the 3.29.1 interface never shows its clients (D12a, D35): lists leave such payments out
# and their ids answer 404 there, until they reach a state 3.29.1 knows (CANCELLED never does).
HIDDEN_FROM_3_29 = (INVALID, PENDING_CONFIRMATION, CANCELLED, SCHEDULED)
# Where a payment ends: it is executed (`executed_at`) when it reaches one of these.
EXECUTED = (COMPLETED, FAILED, REJECTED, RETURNED)
# States in which a payment waits for its SCA challenge.
AWAITING_SCA = (PENDING, PENDING_CHALLENGE)
LOW_VALUE = "LOW_VALUE"
TRUSTED_BENEFICIARY = "TRUSTED_BENEFICIARY"  # paid to a trusted beneficiary (D38)
# The profile kind (D12) that configures each payment kind.
PROFILE_KIND = {TRANSFER: "transfers", SEND: "sends", OWT: "outgoingWireTransfers"}


class Payment(Base):
    __tablename__ = "payments"
    __table_args__ = (
        # Lists are one identity's payments of one kind, newest first.
        Index("ix_payments_owner", "programme_id", "identity_id", "kind", "created_at", "id"),
        # What the background worker must step (a challenge expiring, an OWT settling).
        Index("ix_payments_due", "due_at"),
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    kind: Mapped[str] = mapped_column(String(30))  # TRANSFER | SEND | OUTGOING_WIRE_TRANSFER
    identity_id: Mapped[int] = mapped_column(ForeignKey("identities.id"))
    identity_type: Mapped[str] = mapped_column(String(10))
    user_id: Mapped[int]  # the user whose session created it
    profile_id: Mapped[int] = mapped_column(ForeignKey("profiles.id"))
    tag: Mapped[str | None] = mapped_column(String(50), nullable=True)
    source_type: Mapped[str] = mapped_column(String(20))
    source_id: Mapped[int]
    destination_type: Mapped[str | None] = mapped_column(String(20), nullable=True)
    destination_id: Mapped[int | None] = mapped_column(nullable=True)
    # Sends: the identity that receives the money.
    destination_identity_id: Mapped[int | None] = mapped_column(nullable=True)
    # Outgoing wire transfers: the beneficiary as sent, its scheme and the reference text.
    beneficiary: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    scheme: Mapped[str | None] = mapped_column(String(20), nullable=True)
    description: Mapped[str | None] = mapped_column(String(255), nullable=True)
    currency: Mapped[str] = mapped_column(String(3))
    amount: Mapped[int]
    fee: Mapped[int]
    state: Mapped[str] = mapped_column(String(25))
    rejected_info: Mapped[str | None] = mapped_column(String(10), nullable=True)
    # Why a create was refused although the payment is kept (OWT `INVALID`), e.g.
    # INSUFFICIENT_FUNDS; or why it ended other than COMPLETED.
    failure: Mapped[str | None] = mapped_column(String(50), nullable=True)
    exemption: Mapped[str | None] = mapped_column(String(20), nullable=True)
    # Confirmation of Payee (D41): the checks' outcomes as the 3.63 line answers them
    # (`validationOutcomes`), kept from the create; None where no check ran.
    validation_outcomes: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    # The payer's reason, given with a cancel (3.63 line, D40).
    cancellation_reason: Mapped[str | None] = mapped_column(String(50), nullable=True)
    # The linked account a wire transfer pays (3.63 line, D39), when its payer named one.
    linked_account_id: Mapped[int | None] = mapped_column(nullable=True)
    # The trusted beneficiary it pays (3.63 line, D38), when its payer named one.
    beneficiary_id: Mapped[int | None] = mapped_column(nullable=True)
    # The batch challenge (3.63 line's `/challenges`, D37) the payment was put in, if any.
    batch_challenge_id: Mapped[int | None] = mapped_column(nullable=True, index=True)
    # Scheduling (3.63 line, D40): when its payer asked it to go (programme clock, epoch ms),
    # and when it reached the state it ended in (`EXECUTED`).
    scheduled_at: Mapped[int | None] = mapped_column(nullable=True)
    executed_at: Mapped[int | None] = mapped_column(nullable=True)
    # The ledger transaction that moved or reserved the money (its id is the payment's).
    transaction_id: Mapped[int | None] = mapped_column(nullable=True)
    # Amount + fee held on the source (available down, actual not yet) while the payment waits;
    # 0 once it moved or was released. `ledger verify` checks these against the balances.
    reserved: Mapped[int] = mapped_column(default=0, server_default="0")
    # SCA (D13): the challenge in flight (channel, the user who started it, when), the wrong
    # answers so far, and when the payment passed SCA.
    challenge_channel: Mapped[str | None] = mapped_column(String(10), nullable=True)
    challenge_user_id: Mapped[int | None] = mapped_column(nullable=True)
    challenge_started_at: Mapped[int | None] = mapped_column(nullable=True)
    challenge_failures: Mapped[int] = mapped_column(default=0, server_default="0")
    sca_at: Mapped[int | None] = mapped_column(nullable=True)
    # The programme-clock time of the next background step, when one is pending.
    due_at: Mapped[int | None] = mapped_column(nullable=True)
    created_at: Mapped[int]
    updated_at: Mapped[int]


# A batch challenge's states (D37): waiting for its answer, passed, or ended without passing
# (wrong answers past the limit, its time up, a push denied).
BATCH_PENDING, BATCH_COMPLETED, BATCH_FAILED = "PENDING", "COMPLETED", "FAILED"


class BatchChallenge(Base):
    """One SCA challenge confirming several sends or wire transfers of one identity at once
    (the 3.63 line's `/challenges`, D37: PSD2 dynamic linking over a list). Its payments name it
    (`Payment.batch_challenge_id`) and each carries the challenge's channel and user as a
    per-resource challenge would, so a payment is in one open challenge at most."""

    __tablename__ = "batch_challenges"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    identity_id: Mapped[int]
    user_id: Mapped[int]  # who started it: only they may answer it
    session_id: Mapped[int]
    resource_type: Mapped[str] = mapped_column(String(40))  # sends | outgoing_wire_transfers
    channel: Mapped[str] = mapped_column(String(10))  # SMS | AUTHY | BIOMETRIC
    status: Mapped[str] = mapped_column(String(10))  # PENDING | COMPLETED | FAILED
    failures: Mapped[int] = mapped_column(default=0, server_default="0")
    created_at: Mapped[int]
    expires_at: Mapped[int]
    settled_at: Mapped[int | None] = mapped_column(nullable=True)
    # A declaration challenge's linked accounts (ids as sent); None for payments, which name
    # their batch themselves (`Payment.batch_challenge_id`).
    resource_ids: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
