"""Where card money is kept on the ledger (D23, decision 0045) and what a step writes beside its
movement: the spending account (a prepaid card's own, a debit card's parent), its reserved book
(the counterpart of its holds), the programme's scheme and revenue shards; the locks a step
takes on them, in id order (one statement for a purchase, decision 0060); the movement's
details, its `card_movements` row, and the balances its event carries."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, or_, select, true, update

from multibank.cards.models import CardMovement, ManagedCard
from multibank.cards.money.checks import (
    INTERVALS,
    SPENT,
    available_to_spend,
    spent_of,
    spent_params,
)
from multibank.cards.money.terms import CARD_RESERVED, CARD_SCHEME, DEBIT
from multibank.ledger import service as ledger
from multibank.ledger.models import REVENUE, LedgerAccount, LedgerTransaction
from multibank.programmes.context import Ctx


def spending_account(card: ManagedCard) -> int:
    """The ledger account whose money the card spends (D23)."""
    if card.mode == DEBIT:
        assert card.parent_account_id is not None
        return card.parent_account_id
    return card.id


# The ledger accounts of card money beside the spending account


def reserved_key(ctx: Ctx, account_id: int) -> str:
    return f"{ctx.programme.id}:{CARD_RESERVED}:{account_id}"


async def reserved_book(ctx: Ctx, account_id: int, currency: str) -> int:
    """The spending account's reserved book: the counterpart of its card holds. One per
    spending account, so under a key of its own, not one of `ledger.system_account`'s (one per
    programme, kind and currency)."""
    key = reserved_key(ctx, account_id)
    return await ledger.keyed_account(
        ctx.db, ctx.programme.id, CARD_RESERVED, currency, key, ctx.now
    )


async def scheme_account(ctx: Ctx, account_id: int, currency: str) -> int:
    """The programme's card scheme settlement account in `currency` (D23): one of its shards,
    picked by the spending account as revenue's is, so purchases of different accounts do not
    wait on one row's lock. The scheme's balance is the sum of its shards (shard 0 keeps the
    unsharded account's key)."""
    return await ledger.system_account(
        ctx.db,
        ctx.programme.id,
        CARD_SCHEME,
        currency,
        ctx.now,
        shard=ledger.revenue_shard(account_id),
    )


async def revenue_account(ctx: Ctx, account_id: int, currency: str) -> int:
    return await ledger.system_account(
        ctx.db,
        ctx.programme.id,
        REVENUE,
        currency,
        ctx.now,
        shard=ledger.revenue_shard(account_id),
    )


async def lock_accounts(ctx: Ctx, ids: list[int]) -> None:
    """Row locks on the ledger accounts, in id order (the order `ledger.post` takes them in),
    so the balance read next is the one the movement will change."""
    for account_id in sorted(set(ids)):
        stmt = select(LedgerAccount.id).where(LedgerAccount.id == account_id).with_for_update()
        await ctx.db.execute(stmt)


# The accounts of a purchase locked in one statement: the rows come locked in id order (the
# locking step takes them from the sort), the order every movement takes them in, and the
# reserved book is found by its key in the same statement. The three ids (spending account,
# scheme and revenue shards) are three parameters, not an expanding list, which SQLAlchemy
# renders again at every execution.
_PURCHASE_ACCOUNTS = or_(
    LedgerAccount.id.in_([bindparam("id_0"), bindparam("id_1"), bindparam("id_2")]),
    LedgerAccount.system_key == bindparam("book_key"),
)
_LOCK_PURCHASE = (
    select(LedgerAccount.id, LedgerAccount.available, LedgerAccount.system_key)
    .where(_PURCHASE_ACCOUNTS)
    .order_by(LedgerAccount.id)
    .with_for_update()
)


# The same, with a debit card's spend in each window read in the statement (decision 0060): the
# card's row is locked already (the simulator's `card_and_rules`), so every earlier step of the
# card has committed and this statement's snapshot holds it. Only the accounts' rows are locked.
_SPENT_NOW = SPENT.subquery("spent")
_LOCK_PURCHASE_SPENT = (
    select(
        LedgerAccount.id,
        LedgerAccount.available,
        LedgerAccount.system_key,
        *(_SPENT_NOW.c[f"spent_{i}"] for i in range(len(INTERVALS))),
    )
    .join(_SPENT_NOW, true())
    .where(_PURCHASE_ACCOUNTS)
    .order_by(LedgerAccount.id)
    .with_for_update(of=LedgerAccount)
)


async def lock_purchase(
    ctx: Ctx, card: ManagedCard, account_id: int, scheme: int, revenue: int
) -> tuple[int, int, dict[str, int] | None]:
    """Locks the spending account, its reserved book, the scheme and revenue accounts in id
    order; returns the book's id, the spending account's available balance as the lock found it
    and a debit card's spend in each window (`spent`; None for a prepaid card)."""
    key = reserved_key(ctx, account_id)
    params: dict[str, Any] = {
        "id_0": account_id,
        "id_1": scheme,
        "id_2": revenue,
        "book_key": key,
    }
    statement = _LOCK_PURCHASE
    if card.mode == DEBIT:
        params.update(spent_params(ctx, card))
        statement = _LOCK_PURCHASE_SPENT
    rows = (await ctx.db.execute(statement, params)).all()
    if not any(row.system_key == key for row in rows):
        # The account's first card hold: its book is created (by this transaction or a
        # concurrent one), then everything is locked again in id order.
        await reserved_book(ctx, account_id, card.currency)
        rows = (await ctx.db.execute(statement, params)).all()
    book = next(int(row.id) for row in rows if row.system_key == key)
    available = next(int(row.available) for row in rows if row.id == account_id)
    used = spent_of(rows[0][3:]) if card.mode == DEBIT else None
    return book, available, used


async def available_of(ctx: Ctx, account_id: int) -> int:
    stmt = select(LedgerAccount.available).where(LedgerAccount.id == account_id)
    return int((await ctx.db.execute(stmt.execution_options(populate_existing=True))).scalar_one())


async def record_movement(ctx: Ctx, card: ManagedCard, transaction_id: int, kind: str) -> None:
    ctx.db.add(
        CardMovement(
            transaction_id=transaction_id,
            programme_id=ctx.programme.id,
            card_id=card.id,
            account_id=spending_account(card),
            kind=kind,
            created_at=ctx.now,
        )
    )
    await ctx.db.flush()


async def set_state(ctx: Ctx, transaction_id: int, state: str) -> None:
    await ctx.db.execute(
        update(LedgerTransaction).where(LedgerTransaction.id == transaction_id).values(state=state)
    )


def ledger_details(
    card: ManagedCard, merchant: dict[str, Any], code: str, amount: int, fee: int
) -> dict[str, Any]:
    """The ledger transaction's details (the shared contract): merchant fields, the signed
    transaction amount from the cardholder's side, the fee this step charged."""
    return {
        "cardId": str(card.id),
        "merchantName": merchant["merchantName"],
        "merchantCategoryCode": merchant["merchantCategoryCode"],
        "merchantId": merchant["merchantId"],
        "merchantTerminalCountry": merchant["merchantTerminalCountry"],
        "merchantTransactionType": merchant["merchantTransactionType"],
        "authorisationCode": code,
        "transactionAmount": {"currency": card.currency, "amount": amount},
        "cardholderFee": fee,
    }


async def balances_for_event(
    ctx: Ctx, card: ManagedCard
) -> tuple[int | None, list[dict[str, Any]] | None]:
    """What an event says the card can still use: a prepaid card's available balance, or a
    debit card's availableToSpend."""
    if card.mode == DEBIT:
        return None, await available_to_spend(ctx, card)
    return await available_of(ctx, card.id), None
