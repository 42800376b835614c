"""The simulator's purchase (D23, D26): an authorisation and its full settlement in one database
transaction, recorded exactly as `steps.authorise` then `steps.settle` record them
(`tests/cards/test_purchase.py` compares the two), in fewer statements (decision 0060); and the
merchant refund, a purchase refunded in full."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table

from multibank.cards import events
from multibank.cards.authorisations import COMPLETED, CardAuthorisation
from multibank.cards.models import CardMovement, ManagedCard
from multibank.cards.money.books import (
    ledger_details,
    lock_purchase,
    revenue_account,
    scheme_account,
    spending_account,
)
from multibank.cards.money.checks import checked, over_limit, to_spend_after
from multibank.cards.money.steps import decline, fee_kind, locked_authorisation, refund
from multibank.cards.money.terms import (
    APPROVED,
    AUTHORISATION,
    AUTHORISATION_TTL_MS,
    NOT_ENOUGH_FUNDS,
    SETTLEMENT,
    Attempt,
    Decline,
    Outcome,
    auth_code,
)
from multibank.kernel.ids import new_id
from multibank.ledger import service as ledger
from multibank.programmes.card_fees import card_fee
from multibank.programmes.context import Ctx

_AUTHORISATIONS = cast(Table, CardAuthorisation.__table__)
_MOVEMENTS = cast(Table, CardMovement.__table__)


@dataclass(frozen=True)
class _Sale:
    """A purchase its checks approved: what both of its steps record. (Eleven fields, one
    value: the helpers below take it instead of eleven parameters each.)"""

    card: ManagedCard
    merchant: dict[str, Any]
    account_id: int  # the spending account
    book: int  # its reserved book
    scheme: int
    revenue: int
    amount: int
    fee: int
    auth_id: int
    settlement_id: int
    code: str


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
    fee = max(0, min(card_fee(ctx.programme, fee_kind(merchant), currency), available - amount))
    auth_id, settlement_id, code = new_id(), new_id(), auth_code()
    sale = _Sale(
        card=card,
        merchant=merchant,
        account_id=account_id,
        book=book,
        scheme=scheme,
        revenue=revenue,
        amount=amount,
        fee=fee,
        auth_id=auth_id,
        settlement_id=settlement_id,
        code=code,
    )
    await _record(ctx, sale)
    await _announce(ctx, sale, available, used)
    return Outcome(APPROVED, authorisation_id=auth_id, settlement_id=settlement_id)


def _movements(sale: _Sale) -> list[ledger.NewMovement]:
    """The authorisation's movement (written COMPLETED: settled in this transaction) and the
    settlement's, with the legs and details `authorise` and `settle` post."""
    card, merchant, currency, amount = sale.card, sale.merchant, sale.card.currency, sale.amount
    details = ledger_details(card, merchant, sale.code, -amount, 0)
    details["authorisationId"] = str(sale.auth_id)
    details["forexPaddingCurrency"] = currency
    details["forexPaddingAmount"] = "0"
    # The guards below cannot refuse while the rows are locked: an InsufficientFunds here would
    # be a bug, and rolls the whole request back.
    authorisation = ledger.NewMovement(
        AUTHORISATION,
        [
            ledger.Leg(sale.account_id, currency, -amount, 0),
            ledger.Leg(sale.book, currency, amount, 0, guarded=False),
        ],
        sale.auth_id,
        state=COMPLETED,  # settled below, in this transaction
        details=details,
    )
    settlement_details = ledger_details(card, merchant, sale.code, -amount, sale.fee)
    settlement_details["authorisationId"] = str(sale.auth_id)
    settlement_details["authorisationRelatedId"] = str(sale.auth_id)
    legs = [
        ledger.Leg(sale.book, currency, -amount, 0, guarded=False),
        ledger.Leg(sale.account_id, currency, -sale.fee, -(amount + sale.fee)),
        ledger.Leg(sale.scheme, currency, amount, amount, guarded=False),
    ]
    if sale.fee:
        legs.append(ledger.Leg(sale.revenue, currency, sale.fee, sale.fee, guarded=False))
    settlement = ledger.NewMovement(
        SETTLEMENT, legs, sale.settlement_id, details=settlement_details
    )
    return [authorisation, settlement]


def _rows(ctx: Ctx, sale: _Sale) -> list[tuple[Table, list[dict[str, Any]]]]:
    """The authorisation's row (written settled) and both steps' card movements."""
    authorisation_row = {
        "id": sale.auth_id,
        "programme_id": ctx.programme.id,
        "card_id": sale.card.id,
        "account_id": sale.account_id,
        "reserved_account_id": sale.book,
        "currency": sale.card.currency,
        "held_amount": sale.amount,
        "open_amount": 0,
        "settled_amount": sale.amount,
        "fee_amount": sale.fee,
        "refunded_amount": 0,
        "state": COMPLETED,
        "auth_code": sale.code,
        "merchant": sale.merchant,
        "settlement_id": sale.settlement_id,
        "expires_at": ctx.now + AUTHORISATION_TTL_MS,
        "created_at": ctx.now,
    }
    movement_rows = [
        {
            "transaction_id": step_id,
            "programme_id": ctx.programme.id,
            "card_id": sale.card.id,
            "account_id": sale.account_id,
            "kind": step,
            "created_at": ctx.now,
        }
        for step_id, step in ((sale.auth_id, AUTHORISATION), (sale.settlement_id, SETTLEMENT))
    ]
    return [(_AUTHORISATIONS, [authorisation_row]), (_MOVEMENTS, movement_rows)]


async def _record(ctx: Ctx, sale: _Sale) -> None:
    """Both movements, the authorisation's row and both card movements in one statement on
    PostgreSQL (decision 0060): nothing in this request reads them back."""
    await ledger.post_all(
        ctx.db,
        programme_id=ctx.programme.id,
        movements=_movements(sale),
        now_ms=ctx.now,
        rows=_rows(ctx, sale),
    )


async def _announce(ctx: Ctx, sale: _Sale, available: int, used: dict[str, int] | None) -> None:
    """The authorisation's and the settlement's events, with the balances `balances_for_event`
    would read after each (`available`: the spending account's before the purchase; `used`: a
    debit card's spend in each window before it)."""

    def after(spent_since: int) -> tuple[int | None, list[dict[str, Any]] | None]:
        if used is not None:
            return None, to_spend_after(sale.card, used, spent_since)
        return available - spent_since, None

    card, merchant, amount = sale.card, sale.merchant, sale.amount
    balance, to_spend = after(amount)
    await events.authorisation(
        ctx,
        card,
        transaction_id=sale.auth_id,
        authorisation_type="AUTHORISED",
        amount=-amount,
        merchant=merchant,
        approved=True,
        decline_reason="NO_REASON",
        rule_failed="NONE",
        auth_code=sale.code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=None,
    )
    balance, to_spend = after(amount + sale.fee)
    await events.settlement(
        ctx,
        card,
        transaction_id=sale.settlement_id,
        settlement_type=merchant["merchantTransactionType"],
        amount=-amount,
        fee=sale.fee,
        merchant=merchant,
        auth_code=sale.code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=sale.auth_id,
        related_settlement_id=None,
    )


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
