"""Managed-account statement (3.29.1): `GET /managed_accounts/{id}/statement` as JSON, CSV or PDF
by the `accept` header (contract §1, §5.7, §5.8; D5, D11; docs/decisions/0009).

The 3.1.0 override (`api/v3_1/statements.py`) reuses everything here but the entry shape.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import Depends, Header, Query, Request, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from multibank.accounts import service as accounts
from multibank.accounts import statement_pdf
from multibank.api.deps import STEP_UP_RESPONSES, Session, StepUpRequired
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29.fees import CurrencyAmount, TransactionId
from multibank.api.v3_29.managed_accounts import AccountId, owner
from multibank.ledger import statements
from multibank.ledger.statements import CARD_STEPS, Entry, StatementPage, StatementQuery

router = UnitOfWorkRouter(tags=["Managed Accounts"])

JSON, CSV, PDF = "application/json", "text/csv", "application/pdf"
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


# Wire shapes (contract §6 `Statement`, `StatementEntry`)


class StatementEntry(BaseModel):
    """3.29.1 entry. No currency conversion happens on this server, so `originalAmount`,
    `forexRate` and `sourceAmount` (which describe one) are left out. `cardholderFee` is what
    the account paid on top of a payment (a transfer's, send's or wire transfer's fee, included
    in the amounts); it is zero for other entries, a fee charge being an entry of its own
    (CHARGE_FEE). `transactionFee` is the same fee, as the payment's webhook event gives it
    (a released hold's entry shows 0 in both)."""

    transactionId: TransactionId
    entryState: Literal["PENDING", "COMPLETED"]
    transactionAmount: CurrencyAmount
    availableBalanceAdjustment: CurrencyAmount
    actualBalanceAdjustment: CurrencyAmount
    balanceAfter: CurrencyAmount
    availableBalanceAfter: CurrencyAmount
    actualBalanceAfter: CurrencyAmount
    transactionFee: CurrencyAmount
    cardholderFee: CurrencyAmount
    processedTimestamp: int
    additionalFields: dict[str, str]


class Statement(BaseModel):
    entry: list[StatementEntry]
    count: int
    responseCount: int


def money(amount: int, currency: str) -> dict[str, Any]:
    return {"currency": currency, "amount": amount}


def additional_fields(entry: Entry) -> dict[str, str]:
    """The transaction's details as the string→string map of the contract (chargeFeeType,
    sender, reference, ...); empty values are left out."""
    return {k: str(v) for k, v in entry.details.items() if v is not None and v != ""}


def balance_after(e: Entry) -> int:
    """`balanceAfter`: the actual balance on an account's own entries (as its statements have
    always shown, and as they add up), the available one after a card step (D23: an
    authorisation of 100 on 1000 shows 900 while the actual balance is still 1000)."""
    return e.available_after if e.type in CARD_STEPS else e.actual_after


def entry_body(e: Entry) -> dict[str, Any]:
    c = e.currency
    return {
        "transactionId": {"type": e.type, "id": str(e.transaction_id)},
        "entryState": e.entry_state,
        "transactionAmount": money(e.transaction_amount, c),
        "availableBalanceAdjustment": money(e.available_amount, c),
        "actualBalanceAdjustment": money(e.actual_amount, c),
        "balanceAfter": money(balance_after(e), c),
        "availableBalanceAfter": money(e.available_after, c),
        "actualBalanceAfter": money(e.actual_after, c),
        "transactionFee": money(e.fee, c),
        "cardholderFee": money(e.fee, c),
        "processedTimestamp": e.timestamp,
        "additionalFields": additional_fields(e),
    }


# CSV: one column per leaf of the entry, nested names joined with dots; additionalFields keys
# become `additionalFields.<key>` columns (the union over the page's entries, sorted).
CSV_COLUMNS = (
    "transactionId.type",
    "transactionId.id",
    "entryState",
    "transactionAmount.currency",
    "transactionAmount.amount",
    "availableBalanceAdjustment.currency",
    "availableBalanceAdjustment.amount",
    "actualBalanceAdjustment.currency",
    "actualBalanceAdjustment.amount",
    "balanceAfter.currency",
    "balanceAfter.amount",
    "availableBalanceAfter.currency",
    "availableBalanceAfter.amount",
    "actualBalanceAfter.currency",
    "actualBalanceAfter.amount",
    "transactionFee.currency",
    "transactionFee.amount",
    "cardholderFee.currency",
    "cardholderFee.amount",
    "processedTimestamp",
)


# A spreadsheet reads a cell that starts with one of these as a formula (CWE-1236): a deposit's
# sender name and reference come from outside the programme.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def cell(value: Any) -> str:
    """A CSV cell: text that a spreadsheet would take for a formula gets a leading `'`;
    numbers (negative amounts included) stay numbers."""
    if isinstance(value, str):
        return "'" + value if value.startswith(FORMULA_STARTS) else value
    return str(value)


def flatten(body: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in body.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = cell(value)
    return out


def to_csv(bodies: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    rows = [flatten(b) for b in bodies]
    extra = sorted({k for r in rows for k in r if k.startswith("additionalFields.")})
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[*columns, *extra], extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


# The `accept` header


def negotiate(accept: str | None) -> str:
    """JSON, CSV or PDF: the supported type the header prefers (q-values honoured, the earlier
    one on a tie); JSON when the header is missing, names nothing supported, or is malformed."""
    best: tuple[float, int, str] | None = None
    for index, item in enumerate((accept or "").split(",")):
        media, *params = (part.strip() for part in item.split(";"))
        media = media.lower()
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
        if q <= 0:
            continue
        kind = {
            JSON: JSON,
            CSV: CSV,
            PDF: PDF,
            "*/*": JSON,
            "application/*": JSON,
            "text/*": CSV,
        }.get(media)
        if kind is not None and (best is None or (q, -index) > (best[0], best[1])):
            best = (q, -index, kind)
    return JSON if best is None else best[2]


# Query parameters, shared by both versions


@dataclass(frozen=True)
class StatementParams:
    offset: int
    limit: int
    ascending: bool
    from_ms: int | None
    to_ms: int | None
    fund_movements_only: bool

    def query(self, account_id: int) -> StatementQuery:
        return StatementQuery(
            account_id=account_id,
            from_ms=self.from_ms,
            to_ms=self.to_ms,
            fund_movements_only=self.fund_movements_only,
            ascending=self.ascending,
            offset=self.offset,
            limit=self.limit,
        )


def statement_params(
    offset: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
    limit: Annotated[
        int, Query(ge=1, le=INT32_MAX, description="Page size; values above 100 are capped at 100")
    ] = statements.MAX_PAGE,
    orderByTimestamp: Annotated[
        Literal["ASC", "DESC"], Query(description="Default DESC: newest first")
    ] = "DESC",
    fromTimestamp: Annotated[
        int | None,
        Query(ge=0, le=INT64_MAX, description="Epoch ms; entries at or after it (inclusive)"),
    ] = None,
    toTimestamp: Annotated[
        int | None,
        Query(ge=0, le=INT64_MAX, description="Epoch ms; entries at or before it (inclusive)"),
    ] = None,
    showFundMovementsOnly: Annotated[
        bool, Query(description="Leave out the zero-amount account events")
    ] = False,
) -> StatementParams:
    return StatementParams(
        offset=offset,
        limit=limit,
        ascending=orderByTimestamp == "ASC",
        from_ms=fromTimestamp,
        to_ms=toTimestamp,
        fund_movements_only=showFundMovementsOnly,
    )


Params = Annotated[StatementParams, Depends(statement_params)]


async def caller_accept(
    request: Request,
    accept: Annotated[
        str | None,
        Header(
            alias="accept",
            description="application/json (default, and for any other value), text/csv or "
            "application/pdf",
        ),
    ] = None,
) -> str | None:
    """The caller's `Accept`. A generated client sends its own `application/json` line and then
    the operation's `accept` parameter as a second line: with several lines the last one is the
    caller's choice (D11a); within one line, q-values decide (`negotiate`)."""
    lines = request.headers.getlist("accept")
    return lines[-1] if lines else accept


Accept = Annotated[str | None, Depends(caller_accept)]

RESPONSES: dict[int | str, dict[str, Any]] = {
    **STEP_UP_RESPONSES,
    200: {
        "content": {
            CSV: {"schema": {"type": "string"}},
            PDF: {"schema": {"type": "string", "format": "binary"}},
        },
        "description": "The statement page as JSON, CSV (one row per entry) or PDF",
    },
}


@dataclass(frozen=True)
class Subject:
    """What a statement is of (an account, or a card): its id and name for the PDF heading and
    file names, its balances now (None for a debit card, which holds none)."""

    instrument: str  # "account" | "card"
    id: int
    friendly_name: str
    currency: str
    available: int | None
    actual: int | None


async def statement_response(
    session: Session,
    account_id: str,
    params: StatementParams,
    accept: str | None,
    shape: Callable[[Entry], dict[str, Any]],
    csv_columns: Sequence[str],
) -> dict[str, Any] | Response:
    account, ledger_account = await accounts.load(session.ctx, owner(session), account_id)
    page = await statements.statement(session.ctx.db, params.query(account.id))
    subject = Subject(
        "account",
        account.id,
        account.friendly_name,
        account.currency,
        ledger_account.available,
        ledger_account.actual,
    )
    return await rendered(session, subject, page, params, accept, shape, csv_columns)


async def rendered(
    session: Session,
    subject: Subject,
    page: StatementPage,
    params: StatementParams,
    accept: str | None,
    shape: Callable[[Entry], dict[str, Any]],
    csv_columns: Sequence[str],
) -> dict[str, Any] | Response:
    """The page as the `accept` header asks: JSON (`{entry, count, responseCount}`), CSV (one
    row per entry) or PDF."""
    kind = negotiate(accept)
    vary = {"vary": "accept"}
    name = "statement" if subject.instrument == "account" else f"{subject.instrument}-statement"
    if kind == PDF:
        heading = statement_pdf.StatementHeading(
            account_id=subject.id,
            friendly_name=subject.friendly_name,
            currency=subject.currency,
            from_ms=params.from_ms,
            to_ms=params.to_ms,
            generated_ms=session.ctx.now,
            available=subject.available,
            actual=subject.actual,
            count=page.count,
            offset=params.offset,
            ascending=params.ascending,
            instrument=subject.instrument,
        )
        pdf = await run_in_threadpool(statement_pdf.render, heading, page.entries)
        return Response(
            pdf,
            media_type=PDF,
            headers={
                **vary,
                "content-disposition": f'attachment; filename="{name}-{subject.id}.pdf"',
            },
        )
    bodies = [shape(e) for e in page.entries]
    if kind == CSV:
        return Response(
            to_csv(bodies, csv_columns),
            media_type="text/csv; charset=utf-8",
            headers={
                **vary,
                "content-disposition": f'attachment; filename="{name}-{subject.id}.csv"',
            },
        )
    return {"entry": bodies, "count": page.count, "responseCount": len(bodies)}


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
    `orderByTimestamp=ASC`; debits negative; each with the balances after it. Time bounds are
    inclusive; `showFundMovementsOnly` leaves out account events (opened, blocked, ...). Pages of
    at most 100; `count` is the number of entries matching the filters. Demands a stepped-up
    session when the programme's `stepUpRequired` is on."""
    response.headers["vary"] = "accept"
    return await statement_response(session, id, params, accept, entry_body, CSV_COLUMNS)
