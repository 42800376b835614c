"""The ledger's own invariants of D5, checked in SQL: per programme and currency all balances
sum to zero, every account's balance equals the sum of its postings, and each account's chain of
postings adds up (`ledger.chain`, decision 0043).

What the ledger holds for the slices above it (payment reservations, card holds) is checked by
`multibank.reconciliation`, which runs these checks with its own (`ledger verify`)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import case, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from multibank.ledger import chain
from multibank.ledger.models import LedgerAccount, LedgerTransaction, Posting


@dataclass(frozen=True)
class Violation:
    what: str
    detail: str


async def one_snapshot(db: AsyncSession) -> None:
    """Begins the session's transaction on PostgreSQL as REPEATABLE READ: every statement of it
    then reads the database as it was at its first, as the checks of `ledger verify` must (each
    compares what two statements read). Under READ COMMITTED each statement read a later moment,
    and a verify run while money moved reported differences that were never there. (SQLite's
    transactions read one snapshot already.) Call it before the transaction's first statement;
    after that it changes nothing."""
    if not db.in_transaction() and db.get_bind().dialect.name == "postgresql":
        await db.connection(execution_options={"isolation_level": "REPEATABLE READ"})


async def _currency_sums(db: AsyncSession, programme_id: int | None) -> list[Violation]:
    """Each programme's currencies sum to zero."""
    out: list[Violation] = []
    totals = select(
        LedgerAccount.programme_id,
        LedgerAccount.currency,
        func.sum(LedgerAccount.available),
        func.sum(LedgerAccount.actual),
    ).group_by(LedgerAccount.programme_id, LedgerAccount.currency)
    if programme_id is not None:
        totals = totals.where(LedgerAccount.programme_id == programme_id)
    for pid, currency, available, actual in (await db.execute(totals)).all():
        if int(available or 0) != 0 or int(actual or 0) != 0:
            out.append(
                Violation(
                    "currency does not sum to zero",
                    f"programme {pid} {currency}: available {available}, actual {actual}",
                )
            )
    return out


async def _balances_against_postings(db: AsyncSession, programme_id: int | None) -> list[Violation]:
    """Each account's balances are the sums of its postings."""
    out: list[Violation] = []
    posted = (
        select(
            Posting.account_id,
            func.sum(Posting.available_amount).label("available"),
            func.sum(Posting.actual_amount).label("actual"),
        )
        .group_by(Posting.account_id)
        .subquery()
    )
    mismatch = (
        select(
            LedgerAccount.id,
            LedgerAccount.available,
            LedgerAccount.actual,
            posted.c.available,
            posted.c.actual,
        )
        .outerjoin(posted, posted.c.account_id == LedgerAccount.id)
        .where(
            (LedgerAccount.available != func.coalesce(posted.c.available, 0))
            | (LedgerAccount.actual != func.coalesce(posted.c.actual, 0))
        )
    )
    if programme_id is not None:
        mismatch = mismatch.where(LedgerAccount.programme_id == programme_id)
    for account_id, available, actual, p_available, p_actual in (await db.execute(mismatch)).all():
        out.append(
            Violation(
                "balance differs from its postings",
                f"account {account_id}: balance {available}/{actual}, "
                f"postings {p_available or 0}/{p_actual or 0}",
            )
        )
    return out


async def _counters_against_postings(db: AsyncSession, programme_id: int | None) -> list[Violation]:
    """Each account's counters count its postings, closings and movements."""
    out: list[Violation] = []
    # An entry (a posting closing no hold) moves money while its amounts with its closing's
    # are not zero; a closing counts among the postings and the closings.
    closing = aliased(Posting, name="closing")
    net_available = Posting.available_amount + func.coalesce(closing.available_amount, 0)
    net_actual = Posting.actual_amount + func.coalesce(closing.actual_amount, 0)
    is_entry = Posting.pending_id.is_(None)
    moved = case((is_entry & ((net_available != 0) | (net_actual != 0)), 1), else_=0)
    counted = (
        select(
            Posting.account_id,
            func.count().label("postings"),
            func.sum(case((is_entry, 0), else_=1)).label("closings"),
            func.sum(moved).label("movements"),
        )
        .outerjoin(closing, closing.pending_id == Posting.id)
        .group_by(Posting.account_id)
        .subquery()
    )
    miscounted = (
        select(LedgerAccount.id)
        .outerjoin(counted, counted.c.account_id == LedgerAccount.id)
        .where(
            (LedgerAccount.posting_count != func.coalesce(counted.c.postings, 0))
            | (LedgerAccount.closing_count != func.coalesce(counted.c.closings, 0))
            | (LedgerAccount.movement_count != func.coalesce(counted.c.movements, 0))
        )
    )
    if programme_id is not None:
        miscounted = miscounted.where(LedgerAccount.programme_id == programme_id)
    for (account_id,) in (await db.execute(miscounted)).all():
        out.append(Violation("posting counters differ from its postings", f"account {account_id}"))
    return out


async def _unbalanced_transactions(db: AsyncSession, programme_id: int | None) -> list[Violation]:
    """Each transaction sums to zero in each currency."""
    out: list[Violation] = []
    unbalanced = (
        select(Posting.transaction_id, Posting.currency)
        .join(LedgerTransaction, LedgerTransaction.id == Posting.transaction_id)
        .group_by(Posting.transaction_id, Posting.currency)
        .having((func.sum(Posting.available_amount) != 0) | (func.sum(Posting.actual_amount) != 0))
    )
    if programme_id is not None:
        unbalanced = unbalanced.where(Posting.programme_id == programme_id)
    for tx_id, currency in (await db.execute(unbalanced)).all():
        out.append(Violation("transaction does not sum to zero", f"transaction {tx_id} {currency}"))
    return out


async def _customers_below_zero(db: AsyncSession, programme_id: int | None) -> list[Violation]:
    """No customer's balance is below zero."""
    out: list[Violation] = []
    negative = select(LedgerAccount.id).where(
        LedgerAccount.kind == "MANAGED_ACCOUNT",
        (LedgerAccount.available < 0) | (LedgerAccount.actual < 0),
    )
    if programme_id is not None:
        negative = negative.where(LedgerAccount.programme_id == programme_id)
    for (account_id,) in (await db.execute(negative)).all():
        out.append(Violation("customer balance below zero", f"account {account_id}"))
    return out


CHECKS = (
    _currency_sums,
    _balances_against_postings,
    _counters_against_postings,
    _unbalanced_transactions,
    _customers_below_zero,
)


async def balances(db: AsyncSession, programme_id: int | None = None) -> list[Violation]:
    """The violations of the balances: sums per programme and currency, balances and counters
    against the postings, transactions that do not sum to zero, customer balances below zero.
    Read on one snapshot when the session's transaction was begun by `one_snapshot`."""
    out: list[Violation] = []
    for check in CHECKS:
        out += await check(db, programme_id)
    return out


async def chains(db: AsyncSession, programme_id: int | None = None) -> list[Violation]:
    """The violations of the accounts' chains of postings (`ledger.chain`)."""
    out: list[Violation] = []
    for broken in await chain.breaks(db, programme_id):
        out.append(Violation("posting chain broken", broken.describe()))
    for posting_id in await chain.stray_closings(db, programme_id):
        out.append(
            Violation(
                "closing posting names no pending posting of its account", f"posting {posting_id}"
            )
        )
    return out
