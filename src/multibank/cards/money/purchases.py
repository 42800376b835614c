"""The simulator's purchase (D23, D26): an authorisation and its full settlement in one database
transaction, recorded exactly as `steps.authorise` then `steps.settle` record them
(`tests/cards/test_purchase.py` compares the two), in fewer statements (decision 0060); and the
merchant refund, a purchase refunded in full."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table

from multibank.cards import events
from multibank.cards.authorisations import COMPLETED, CardAuthorisation
from multibank.cards.fees import ATM_WITHDRAWAL, PURCHASE, card_fee
from multibank.cards.models import CardMovement, ManagedCard
from multibank.cards.money.books import (
    ledger_details,
    lock_purchase,
    revenue_account,
    scheme_account,
    spending_account,
)
from multibank.cards.money.checks import checked, over_limit, to_spend_after
from multibank.cards.money.steps import decline, locked_authorisation, refund
from multibank.cards.money.terms import (
    APPROVED,
    AUTHORISATION,
    AUTHORISATION_TTL_MS,
    CASH_WITHDRAWAL,
    NOT_ENOUGH_FUNDS,
    SETTLEMENT,
    Attempt,
    Decline,
    Outcome,
    auth_code,
)
from multibank.kernel.ids import new_id
from multibank.ledger import service as ledger
from multibank.programmes.context import Ctx

_AUTHORISATIONS = cast(Table, CardAuthorisation.__table__)
_MOVEMENTS = cast(Table, CardMovement.__table__)


async def purchase(
    ctx: Ctx,
    card: ManagedCard,
    attempt: Attempt,
    refused: Decline | None = None,
    profile_rules: dict[str, Any] | None = None,
) -> Outcome:
    """The simulator's purchase: an authorisation and its full settlement, in one database
    transaction (D23), recorded exactly as `authorise` then `settle` record them, in fewer
    statements: the spend windows are read once and the balances the events carry derived; the
    accounts are locked up front (in id order, in one statement), so the funds check reads the
    locked balance and no guard can refuse afterwards (no savepoint); the authorisation is
    written as settled, its ledger transaction as COMPLETED."""
    attempt, merchant, refused, _ = await checked(
        ctx, card, attempt, refused, profile_rules, limits=False
    )
    if refused is not None:
        return await decline(ctx, card, attempt, refused)
    account_id, currency, amount = spending_account(card), card.currency, attempt.amount
    scheme = await scheme_account(ctx, account_id, currency)
    revenue = await revenue_account(ctx, account_id, currency)
    book, available, used = await lock_purchase(ctx, card, account_id, scheme, revenue)
    refused = None if used is None else over_limit(card, used, amount)  # D22 #12
    if refused is None and available < amount:  # the guarded update's check (D22 #13)
        refused = NOT_ENOUGH_FUNDS
    if refused is not None:
        return await decline(ctx, card, attempt, refused)
    kind = ATM_WITHDRAWAL if merchant["merchantTransactionType"] == CASH_WITHDRAWAL else PURCHASE
    fee = max(0, min(card_fee(ctx.programme, kind, currency), available - amount))
    auth_id, settlement_id, code = new_id(), new_id(), auth_code()
    details = ledger_details(card, merchant, code, -amount, 0)
    details["authorisationId"] = str(auth_id)
    details["forexPaddingCurrency"] = currency
    details["forexPaddingAmount"] = "0"
    # The guards below cannot refuse while the rows are locked: an InsufficientFunds here would
    # be a bug, and rolls the whole request back.
    authorisation = ledger.NewMovement(
        AUTHORISATION,
        [
            ledger.Leg(account_id, currency, -amount, 0),
            ledger.Leg(book, currency, amount, 0, guarded=False),
        ],
        auth_id,
        state=COMPLETED,  # settled below, in this transaction
        details=details,
    )
    settlement_details = ledger_details(card, merchant, code, -amount, fee)
    settlement_details["authorisationId"] = str(auth_id)
    settlement_details["authorisationRelatedId"] = str(auth_id)
    legs = [
        ledger.Leg(book, currency, -amount, 0, guarded=False),
        ledger.Leg(account_id, currency, -fee, -(amount + fee)),
        ledger.Leg(scheme, currency, amount, amount, guarded=False),
    ]
    if fee:
        legs.append(ledger.Leg(revenue, currency, fee, fee, guarded=False))
    # Both movements, the authorisation's row (written settled) and both steps' card movements
    # in one statement on PostgreSQL (decision 0060): nothing in this request reads them back.
    authorisation_row = {
        "id": auth_id,
        "programme_id": ctx.programme.id,
        "card_id": card.id,
        "account_id": account_id,
        "reserved_account_id": book,
        "currency": currency,
        "held_amount": amount,
        "open_amount": 0,
        "settled_amount": amount,
        "fee_amount": fee,
        "refunded_amount": 0,
        "state": COMPLETED,
        "auth_code": code,
        "merchant": merchant,
        "settlement_id": settlement_id,
        "expires_at": ctx.now + AUTHORISATION_TTL_MS,
        "created_at": ctx.now,
    }
    movement_rows = [
        {
            "transaction_id": step_id,
            "programme_id": ctx.programme.id,
            "card_id": card.id,
            "account_id": account_id,
            "kind": step,
            "created_at": ctx.now,
        }
        for step_id, step in ((auth_id, AUTHORISATION), (settlement_id, SETTLEMENT))
    ]
    await ledger.post_all(
        ctx.db,
        programme_id=ctx.programme.id,
        movements=[
            authorisation,
            ledger.NewMovement(SETTLEMENT, legs, settlement_id, details=settlement_details),
        ],
        now_ms=ctx.now,
        rows=[(_AUTHORISATIONS, [authorisation_row]), (_MOVEMENTS, movement_rows)],
    )

    def after(spent_since: int) -> tuple[int | None, list[dict[str, Any]] | None]:
        # What `balances_for_event` would read once `spent_since` has left the account.
        if used is not None:
            return None, to_spend_after(card, used, spent_since)
        return available - spent_since, None

    balance, to_spend = after(amount)
    await events.authorisation(
        ctx,
        card,
        transaction_id=auth_id,
        authorisation_type="AUTHORISED",
        amount=-amount,
        merchant=merchant,
        approved=True,
        decline_reason="NO_REASON",
        rule_failed="NONE",
        auth_code=code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=None,
    )
    balance, to_spend = after(amount + fee)
    await events.settlement(
        ctx,
        card,
        transaction_id=settlement_id,
        settlement_type=merchant["merchantTransactionType"],
        amount=-amount,
        fee=fee,
        merchant=merchant,
        auth_code=code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=auth_id,
        related_settlement_id=None,
    )
    return Outcome(APPROVED, authorisation_id=auth_id, settlement_id=settlement_id)


async def merchant_refund(
    ctx: Ctx, card: ManagedCard, attempt: Attempt, refused: Decline | None = None
) -> Outcome:
    """The reference's merchant refund: a purchase, then its refund in full (D26); the net
    effect is minus both fees."""
    bought = await purchase(ctx, card, attempt, refused)
    if bought.settlement_id is None or bought.authorisation_id is None:
        return bought
    auth = await locked_authorisation(ctx, card, bought.authorisation_id)
    refunded = await refund(ctx, card, attempt, auth, bought.settlement_id)
    return Outcome(
        APPROVED,
        authorisation_id=bought.authorisation_id,
        settlement_id=bought.settlement_id,
        refund_id=refunded.refund_id,
    )
