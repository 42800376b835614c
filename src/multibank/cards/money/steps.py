"""The card steps, each one ledger transaction (D22, D23): a declined attempt (an event only),
an authorisation (the hold), its settlement, reversal or expiry (each closes what it takes of
the hold once: the caller locks the authorisation's row, `locked_authorisation`, and its state
is checked), a refund, and the expiry of a due hold on the programme clock (D24, taken by the
card worker, `cards.money_steps`). Flushes, never commits."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from multibank.cards import events
from multibank.cards.authorisations import (
    COMPLETED,
    EXPIRED,
    PENDING_SETTLEMENT,
    REVERSED,
    CardAuthorisation,
)
from multibank.cards.models import ManagedCard
from multibank.cards.money.books import (
    available_of,
    balances_for_event,
    ledger_details,
    lock_accounts,
    record_movement,
    reserved_book,
    revenue_account,
    scheme_account,
    set_state,
    spending_account,
)
from multibank.cards.money.checks import checked
from multibank.cards.money.terms import (
    APPROVED,
    AUTHORISATION,
    AUTHORISATION_EXPIRY,
    AUTHORISATION_REVERSAL,
    AUTHORISATION_TTL_MS,
    CASH_WITHDRAWAL,
    CODE_COMPLETED,
    DENIED_AMOUNT_NOT_POSITIVE,
    DENIED_AUTHORISATION_NOT_FOUND,
    DENIED_AUTHORISATION_NOT_PENDING,
    DENIED_NOT_ENOUGH_FUNDS,
    DENIED_OTHER,
    MAX_AMOUNT,
    MERCHANT_REFUND,
    NOT_ENOUGH_FUNDS,
    PURCHASE_REFUND,
    SALE_PURCHASE,
    SETTLEMENT,
    Attempt,
    Decline,
    Outcome,
    auth_code,
)
from multibank.kernel.ids import new_id
from multibank.ledger import service as ledger
from multibank.programmes.card_fees import ATM_WITHDRAWAL, PURCHASE, REFUND, card_fee
from multibank.programmes.context import Ctx


async def decline(ctx: Ctx, card: ManagedCard, attempt: Attempt, refused: Decline) -> Outcome:
    """A refused authorisation moves nothing; only its webhook event is written (D23, D27)."""
    balance, to_spend = await balances_for_event(ctx, card)
    await events.authorisation(
        ctx,
        card,
        transaction_id=new_id(),
        authorisation_type="DECLINED",
        amount=-attempt.amount,
        merchant=attempt.merchant(),
        approved=False,
        decline_reason=refused.reason,
        rule_failed=refused.rule,
        auth_code=auth_code(),
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=None,
        currency=attempt.currency,
    )
    return Outcome(refused.code)


async def authorise(
    ctx: Ctx, card: ManagedCard, attempt: Attempt, refused: Decline | None = None
) -> tuple[Outcome, CardAuthorisation | None]:
    """Checks D22's table in order (the caller has done #1 and #2, passing #2's failure as
    `refused`, and holds the card's row lock); an approved authorisation holds the amount."""
    attempt, merchant, refused, _ = await checked(ctx, card, attempt, refused)
    if refused is not None:
        return await decline(ctx, card, attempt, refused), None
    account_id = spending_account(card)
    book = await reserved_book(ctx, account_id, card.currency)
    auth_id, code = new_id(), auth_code()
    details = ledger_details(card, merchant, code, -attempt.amount, 0)
    details["authorisationId"] = str(auth_id)
    details["forexPaddingCurrency"] = card.currency
    details["forexPaddingAmount"] = "0"
    try:
        # The funds check is the guarded update (D22 #13); in a savepoint, so a refused guard
        # leaves nothing of the movement behind.
        async with ctx.db.begin_nested():
            await ledger.post(
                ctx.db,
                programme_id=ctx.programme.id,
                type_=AUTHORISATION,
                legs=[
                    ledger.Leg(account_id, card.currency, -attempt.amount, 0),
                    ledger.Leg(book, card.currency, attempt.amount, 0, guarded=False),
                ],
                now_ms=ctx.now,
                state="PENDING",
                details=details,
                transaction_id=auth_id,
            )
    except ledger.InsufficientFunds:
        return await decline(ctx, card, attempt, NOT_ENOUGH_FUNDS), None
    auth = CardAuthorisation(
        id=auth_id,
        programme_id=ctx.programme.id,
        card_id=card.id,
        account_id=account_id,
        reserved_account_id=book,
        currency=card.currency,
        held_amount=attempt.amount,
        open_amount=attempt.amount,
        settled_amount=0,
        fee_amount=0,
        refunded_amount=0,
        state=PENDING_SETTLEMENT,
        auth_code=code,
        merchant=merchant,
        settlement_id=None,
        expires_at=ctx.now + AUTHORISATION_TTL_MS,
        created_at=ctx.now,
    )
    ctx.db.add(auth)
    await record_movement(ctx, card, auth_id, AUTHORISATION)
    balance, to_spend = await balances_for_event(ctx, card)
    await events.authorisation(
        ctx,
        card,
        transaction_id=auth_id,
        authorisation_type="AUTHORISED",
        amount=-attempt.amount,
        merchant=merchant,
        approved=True,
        decline_reason="NO_REASON",
        rule_failed="NONE",
        auth_code=code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=None,
    )
    return Outcome(APPROVED, authorisation_id=auth_id), auth


async def locked_authorisation(
    ctx: Ctx, card: ManagedCard, authorisation_id: int
) -> CardAuthorisation | None:
    """The card's authorisation, its row locked: a step on it happens once (D23)."""
    stmt = (
        select(CardAuthorisation)
        .where(
            CardAuthorisation.id == authorisation_id,
            CardAuthorisation.card_id == card.id,
            CardAuthorisation.programme_id == ctx.programme.id,
        )
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return (await ctx.db.execute(stmt)).scalar_one_or_none()


def fee_kind(merchant: dict[str, Any]) -> str:
    """The card fee a settlement charges (D19): an ATM withdrawal's or a purchase's."""
    return (
        ATM_WITHDRAWAL if merchant.get("merchantTransactionType") == CASH_WITHDRAWAL else PURCHASE
    )


async def settle(
    ctx: Ctx, card: ManagedCard, auth: CardAuthorisation | None, amount: int | None = None
) -> Outcome:
    """Settles `amount` (default: what is still held) and closes the hold: less than held
    releases the rest, more takes only what the available balance covers (D23). The fee is
    charged here, never below a zero balance."""
    if auth is None:
        return Outcome(DENIED_AUTHORISATION_NOT_FOUND)
    if auth.state != PENDING_SETTLEMENT:
        return Outcome(DENIED_AUTHORISATION_NOT_PENDING, authorisation_id=auth.id)
    settled = auth.open_amount if amount is None else amount
    if settled <= 0:
        return Outcome(DENIED_AMOUNT_NOT_POSITIVE, authorisation_id=auth.id)
    held = auth.open_amount
    scheme = await scheme_account(ctx, auth.account_id, auth.currency)
    revenue = await revenue_account(ctx, auth.account_id, auth.currency)
    await lock_accounts(ctx, [auth.account_id, auth.reserved_account_id, scheme, revenue])
    left = await available_of(ctx, auth.account_id) + held - settled
    if left < 0:
        return Outcome(DENIED_NOT_ENOUGH_FUNDS, authorisation_id=auth.id)
    fee = max(0, min(card_fee(ctx.programme, fee_kind(auth.merchant), auth.currency), left))
    settlement_id = new_id()
    details = ledger_details(card, auth.merchant, auth.auth_code, -settled, fee)
    details["authorisationId"] = str(auth.id)
    details["authorisationRelatedId"] = str(auth.id)
    legs = [
        ledger.Leg(auth.reserved_account_id, auth.currency, -held, 0, guarded=False),
        ledger.Leg(auth.account_id, auth.currency, held - settled - fee, -(settled + fee)),
        ledger.Leg(scheme, auth.currency, settled, settled, guarded=False),
    ]
    if fee:
        legs.append(ledger.Leg(revenue, auth.currency, fee, fee, guarded=False))
    await ledger.post(
        ctx.db,
        programme_id=ctx.programme.id,
        type_=SETTLEMENT,
        legs=legs,
        now_ms=ctx.now,
        details=details,
        transaction_id=settlement_id,
    )
    auth.open_amount = 0
    auth.settled_amount = settled
    auth.fee_amount += fee
    auth.state = COMPLETED
    auth.settlement_id = settlement_id
    await set_state(ctx, auth.id, COMPLETED)
    await record_movement(ctx, card, settlement_id, SETTLEMENT)
    balance, to_spend = await balances_for_event(ctx, card)
    await events.settlement(
        ctx,
        card,
        transaction_id=settlement_id,
        settlement_type=auth.merchant.get("merchantTransactionType", SALE_PURCHASE),
        amount=-settled,
        fee=fee,
        merchant=auth.merchant,
        auth_code=auth.auth_code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=auth.id,
        related_settlement_id=None,
    )
    return Outcome(CODE_COMPLETED, authorisation_id=auth.id, settlement_id=settlement_id)


async def _release(
    ctx: Ctx,
    card: ManagedCard,
    auth: CardAuthorisation,
    amount: int,
    type_: str,
    end_state: str,
) -> int:
    """Gives `amount` of the hold back to the spending account; the authorisation ends in
    `end_state` once nothing is held."""
    step_id = new_id()
    details = ledger_details(card, auth.merchant, auth.auth_code, amount, 0)
    details["authorisationId"] = str(auth.id)
    details["authorisationRelatedId"] = str(auth.id)
    await ledger.post(
        ctx.db,
        programme_id=ctx.programme.id,
        type_=type_,
        legs=[
            ledger.Leg(auth.reserved_account_id, auth.currency, -amount, 0, guarded=False),
            ledger.Leg(auth.account_id, auth.currency, amount, 0),
        ],
        now_ms=ctx.now,
        details=details,
        transaction_id=step_id,
    )
    auth.open_amount -= amount
    if auth.open_amount == 0:
        auth.state = end_state
        await set_state(ctx, auth.id, end_state)
    await record_movement(ctx, card, step_id, type_)
    balance, to_spend = await balances_for_event(ctx, card)
    await events.authorisation(
        ctx,
        card,
        transaction_id=step_id,
        authorisation_type="ONLINE_REVERSE" if type_ == AUTHORISATION_REVERSAL else "EXPIRED",
        amount=amount,
        merchant=auth.merchant,
        approved=True,
        decline_reason="NO_REASON",
        rule_failed="NONE",
        auth_code=auth.auth_code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=auth.id,
    )
    return step_id


async def reverse(
    ctx: Ctx, card: ManagedCard, auth: CardAuthorisation | None, amount: int | None = None
) -> Outcome:
    """Gives back `amount` of the hold (default and at most: all that is still held)."""
    if auth is None:
        return Outcome(DENIED_AUTHORISATION_NOT_FOUND)
    if auth.state != PENDING_SETTLEMENT:
        return Outcome(DENIED_AUTHORISATION_NOT_PENDING, authorisation_id=auth.id)
    if amount is not None and amount <= 0:
        return Outcome(DENIED_AMOUNT_NOT_POSITIVE, authorisation_id=auth.id)
    back = auth.open_amount if amount is None else min(amount, auth.open_amount)
    step_id = await _release(ctx, card, auth, back, AUTHORISATION_REVERSAL, REVERSED)
    return Outcome(CODE_COMPLETED, authorisation_id=auth.id, reversal_id=step_id)


async def expire(ctx: Ctx, card: ManagedCard, auth: CardAuthorisation | None) -> Outcome:
    """Releases what the authorisation still holds as an expiry (D24)."""
    if auth is None:
        return Outcome(DENIED_AUTHORISATION_NOT_FOUND)
    if auth.state != PENDING_SETTLEMENT:
        return Outcome(DENIED_AUTHORISATION_NOT_PENDING, authorisation_id=auth.id)
    await _release(ctx, card, auth, auth.open_amount, AUTHORISATION_EXPIRY, EXPIRED)
    return Outcome(CODE_COMPLETED, authorisation_id=auth.id)


async def settled_authorisation(
    ctx: Ctx, card: ManagedCard, settlement_id: int
) -> CardAuthorisation | None:
    """The card's authorisation that `settlement_id` settled, its row locked."""
    stmt = (
        select(CardAuthorisation)
        .where(
            CardAuthorisation.card_id == card.id,
            CardAuthorisation.programme_id == ctx.programme.id,
            CardAuthorisation.settlement_id == settlement_id,
        )
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return (await ctx.db.execute(stmt)).scalar_one_or_none()


async def refund(
    ctx: Ctx,
    card: ManagedCard,
    attempt: Attempt,
    related: CardAuthorisation | None = None,
    related_settlement_id: int | None = None,
) -> Outcome:
    """The merchant gives money back: at most what the related settlement settled less its
    earlier refunds; without one it is a merchant credit with no cap. The refund fee is charged
    from it, never below a zero balance (D23)."""
    if attempt.amount <= 0:
        return Outcome(DENIED_AMOUNT_NOT_POSITIVE)
    if attempt.currency != card.currency or attempt.amount > MAX_AMOUNT:
        return Outcome(DENIED_OTHER)
    if related is not None and attempt.amount > related.settled_amount - related.refunded_amount:
        return Outcome(DENIED_NOT_ENOUGH_FUNDS, authorisation_id=related.id)
    account_id = spending_account(card)
    scheme = await scheme_account(ctx, account_id, card.currency)
    revenue = await revenue_account(ctx, account_id, card.currency)
    await lock_accounts(ctx, [account_id, scheme, revenue])
    left = await available_of(ctx, account_id) + attempt.amount
    fee = max(0, min(card_fee(ctx.programme, REFUND, card.currency), left))
    merchant = dict(related.merchant) if related is not None else attempt.merchant()
    merchant["merchantTransactionType"] = PURCHASE_REFUND
    code = related.auth_code if related is not None else auth_code()
    refund_id = new_id()
    details = ledger_details(card, merchant, code, attempt.amount, fee)
    if related is not None:
        details["authorisationId"] = str(related.id)
        details["settlementRelatedId"] = str(related_settlement_id)
    credit = attempt.amount - fee
    legs = [
        ledger.Leg(scheme, card.currency, -attempt.amount, -attempt.amount, guarded=False),
        ledger.Leg(account_id, card.currency, credit, credit),
    ]
    if fee:
        legs.append(ledger.Leg(revenue, card.currency, fee, fee, guarded=False))
    await ledger.post(
        ctx.db,
        programme_id=ctx.programme.id,
        type_=MERCHANT_REFUND,
        legs=legs,
        now_ms=ctx.now,
        details=details,
        transaction_id=refund_id,
    )
    if related is not None:
        related.refunded_amount += attempt.amount
        related.fee_amount += fee
    await record_movement(ctx, card, refund_id, MERCHANT_REFUND)
    balance, to_spend = await balances_for_event(ctx, card)
    await events.settlement(
        ctx,
        card,
        transaction_id=refund_id,
        settlement_type=PURCHASE_REFUND,
        amount=attempt.amount,
        fee=fee,
        merchant=merchant,
        auth_code=code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=None if related is None else related.id,
        related_settlement_id=related_settlement_id,
    )
    return Outcome(
        CODE_COMPLETED,
        authorisation_id=None if related is None else related.id,
        refund_id=refund_id,
    )


# Expiry of open holds on the programme clock (D24), taken by `cards.money_steps`.


async def expire_due(ctx: Ctx, authorisation_id: int) -> bool:
    """Expires the authorisation if it is still open and due; False when another transaction
    holds it (skipped, not waited for) or it moved on."""
    stmt = (
        select(CardAuthorisation)
        .where(
            CardAuthorisation.id == authorisation_id,
            CardAuthorisation.state == PENDING_SETTLEMENT,
        )
        .with_for_update(skip_locked=True)
        .execution_options(populate_existing=True)
    )
    auth = (await ctx.db.execute(stmt)).scalar_one_or_none()
    if auth is None or auth.expires_at > ctx.now:
        return False
    card = await ctx.db.get(ManagedCard, auth.card_id)
    if card is None:
        return False
    await expire(ctx, card, auth)
    return True
