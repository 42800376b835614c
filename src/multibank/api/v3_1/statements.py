"""3.1.0 managed-account statement: the 3.29.1 operation (same parameters, `accept` handling,
paging and envelope) with the 3.1.0-era entry of contract §7: `transactionId`,
`transactionAmount`, `balanceAfter`, `cardholderFee`, `processedTimestamp`, `additionalFields`;
no `entryState`, balance adjustments, `availableBalanceAfter`/`actualBalanceAfter` or
`transactionFee`, which arrived later."""

from __future__ import annotations

from typing import Any

from fastapi import Response
from pydantic import BaseModel

from multibank.api.deps import StepUpRequired
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29.fees import CurrencyAmount, TransactionId
from multibank.api.v3_29.managed_accounts import AccountId
from multibank.api.v3_29.statements import (
    RESPONSES,
    Accept,
    Params,
    additional_fields,
    money,
    statement_response,
)
from multibank.ledger.statements import Entry

router = UnitOfWorkRouter(tags=["Managed Accounts"])


class StatementEntry(BaseModel):
    """As in 3.29.1, `originalAmount`, `forexRate` and `sourceAmount` are left out (no currency
    conversion); `cardholderFee` is a payment's fee, else zero in the account's currency."""

    transactionId: TransactionId
    transactionAmount: CurrencyAmount
    balanceAfter: CurrencyAmount
    cardholderFee: CurrencyAmount
    processedTimestamp: int
    additionalFields: dict[str, str]


class Statement(BaseModel):
    entry: list[StatementEntry]
    count: int
    responseCount: int


def entry_body(e: Entry) -> dict[str, Any]:
    return {
        "transactionId": {"type": e.type, "id": str(e.transaction_id)},
        "transactionAmount": money(e.transaction_amount, e.currency),
        "balanceAfter": money(e.actual_after, e.currency),
        "cardholderFee": money(e.fee, e.currency),
        "processedTimestamp": e.timestamp,
        "additionalFields": additional_fields(e),
    }


CSV_COLUMNS = (
    "transactionId.type",
    "transactionId.id",
    "transactionAmount.currency",
    "transactionAmount.amount",
    "balanceAfter.currency",
    "balanceAfter.amount",
    "cardholderFee.currency",
    "cardholderFee.amount",
    "processedTimestamp",
)


@router.get(
    "/managed_accounts/{id}/statement",
    operation_id="managedAccountStatement",
    response_model=Statement,
    response_model_exclude_none=True,
    responses=RESPONSES,
)
async def managed_account_statement(
    id: AccountId,
    session: StepUpRequired,
    params: Params,
    response: Response,
    accept: Accept,
) -> Any:
    """The account's entries, one per ledger posting: newest first unless
    `orderByTimestamp=ASC`; debits negative; each with the balance after it. Time bounds are
    inclusive; `showFundMovementsOnly` leaves out account events. Pages of at most 100. Demands
    a stepped-up session when the programme's `stepUpRequired` is on, as 3.29.1 does (the session
    is the same on both versions; docs/decisions/0007)."""
    response.headers["vary"] = "accept"
    return await statement_response(session, id, params, accept, entry_body, CSV_COLUMNS)
