"""What the ledger holds against what the slices above it say is held: `ledger verify` (the CLI
command, the portal's ledger page and its API), the ledger's own invariants (`ledger.verify`)
and the holds, in one snapshot.

The holds are checked here, above the ledger, payments and cards (issue 42 §1): what is held on
the RESERVED accounts equals the reservations of the payments still waiting; a paying account's
actual minus available equals its waiting payments' reservations and its open card holds; each
card reserved book (decision 0045) holds exactly its open authorisations. One module beside
`app.py`, not a package, while it is one module's worth."""

from __future__ import annotations

from sqlalchemy import func, select, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.cards.authorisations import PENDING_SETTLEMENT, CardAuthorisation
from multibank.cards.money import CARD_RESERVED
from multibank.kernel.db import Database
from multibank.ledger import verify as ledger
from multibank.ledger.models import MANAGED_ACCOUNT, RESERVED, LedgerAccount
from multibank.ledger.verify import Violation, one_snapshot
from multibank.payments.models import Payment

__all__ = ["Violation", "one_snapshot", "verify", "verify_alone"]


async def verify_alone(database: Database, programme_id: int) -> list[Violation]:
    """`verify` on a read session of its own, begun by it: one snapshot on PostgreSQL. (A
    request's session has read the programme already, at READ COMMITTED.)"""
    async with database.read_sessionmaker() as session:
        return await verify(session, programme_id)


async def verify(db: AsyncSession, programme_id: int | None = None) -> list[Violation]:
    """The violations of the invariants, read on one snapshot (`one_snapshot`) when the session
    has not begun its transaction yet: the balances, the holds, then the chains."""
    await one_snapshot(db)
    out = await ledger.balances(db, programme_id)
    out.extend(await _reservations(db, programme_id))
    out.extend(await ledger.chains(db, programme_id))
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
