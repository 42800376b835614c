"""Managed-card statement (3.29.1): `GET /managed_cards/{id}/statement` as JSON, CSV or PDF by the
`accept` header (cards.md §3.8, §5.3, §8.1; D23, D28, D30; docs/decisions/0046, 0059).

The account statement's query parameters, content negotiation and rendering are reused
(`api/v3_29/statements.py`, `ledger/statements.py`). What differs for a card:
- only money movements: no zero-amount instrument events (a new card's statement is empty), so
  `showFundMovementsOnly` is accepted and changes nothing;
- a prepaid card's entries are its own ledger account's; a debit card's are the entries of its
  parent account that the card caused, without balances after (the card holds none);
- `balanceAfter` is the available balance after the entry (D23).
3.1.0 has no cards: its base URL answers 404.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import Response
from pydantic import BaseModel

from multibank.api.deps import StatementCaller
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29.fees import CurrencyAmount, TransactionId
from multibank.api.v3_29.managed_cards import CardId, owner
from multibank.api.v3_29.statements import (
    CSV_COLUMNS,
    RESPONSES,
    Accept,
    Params,
    Subject,
    additional_fields,
    money,
    rendered,
)
from multibank.cards import repository as card_repository
from multibank.cards import service as cards
from multibank.ledger import statements
from multibank.ledger.statements import Entry

router = UnitOfWorkRouter(tags=["Managed Cards"])


class CardStatementEntry(BaseModel):
    """A card's entry: the account entry's shape; a debit card's entries have no `…After`
    balances (the card has none, D23)."""

    transactionId: TransactionId
    entryState: Literal["PENDING", "COMPLETED"]
    transactionAmount: CurrencyAmount
    availableBalanceAdjustment: CurrencyAmount
    actualBalanceAdjustment: CurrencyAmount
    balanceAfter: CurrencyAmount | None = None
    availableBalanceAfter: CurrencyAmount | None = None
    actualBalanceAfter: CurrencyAmount | None = None
    transactionFee: CurrencyAmount
    cardholderFee: CurrencyAmount
    processedTimestamp: int
    additionalFields: dict[str, str]


class CardStatement(BaseModel):
    entry: list[CardStatementEntry]
    count: int
    responseCount: int


def card_entry_body(e: Entry) -> dict[str, Any]:
    c = e.currency
    body: dict[str, Any] = {
        "transactionId": {"type": e.type, "id": str(e.transaction_id)},
        "entryState": e.entry_state,
        "transactionAmount": money(e.transaction_amount, c),
        "availableBalanceAdjustment": money(e.available_amount, c),
        "actualBalanceAdjustment": money(e.actual_amount, c),
        "transactionFee": money(e.fee, c),
        "cardholderFee": money(e.fee, c),
        "processedTimestamp": e.timestamp,
        "additionalFields": additional_fields(e),
    }
    if e.has_balances:
        body["balanceAfter"] = money(e.available_after, c)
        body["availableBalanceAfter"] = money(e.available_after, c)
        body["actualBalanceAfter"] = money(e.actual_after, c)
    return body


@router.get(
    "/managed_cards/{id}/statement",
    operation_id="managedCardStatement",
    response_model=CardStatement,
    response_model_exclude_none=True,
    responses=RESPONSES,
)
async def managed_card_statement(
    id: CardId,
    reader: StatementCaller,
    params: Params,
    response: Response,
    accept: Accept,
) -> Any:
    """The card's money movements, newest first unless `orderByTimestamp=ASC` (entries of the
    same millisecond in ledger order): transfers, sends and fees on a prepaid card, and the
    card's payment steps (authorisation, settlement, reversal, expiry, refund) with their
    merchant fields. A debit card's entries are its parent account's movements it caused,
    without balances after. Time bounds are inclusive; pages of at most 100; `count` is the
    number of entries matching the filters; `showFundMovementsOnly` changes nothing (a card's
    statement has no zero-amount events). Another identity's card is 404. When the programme's
    `stepUpRequired` is on, a session that has not stepped up reads only entries posted while a
    step-up of its user, in another session, within the last minute, was in force (to that
    session's end); any other entry on the page answers 403 STEP_UP_REQUIRED."""
    session = reader.session
    response.headers["vary"] = "accept"
    card, ledger_account = await cards.load(session.ctx, owner(session), id)
    account_id = card.id if card.parent_account_id is None else card.parent_account_id
    base = params.query(account_id)
    query = statements.StatementQuery(
        account_id=account_id,
        from_ms=base.from_ms,
        to_ms=base.to_ms,
        fund_movements_only=True,
        ascending=base.ascending,
        offset=base.offset,
        limit=base.limit,
        card_id=card.id,
        transactions=card_repository.statement_transactions(card),
    )
    page = await statements.statement(session.ctx.db, query)
    # Every form (JSON, CSV, PDF) alike, before anything is rendered (decision 0059).
    reader.require_posted_within(e.timestamp for e in page.entries)
    subject = Subject(
        "card",
        card.id,
        card.friendly_name,
        card.currency,
        None if ledger_account is None else ledger_account.available,
        None if ledger_account is None else ledger_account.actual,
    )
    return await rendered(session, subject, page, params, accept, card_entry_body, CSV_COLUMNS)
