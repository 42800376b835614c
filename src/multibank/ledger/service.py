"""Double-entry postings (D5). Every movement is one transaction whose postings sum to zero per
currency; balances change only here, through guarded UPDATEs in the caller's transaction, with
the accounts locked in id order so two movements never deadlock."""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, Update, bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.kernel.ids import new_id
from multibank.ledger.models import (
    MANAGED_ACCOUNT,
    REVENUE,
    LedgerAccount,
    LedgerTransaction,
    Posting,
)
from multibank.observability import LEDGER_POSTINGS


class InsufficientFunds(Exception):
    """A guarded debit found less than it needs; the caller's transaction must roll back."""

    def __init__(self, account_id: int) -> None:
        super().__init__(account_id)
        self.account_id = account_id


class Unbalanced(ValueError):
    pass


@dataclass(frozen=True)
class Leg:
    """One side of a movement: signed amounts (credit positive) on one account."""

    account_id: int
    currency: str
    available: int
    actual: int
    # Customer accounts may not go below zero; system accounts (settlement) may.
    guarded: bool = True


# The programme's revenue in a currency is kept on this many ledger accounts, each charge going to
# the one its source account's id picks: charges of different customers then rarely wait on one
# another's row lock (issue 11, decision 0013). Revenue is their sum (`revenue_balance`).
REVENUE_SHARDS = 8


def revenue_shard(source_account_id: int) -> int:
    # Not the id's low bits: those are the sequence within a millisecond, nearly always 0.
    return zlib.crc32(str(source_account_id).encode()) % REVENUE_SHARDS


async def revenue_balance(db: AsyncSession, programme_id: int, currency: str) -> tuple[int, int]:
    """The programme's revenue in `currency` (available, actual): the sum of its shards."""
    keys = [_system_key(programme_id, REVENUE, currency, shard) for shard in range(REVENUE_SHARDS)]
    row = (
        await db.execute(
            select(
                func.coalesce(func.sum(LedgerAccount.available), 0),
                func.coalesce(func.sum(LedgerAccount.actual), 0),
            ).where(LedgerAccount.system_key.in_(keys))
        )
    ).one()
    return int(row[0]), int(row[1])


def _system_key(programme_id: int, kind: str, currency: str, shard: int) -> str:
    # Shard 0 keeps the key of the time before shards, so existing ledgers need no migration.
    base = f"{programme_id}:{kind}:{currency}"
    return base if shard == 0 else f"{base}:{shard}"


# Statements of every movement, built once with bound parameters: building them per request
# (coercing each comparison) cost a fee charge more than executing them (decision 0014).
_SYSTEM_ACCOUNT = select(LedgerAccount.id).where(LedgerAccount.system_key == bindparam("key"))


def _apply_statement(guard_available: bool, guard_actual: bool) -> Update:
    stmt = update(LedgerAccount).where(
        LedgerAccount.id == bindparam("b_id"),
        LedgerAccount.programme_id == bindparam("b_programme_id"),
        LedgerAccount.currency == bindparam("b_currency"),
    )
    if guard_available:
        stmt = stmt.where(LedgerAccount.available >= bindparam("b_need_available"))
    if guard_actual:
        stmt = stmt.where(LedgerAccount.actual >= bindparam("b_need_actual"))
    return (
        stmt.values(
            available=LedgerAccount.available + bindparam("b_available"),
            actual=LedgerAccount.actual + bindparam("b_actual"),
            posting_count=LedgerAccount.posting_count + 1,
            movement_count=LedgerAccount.movement_count + bindparam("b_movement"),
        )
        .returning(LedgerAccount.available, LedgerAccount.actual)
        .execution_options(synchronize_session=False)
    )


_APPLY = {(a, b): _apply_statement(a, b) for a in (False, True) for b in (False, True)}
# Core, not ORM: the ORM's bulk INSERT machinery cost more than the statement itself.
_INSERT_POSTINGS = insert(cast(Table, Posting.__table__))


async def system_account(
    db: AsyncSession, programme_id: int, kind: str, currency: str, now_ms: int, shard: int = 0
) -> int:
    """The programme's revenue or settlement account in `currency` (revenue: one of its
    shards), created on first use."""
    key = _system_key(programme_id, kind, currency, shard)
    found = (await db.execute(_SYSTEM_ACCOUNT, {"key": key})).scalar_one_or_none()
    if found is not None:
        return int(found)
    account = LedgerAccount(
        id=new_id(),
        programme_id=programme_id,
        kind=kind,
        currency=currency,
        system_key=key,
        available=0,
        actual=0,
        created_at=now_ms,
    )
    try:
        async with db.begin_nested():
            db.add(account)
            await db.flush()
    except IntegrityError:  # another request created it first; theirs is the one
        return int((await db.execute(_SYSTEM_ACCOUNT, {"key": key})).scalar_one())
    return account.id


async def open_account(
    db: AsyncSession, programme_id: int, currency: str, now_ms: int, account_id: int | None = None
) -> LedgerAccount:
    account = LedgerAccount(
        id=account_id or new_id(),
        programme_id=programme_id,
        kind=MANAGED_ACCOUNT,
        currency=currency,
        available=0,
        actual=0,
        created_at=now_ms,
    )
    db.add(account)
    await db.flush()
    return account


async def post(
    db: AsyncSession,
    *,
    programme_id: int,
    type_: str,
    legs: Sequence[Leg],
    now_ms: int,
    state: str = "COMPLETED",
    details: dict[str, Any] | None = None,
    external_id: int | None = None,
    transaction_id: int | None = None,
) -> LedgerTransaction:
    """Writes one transaction. Raises Unbalanced when the legs do not sum to zero per currency,
    InsufficientFunds when a guarded debit would take a balance below zero.

    `transaction_id` names the transaction after the resource it moves money for (a payment's
    statement entry has the payment's id); `details` may hold `byAccount`, each account's own
    statement `additionalFields` and fee (`account_details`)."""
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for leg in legs:
        sums[leg.currency][0] += leg.available
        sums[leg.currency][1] += leg.actual
    if any(a or b for a, b in sums.values()):
        raise Unbalanced(f"postings of {type_} do not sum to zero: {dict(sums)}")
    tx = LedgerTransaction(
        id=transaction_id or new_id(),
        programme_id=programme_id,
        type=type_,
        state=state,
        details=details or {},
        external_id=external_id,
        created_at=now_ms,
    )
    db.add(tx)
    await db.flush()
    postings = []
    for leg in sorted(legs, key=lambda leg: leg.account_id):
        available_after, actual_after = await _apply(db, programme_id, leg)
        postings.append(
            {
                "id": new_id(),
                "programme_id": programme_id,
                "transaction_id": tx.id,
                "account_id": leg.account_id,
                "currency": leg.currency,
                "available_amount": leg.available,
                "actual_amount": leg.actual,
                "available_after": available_after,
                "actual_after": actual_after,
                "created_at": now_ms,
            }
        )
        LEDGER_POSTINGS.labels(leg.currency).inc()
    # The postings in one statement, without the unit of work: nothing reads them as objects.
    await db.execute(_INSERT_POSTINGS, postings)
    return tx


async def _apply(db: AsyncSession, programme_id: int, leg: Leg) -> tuple[int, int]:
    """One guarded UPDATE: the balance changes only if it stays non-negative where guarded."""
    guard_available = leg.guarded and leg.available < 0
    guard_actual = leg.guarded and leg.actual < 0
    params = {
        "b_id": leg.account_id,
        "b_programme_id": programme_id,
        "b_currency": leg.currency,
        "b_available": leg.available,
        "b_actual": leg.actual,
        "b_movement": 1 if leg.available or leg.actual else 0,
    }
    if guard_available:
        params["b_need_available"] = -leg.available
    if guard_actual:
        params["b_need_actual"] = -leg.actual
    row = (await db.execute(_APPLY[guard_available, guard_actual], params)).one_or_none()
    if row is None:
        raise InsufficientFunds(leg.account_id)
    return int(row[0]), int(row[1])


async def balances(db: AsyncSession, account_id: int) -> tuple[int, int]:
    stmt = select(LedgerAccount.available, LedgerAccount.actual).where(
        LedgerAccount.id == account_id
    )
    row = (await db.execute(stmt)).one()
    return int(row[0]), int(row[1])


async def external_id_used(db: AsyncSession, programme_id: int, external_id: int) -> bool:
    stmt = select(LedgerTransaction.id).where(
        LedgerTransaction.programme_id == programme_id,
        LedgerTransaction.external_id == external_id,
    )
    return (await db.execute(stmt.limit(1))).first() is not None
