"""A managed account: its statement page within a range of dates, the downloads of that page
(JSON as the API's statement, CSV, PDF), and in a sandbox the bank's side of it: a deposit, an
IBAN allocated at once."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Annotated
from urllib.parse import urlencode

from fastapi import Query, Request, Response

from multibank.accounts import repository as accounts_repo
from multibank.accounts import service as accounts
from multibank.accounts import statement_pdf
from multibank.accounts.models import ManagedAccount
from multibank.api.v3_29.statements import CSV_COLUMNS, entry_body, to_csv
from multibank.kernel.validation import parse_id
from multibank.ledger import statements
from multibank.ledger.models import LedgerAccount
from multibank.portal import payment_detail, readable
from multibank.portal.web.actions import Flash, act, show
from multibank.portal.web.common import (
    PAGE,
    Offset,
    db_of,
    find_programme,
    money,
    not_found,
    owner_name,
    pager,
    portal_router,
    posted_programme,
    programme_ctx,
    render,
    signed_in,
    to_login,
)
from multibank.portal.web.forms import Refused, major_amount
from multibank.programmes.models import Programme

pages = portal_router()


async def _account(
    request: Request, programme: Programme, value: str, for_update: bool = False
) -> ManagedAccount | None:
    number = parse_id(value)
    if number is None:
        return None
    return await accounts_repo.get_in_programme(db_of(request), programme.id, number, for_update)


@pages.post("/programmes/{programme_id}/accounts/{account_id}/{action}")
async def account_action(
    request: Request, programme_id: str, account_id: str, action: str
) -> Response:
    opened = await posted_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, form, programme = opened
    account = await _account(request, programme, account_id, for_update=True)
    if account is None or programme.mode != "sandbox" or action not in ("iban", "deposit"):
        return not_found("account")
    url = f"/portal/programmes/{programme.id}/customers/{account.identity_id}"
    ctx = programme_ctx(request, programme)

    async def work() -> Flash:
        if action == "iban":
            # The simulator's rule: only an allocation the owner asked for is finished early.
            await accounts.allocate_pending_iban(ctx, account)
            return Flash(f"IBAN {account.iban} allocated.")
        amount = major_amount(form.get("amount"), account.currency, "The amount")
        code = await accounts.deposit(
            ctx, account, account.currency, amount, {"sender": "Portal deposit"}
        )
        if code != "COMPLETED":
            raise Refused(readable.sentence(code), code)
        return Flash(f"Deposited {money(amount, account.currency)}.", code=code)

    return await act(request, signed, url, work)


STATEMENT_KINDS = ("json", "csv", "pdf")
STATEMENT_DAY_MS = 86_400_000


@dataclass(frozen=True)
class StatementRange:
    """The account page's date range: the dates as typed (kept in the form and the download
    links), the inclusive bounds in ms on the programme's clock, and a sentence per date that
    is not one (that bound is then left out)."""

    date_from: str
    date_to: str
    from_ms: int | None
    to_ms: int | None
    problems: tuple[str, ...]

    @property
    def query(self) -> dict[str, str]:
        """The bounds in use, for the download links: the range the page shows."""
        bounds = (("from", self.date_from, self.from_ms), ("to", self.date_to, self.to_ms))
        return {k: v for k, v, ms in bounds if ms is not None}


def _statement_range(raw_from: str, raw_to: str) -> StatementRange:
    problems: list[str] = []
    bounds: list[int | None] = []
    for raw, what in ((raw_from, "From"), (raw_to, "To")):
        if not raw:
            bounds.append(None)
            continue
        try:
            day = date.fromisoformat(raw)
        except ValueError:
            problems.append(
                f"{what} must be a date written as YYYY-MM-DD, such as 2026-01-31: "
                "pick one in the form's calendar. That bound was left out."
            )
            bounds.append(None)
            continue
        bounds.append(int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000))
    start, end = bounds
    if start is not None and end is not None and start > end:
        problems.append("From must not be after To: swap the two dates. The range was left out.")
        start = end = None
    return StatementRange(
        raw_from,
        raw_to,
        start,
        None if end is None else end + STATEMENT_DAY_MS - 1,  # the whole of the To day
        tuple(problems),
    )


async def _statement(
    request: Request, programme_id: str, account_id: str, offset: int, raw_from: str, raw_to: str
) -> tuple[Programme, ManagedAccount, StatementRange, statements.StatementPage] | None:
    programme = await find_programme(request, programme_id)
    account = None if programme is None else await _account(request, programme, account_id)
    if programme is None or account is None:
        return None
    span = _statement_range(raw_from.strip()[:40], raw_to.strip()[:40])
    query = statements.StatementQuery(
        account.id, from_ms=span.from_ms, to_ms=span.to_ms, offset=offset, limit=PAGE
    )
    return programme, account, span, await statements.statement(db_of(request), query)


@pages.get("/programmes/{programme_id}/accounts/{account_id}")
async def account_page(
    request: Request,
    programme_id: str,
    account_id: str,
    offset: Offset = 0,
    date_from: Annotated[str, Query(alias="from")] = "",
    date_to: Annotated[str, Query(alias="to")] = "",
) -> Response:
    """An account's statement, newest first, within the dates asked for (UTC days of the
    programme's clock, both included); the page says which range it shows."""
    signed = await signed_in(request)
    if signed is None:
        return to_login()
    found = await _statement(request, programme_id, account_id, offset, date_from, date_to)
    if found is None:
        return not_found("account")
    programme, account, span, page = found
    base = f"/portal/programmes/{programme.id}/accounts/{account.id}/statement"
    query = urlencode({**span.query, "offset": str(offset)})
    return await show(
        request,
        signed,
        "account.html",
        title=account.friendly_name,
        programme=programme,
        account=account,
        ledger_account=await db_of(request).get(LedgerAccount, account.id),
        owner=await owner_name(db_of(request), programme.id, account.identity_id),
        entries=page.entries,
        entry_links=await payment_detail.statement_links(
            db_of(request), f"/portal/programmes/{programme.id}", programme.id, page.entries
        ),
        offset=offset,
        span=span,
        downloads={kind: f"{base}.{kind}?{query}" for kind in STATEMENT_KINDS},
        pager=pager(request, offset, PAGE, page.count),
    )


@pages.get("/programmes/{programme_id}/accounts/{account_id}/statement.{kind}")
async def account_download(
    request: Request,
    programme_id: str,
    account_id: str,
    kind: str,
    offset: Offset = 0,
    date_from: Annotated[str, Query(alias="from")] = "",
    date_to: Annotated[str, Query(alias="to")] = "",
) -> Response:
    """The entries of the statement page at `offset` within the page's date range (the account
    page's links name both), as JSON (the API's statement shape), CSV or PDF: a download of a
    long statement is paged as its page is."""
    signed = await signed_in(request)
    if signed is None:
        return to_login()
    found = await _statement(request, programme_id, account_id, offset, date_from, date_to)
    if found is None or kind not in STATEMENT_KINDS:
        return not_found("statement")
    programme, account, span, page = found
    if span.problems:
        text = " ".join(span.problems)
        return render("message.html", status=400, title="Not a date", text=text)
    dates = "".join(f"-{k}-{v}" for k, v in span.query.items())
    name = f"statement-{account.id}{dates}" + (f"-from-{offset + 1}" if offset else "") + f".{kind}"
    disposition = {"content-disposition": f'attachment; filename="{name}"'}
    bodies = [entry_body(e) for e in page.entries]
    if kind == "json":
        body = {"entry": bodies, "count": page.count, "responseCount": len(bodies)}
        return Response(json.dumps(body), media_type="application/json", headers=disposition)
    if kind == "csv":
        return Response(to_csv(bodies, CSV_COLUMNS), media_type="text/csv", headers=disposition)
    la = await db_of(request).get(LedgerAccount, account.id)
    heading = statement_pdf.StatementHeading(
        account_id=account.id,
        friendly_name=account.friendly_name,
        currency=account.currency,
        from_ms=span.from_ms,
        to_ms=span.to_ms,
        generated_ms=programme_ctx(request, programme).now,
        available=la.available if la else 0,
        actual=la.actual if la else 0,
        count=page.count,
        offset=offset,
        ascending=False,
    )
    pdf = statement_pdf.render(heading, page.entries)
    return Response(io.BytesIO(pdf).getvalue(), media_type="application/pdf", headers=disposition)
