"""The ledger invariants of D5, checked in SQL: per programme and currency all balances sum to
zero, every account's balance equals the sum of its postings, and each account's chain of
postings adds up (`ledger.chain`, decision 0043)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import case, func, select, union_all
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from multibank.cards.authorisations import PENDING_SETTLEMENT, CardAuthorisation
from multibank.cards.money import CARD_RESERVED
from multibank.kernel.db import Database
from multibank.ledger import chain
from multibank.ledger.models import (
    MANAGED_ACCOUNT,
    RESERVED,
    LedgerAccount,
    LedgerTransaction,
    Posting,
)
from multibank.payments.models import Payment


@dataclass(frozen=True)
class Violation:
    what: str
    detail: str


async def one_snapshot(db: AsyncSession) -> None:
    """Begins the session's transaction on PostgreSQL as REPEATABLE READ: every statement of it
    then reads the database as it was at its first, as the checks of `verify` must (each
    compares what two statements read). Under READ COMMITTED each statement read a later moment,
    and a verify run while money moved reported differences that were never there. (SQLite's
    transactions read one snapshot already.) Call it before the transaction's first statement;
    after that it changes nothing."""
    if not db.in_transaction() and db.get_bind().dialect.name == "postgresql":
        await db.connection(execution_options={"isolation_level": "REPEATABLE READ"})


async def verify_alone(database: Database, programme_id: int) -> list[Violation]:
    """`verify` on a read session of its own, begun by it: one snapshot on PostgreSQL. (A
    request's session has read the programme already, at READ COMMITTED.)"""
    async with database.read_sessionmaker() as session:
        return await verify(session, programme_id)


async def verify(db: AsyncSession, programme_id: int | None = None) -> list[Violation]:
    """The violations of the invariants, read on one snapshot (`one_snapshot`) when the session
    has not begun its transaction yet."""
    await one_snapshot(db)
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
    negative = select(LedgerAccount.id).where(
        LedgerAccount.kind == "MANAGED_ACCOUNT",
        (LedgerAccount.available < 0) | (LedgerAccount.actual < 0),
    )
    if programme_id is not None:
        negative = negative.where(LedgerAccount.programme_id == programme_id)
    for (account_id,) in (await db.execute(negative)).all():
        out.append(Violation("customer balance below zero", f"account {account_id}"))
    out.extend(await _reservations(db, programme_id))
    for broken in await chain.breaks(db, programme_id):
        out.append(Violation("posting chain broken", broken.describe()))
    for posting_id in await chain.stray_closings(db, programme_id):
        out.append(
            Violation(
                "closing posting names no pending posting of its account", f"posting {posting_id}"
            )
        )
    return out


async def _reservations(db: AsyncSession, programme_id: int | None) -> list[Violation]:
    """What is held equals the holds of the payments still waiting: per programme and currency
    on the RESERVED accounts, and per paying account as actual minus available."""
    out: list[Violation] = []
    held = (
        select(
            LedgerAccount.programme_id,
            LedgerAccount.currency,
            func.sum(LedgerAccount.available).label("held"),
        )
        .where(LedgerAccount.kind == RESERVED)
        .group_by(LedgerAccount.programme_id, LedgerAccount.currency)
    )
    open_ = (
        select(Payment.programme_id, Payment.currency, func.sum(Payment.reserved))
        .where(Payment.reserved != 0)
        .group_by(Payment.programme_id, Payment.currency)
    )
    if programme_id is not None:
        held = held.where(LedgerAccount.programme_id == programme_id)
        open_ = open_.where(Payment.programme_id == programme_id)
    on_accounts = {(int(p), c): int(v or 0) for p, c, v in (await db.execute(held)).all()}
    by_payments = {(int(p), c): int(v or 0) for p, c, v in (await db.execute(open_)).all()}
    for key in sorted(set(on_accounts) | set(by_payments)):
        if on_accounts.get(key, 0) != by_payments.get(key, 0):
            out.append(
                Violation(
                    "reserved amounts differ from the open reservations",
                    f"programme {key[0]} {key[1]}: reserved {on_accounts.get(key, 0)}, "
                    f"payments waiting {by_payments.get(key, 0)}",
                )
            )
    # A paying account's held money: its waiting payments' reservations and its card holds.
    payment_holds = select(
        Payment.source_id.label("account_id"), Payment.reserved.label("held")
    ).where(Payment.reserved != 0)
    card_holds = select(
        CardAuthorisation.account_id.label("account_id"),
        CardAuthorisation.open_amount.label("held"),
    ).where(CardAuthorisation.state == PENDING_SETTLEMENT)
    holds = union_all(payment_holds, card_holds).subquery()
    per_source = (
        select(holds.c.account_id.label("source_id"), func.sum(holds.c.held).label("held"))
        .group_by(holds.c.account_id)
        .subquery()
    )
    differing = (
        select(LedgerAccount.id, LedgerAccount.actual - LedgerAccount.available, per_source.c.held)
        .outerjoin(per_source, per_source.c.source_id == LedgerAccount.id)
        .where(
            LedgerAccount.kind == MANAGED_ACCOUNT,
            LedgerAccount.actual - LedgerAccount.available != func.coalesce(per_source.c.held, 0),
        )
    )
    if programme_id is not None:
        differing = differing.where(LedgerAccount.programme_id == programme_id)
    for account_id, gap, payments in (await db.execute(differing)).all():
        out.append(
            Violation(
                "held amount differs from the account's open reservations",
                f"account {account_id}: actual - available {gap}, reserved {payments or 0}",
            )
        )
    out.extend(await _card_holds(db, programme_id))
    return out


async def _card_holds(db: AsyncSession, programme_id: int | None) -> list[Violation]:
    """Each card reserved book (decision 0045) holds exactly the open amounts of its open
    authorisations, and nothing of its actual balance; an authorisation holds something while,
    and only while, it is open."""
    out: list[Violation] = []
    per_book = (
        select(
            CardAuthorisation.reserved_account_id.label("book"),
            func.sum(CardAuthorisation.open_amount).label("held"),
        )
        .where(CardAuthorisation.state == PENDING_SETTLEMENT)
        .group_by(CardAuthorisation.reserved_account_id)
        .subquery()
    )
    books = (
        select(LedgerAccount.id, LedgerAccount.available, LedgerAccount.actual, per_book.c.held)
        .outerjoin(per_book, per_book.c.book == LedgerAccount.id)
        .where(
            LedgerAccount.kind == CARD_RESERVED,
            (LedgerAccount.available != func.coalesce(per_book.c.held, 0))
            | (LedgerAccount.actual != 0),
        )
    )
    if programme_id is not None:
        books = books.where(LedgerAccount.programme_id == programme_id)
    for book_id, available, actual, held in (await db.execute(books)).all():
        out.append(
            Violation(
                "card reserved book differs from its open authorisations",
                f"account {book_id}: balance {available}/{actual}, open holds {held or 0}",
            )
        )
    wrong = select(CardAuthorisation.id).where(
        (CardAuthorisation.open_amount < 0)
        | (CardAuthorisation.open_amount > CardAuthorisation.held_amount)
        | ((CardAuthorisation.state == PENDING_SETTLEMENT) & (CardAuthorisation.open_amount <= 0))
        | ((CardAuthorisation.state != PENDING_SETTLEMENT) & (CardAuthorisation.open_amount != 0))
    )
    if programme_id is not None:
        wrong = wrong.where(CardAuthorisation.programme_id == programme_id)
    for (authorisation_id,) in (await db.execute(wrong)).all():
        out.append(
            Violation(
                "card authorisation's open amount disagrees with its state",
                f"authorisation {authorisation_id}",
            )
        )
    return out
