"""Ledger tables: accounts with their balances, transactions, and the postings that sum to zero."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import (
    JSON,
    CheckConstraint,
    ForeignKey,
    Index,
    String,
    Table,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base

MANAGED_ACCOUNT = "MANAGED_ACCOUNT"
REVENUE = "REVENUE"
SETTLEMENT = "SETTLEMENT"
# Amounts held for payments that wait (SCA, processing): the counterpart of each reservation's
# available-only debit on the paying account, released or paid out when the payment ends.
RESERVED = "RESERVED"


class LedgerAccount(Base):
    """Every account that holds money: managed accounts (same id as the instrument) and each
    programme's revenue and settlement accounts per currency. Balances change only through the
    guarded updates of `ledger.service`, in the transaction that writes their postings."""

    __tablename__ = "ledger_accounts"
    __table_args__ = (
        # Customers' money never goes below zero; system accounts may (settlement is the
        # platform's mirror of money that came in from outside).
        CheckConstraint(
            "kind <> 'MANAGED_ACCOUNT' OR (available >= 0 AND actual >= 0)", name="non_negative"
        ),
        Index("ix_ledger_accounts_programme", "programme_id", "currency"),
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    kind: Mapped[str] = mapped_column(String(20))
    currency: Mapped[str] = mapped_column(String(3))
    # "programme:kind:currency" for system accounts, so there is exactly one of each.
    system_key: Mapped[str | None] = mapped_column(String(60), nullable=True, unique=True)
    available: Mapped[int] = mapped_column(default=0)
    actual: Mapped[int] = mapped_column(default=0)
    # Kept by the same guarded UPDATE as the balances, so a statement's `count` is O(1).
    # `posting_count`: every posting on the account; it is also the ledger's order on the
    # account (a posting's `seq` is the count its own update left). `closing_count`: the
    # postings that post or void a pending one (folded into its statement entry, so the
    # statement has posting_count - closing_count entries). `movement_count`: the entries that
    # move money (their amounts with their closing's are not zero).
    posting_count: Mapped[int] = mapped_column(default=0, server_default="0")
    closing_count: Mapped[int] = mapped_column(default=0, server_default="0")
    movement_count: Mapped[int] = mapped_column(default=0, server_default="0")
    created_at: Mapped[int]


class LedgerTransaction(Base):
    __tablename__ = "ledger_transactions"
    # A caller's own id for a movement (the simulator's deposit `txId`): one movement per id.
    __table_args__ = (UniqueConstraint("programme_id", "external_id"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    # Searched through the unique constraint on (programme_id, external_id): no index of its own.
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    type: Mapped[str] = mapped_column(String(30))  # TransactionId.type: DEPOSIT, CHARGE_FEE, ...
    state: Mapped[str] = mapped_column(String(15))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    external_id: Mapped[int | None] = mapped_column(nullable=True)
    created_at: Mapped[int]


ENTRY = text("pending_id IS NULL")
CLOSING = text("pending_id IS NOT NULL")


class Posting(Base):
    """Append-only (decision 0043): never updated nor deleted; the database refuses both
    (triggers of migration 0017). A hold is a pending posting; it is posted (settled) or voided
    (released) by one new posting on the same account naming it in `pending_id`, as
    TigerBeetle's two-phase transfers do. A statement entry is a posting that closes none,
    with the amounts of its closing added."""

    __tablename__ = "postings"
    __table_args__ = (
        # Statement pages: the entries of an account in time order, from the index alone.
        Index(
            "ix_postings_entries",
            "account_id",
            "created_at",
            "id",
            sqlite_where=ENTRY,
            postgresql_where=ENTRY,
        ),
        # The account's chain, in ledger order (`ledger verify`); one posting per place.
        Index("ix_postings_account_seq", "account_id", "seq", unique=True),
        # A pending posting's closing, found by it; a hold is closed once.
        Index(
            "ix_postings_pending_id",
            "pending_id",
            unique=True,
            sqlite_where=CLOSING,
            postgresql_where=CLOSING,
        ),
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    transaction_id: Mapped[int] = mapped_column(ForeignKey("ledger_transactions.id"), index=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("ledger_accounts.id"))
    currency: Mapped[str] = mapped_column(String(3))
    available_amount: Mapped[int]  # signed: credits positive, debits negative
    actual_amount: Mapped[int]
    available_after: Mapped[int]
    actual_after: Mapped[int]
    created_at: Mapped[int]
    # The account's posting_count after this posting: its place in the account's chain
    # (balances after = the previous place's + its own amounts). NULL on postings written
    # before migration 0017, whose holds were rewritten in place.
    seq: Mapped[int | None] = mapped_column(nullable=True)
    # The pending posting (same account) this one posts or voids; a hold is closed once.
    pending_id: Mapped[int | None] = mapped_column(ID, nullable=True)


# The tables as SQLAlchemy Core handles, and the columns a posting and a transaction are
# written with, for the statements built once (ledger/service.py, ledger/postgres.py).
ACCOUNTS = cast(Table, LedgerAccount.__table__)
POSTINGS = cast(Table, Posting.__table__)
TRANSACTIONS = cast(Table, LedgerTransaction.__table__)

POSTING_KEYS = (
    "id",
    "programme_id",
    "transaction_id",
    "account_id",
    "currency",
    "available_amount",
    "actual_amount",
    "available_after",
    "actual_after",
    "created_at",
    "seq",  # the account's posting_count that the posting's own update left
)
TRANSACTION_KEYS = ("id", "programme_id", "type", "state", "details", "external_id", "created_at")
