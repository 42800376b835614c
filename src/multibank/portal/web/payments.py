"""A programme's payments: the list of its transfers, sends, wire transfers and card steps
(`portal.card_payments`), filtered by state, kind, dates and amounts, wire transfers waiting at
the bank first; a payment's page: its parties by name, history, postings and webhook events
(`portal.payment_detail`); and the cancel of a scheduled payment (3.63 line, D40), an operator's
back-office action in a sandbox or live programme alike."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation
from typing import Annotated, Any

from fastapi import Query, Request, Response
from fastapi.responses import RedirectResponse
from pydantic import TypeAdapter, ValidationError
from sqlalchemy import ColumnElement, Subquery, and_, case, or_, select

from multibank.kernel.money import ISO_4217, minor_unit_exponent
from multibank.kernel.validation import parse_id
from multibank.payments import repository as payments_repo
from multibank.payments import service
from multibank.payments.models import OWT, SCHEDULED, SEND, TRANSFER, Payment
from multibank.payments.schemas import (
    OWT_STATES_3_63,
    SEND_STATES_3_63,
    TRANSFER_STATES_3_63,
    CancellationReason,
)
from multibank.portal import card_payments, payment_detail, sessions
from multibank.portal.web.actions import Flash, act, confirmed, done, show
from multibank.portal.web.common import (
    PAGE,
    Offset,
    count_rows,
    db_of,
    find_programme,
    money,
    not_found,
    open_programme,
    pager,
    portal_router,
    posted_form,
    programme_ctx,
    render,
    signed_in,
    to_login,
    when,
)
from multibank.portal.web.forms import MOST_MINOR, Refused
from multibank.programmes.models import Programme

pages = portal_router()


PAYMENT_KINDS = {
    "TRANSFER": TRANSFER,
    "SEND": SEND,
    "OWT": OWT,
    **{kind: kind for kind in card_payments.CARD_KINDS.values()},
}
# Every state a payment can be in, the 3.63 line's (SCHEDULED, CANCELLED...) among them.
PAYMENT_STATES = tuple(
    dict.fromkeys(
        (
            *TRANSFER_STATES_3_63,
            *SEND_STATES_3_63,
            *OWT_STATES_3_63,
            *card_payments.CARD_STATES,
        )
    )
)
# What the operator has to settle or reject (sandbox wires waiting at the bank) comes first.
NEEDS_ACTION = ("SUBMITTED", "APPROVED")
DAY_MS = 86_400_000
# Bigger major amounts are refused before any arithmetic (1e999999999 would not fit memory).
LARGEST_MAJOR = 10**15


@dataclass
class PaymentFilters:
    state: str = ""
    kind: str = ""
    date_from: str = ""
    date_to: str = ""
    amount_min: str = ""
    amount_max: str = ""


def _day_ms(raw: str, what: str, problems: list[str]) -> int | None:
    """Midnight UTC of a YYYY-MM-DD date on the programme clock, in ms (the clock payments are
    stamped with); None and a sentence in `problems` when it is not such a date."""
    try:
        day = date.fromisoformat(raw)
    except ValueError:
        problems.append(f"{what} must be a date written as YYYY-MM-DD, such as 2026-01-31.")
        return None
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)


def _major(raw: str, what: str, problems: list[str]) -> Decimal | None:
    """An amount as the list shows it (major units, thousands separators allowed)."""
    try:
        value = Decimal(raw.replace(",", "").replace(" ", ""))
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite():
        problems.append(f"{what} must be a number, such as 1,250.00.")
        return None
    if value < 0:
        problems.append(f"{what} cannot be negative.")
        return None
    if value > LARGEST_MAJOR:
        problems.append(f"{what} must be at most {LARGEST_MAJOR:,}.")
        return None
    return value


def _amount_bound(listed: Subquery, major: Decimal, at_least: bool) -> ColumnElement[bool]:
    """The listed amount (minor units) at least / at most `major` in the row's own currency:
    one branch per minor-unit exponent, so the database compares integers."""
    amount, currency = listed.c.amount, listed.c.currency
    odd = {e: sorted(c for c in ISO_4217 if minor_unit_exponent(c) == e) for e in (0, 3)}
    odd_codes = [c for codes in odd.values() for c in codes]

    def bound(exponent: int) -> ColumnElement[bool]:
        scaled = major.scaleb(exponent)
        minor = min(
            int(scaled.to_integral_value(ROUND_CEILING if at_least else ROUND_FLOOR)), MOST_MINOR
        )
        return amount >= minor if at_least else amount <= minor

    return or_(
        *(and_(currency.in_(codes), bound(e)) for e, codes in odd.items()),
        and_(currency.not_in(odd_codes), bound(2)),
    )


def _payment_conditions(
    filters: PaymentFilters, listed: Subquery
) -> tuple[list[ColumnElement[bool]], list[str]]:
    """The SQL conditions of the payments page's filters on the listed payments and card steps
    (`card_payments.listing`) and, for each input that is not a filter, a sentence saying what
    to type instead (that filter is then left out)."""
    conditions: list[ColumnElement[bool]] = []
    problems: list[str] = []
    if filters.state:
        state = filters.state.strip().upper()
        if state in PAYMENT_STATES:
            conditions.append(listed.c.state == state)
        else:
            problems.append(f"State must be one of: {', '.join(PAYMENT_STATES)}.")
    if filters.kind:
        kind = PAYMENT_KINDS.get(filters.kind.strip().upper())
        if kind:
            conditions.append(listed.c.kind == kind)
        else:
            problems.append(
                "Kind must be transfer, send, OWT (outgoing wire transfer), card_authorisation, "
                "card_settlement or card_refund."
            )
    start = _day_ms(filters.date_from.strip(), "From", problems) if filters.date_from else None
    end = _day_ms(filters.date_to.strip(), "To", problems) if filters.date_to else None
    if start is not None and end is not None and start > end:
        problems.append("From must not be after To.")
    else:
        if start is not None:
            conditions.append(listed.c.created_at >= start)
        if end is not None:  # the whole of the To day
            conditions.append(listed.c.created_at < end + DAY_MS)
    low = _major(filters.amount_min, "Minimum amount", problems) if filters.amount_min else None
    high = _major(filters.amount_max, "Maximum amount", problems) if filters.amount_max else None
    if low is not None and high is not None and low > high:
        problems.append("Minimum amount must not be more than maximum amount.")
    else:
        if low is not None:
            conditions.append(_amount_bound(listed, low, at_least=True))
        if high is not None:
            conditions.append(_amount_bound(listed, high, at_least=False))
    return conditions, problems


# Over 8 parameters: each of the list's filters is a query parameter of its own.
@pages.get("/programmes/{programme_id}/payments")
async def payments_page(
    request: Request,
    programme_id: str,
    offset: Offset = 0,
    state: str = "",
    kind: str = "",
    date_from: Annotated[str, Query(alias="from")] = "",
    date_to: Annotated[str, Query(alias="to")] = "",
    amount_min: Annotated[str, Query(alias="min")] = "",
    amount_max: Annotated[str, Query(alias="max")] = "",
) -> Response:
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    db = db_of(request)
    filters = PaymentFilters(
        *(value[:40] for value in (state, kind, date_from, date_to, amount_min, amount_max))
    )
    listed = card_payments.listing(programme.id)
    conditions, problems = _payment_conditions(filters, listed)
    stmt = select(listed.c.source, listed.c.id).where(*conditions)
    count = await count_rows(db, stmt)
    waits = and_(listed.c.kind == OWT, listed.c.state.in_(NEEDS_ACTION))
    ordering = (case((waits, 0), else_=1), listed.c.created_at.desc(), listed.c.id.desc())
    page_rows = (await db.execute(stmt.order_by(*ordering).offset(offset).limit(PAGE))).all()
    base = f"/portal/programmes/{programme.id}"
    # The page's payments with their parties' names in one query, its card steps with their
    # cards' in another (no query per row), joined to the page's rows only.
    payment_ids = [i for source, i in page_rows if source == card_payments.PAYMENT]
    by_id: dict[tuple[str, int], dict[str, Any]] = {}
    if payment_ids:
        found = await db.execute(payment_detail.with_parties(Payment.id.in_(payment_ids)))
        for row in found.all():
            by_id[card_payments.PAYMENT, row[0].id] = payment_detail.listed(base, row)
    card_ids = [i for source, i in page_rows if source == card_payments.CARD]
    for i, shown in (await card_payments.card_rows(db, base, programme.id, card_ids)).items():
        by_id[card_payments.CARD, i] = shown
    return await show(
        request,
        signed,
        "payments.html",
        title="Payments",
        programme=programme,
        filters=filters,
        states=PAYMENT_STATES,
        problems=problems,
        payments=[by_id[(s, i)] for s, i in page_rows if (s, i) in by_id],
        pager=pager(request, offset, PAGE, count),
    )


@pages.get("/programmes/{programme_id}/payments/{payment_id}")
async def payment_page(request: Request, programme_id: str, payment_id: str) -> Response:
    """One payment: its parties by name, state history, ledger postings, webhook events, and
    the operator's actions on a sandbox wire transfer (decision 0056)."""
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    number = parse_id(payment_id)
    if number is None:
        return not_found("payment")
    db = db_of(request)
    base = f"/portal/programmes/{programme.id}"
    row = (
        await db.execute(
            payment_detail.with_parties(Payment.programme_id == programme.id, Payment.id == number)
        )
    ).one_or_none()
    if row is None:
        return not_found("payment")
    shown = payment_detail.listed(base, row)
    payment: Payment = shown["p"]
    moved = await payment_detail.movements(db, base, payment)
    sent = await payment_detail.events(db, payment)
    details = (payment.beneficiary or {}).get("bankAccountDetails") or {}
    return await show(
        request,
        signed,
        "payment.html",
        title=f"{payment_detail.KIND_NAMES[payment.kind]} {payment.id}",
        programme=programme,
        kind_name=payment_detail.KIND_NAMES[payment.kind],
        bank_details=[(BANK_FIELDS.get(k, k), str(v)) for k, v in details.items()],
        history=payment_detail.history(payment, moved, sent),
        movements=moved,
        events=sent,
        needs_action=NEEDS_ACTION,
        **shown,
    )


# How a wire transfer's beneficiary bank details are labelled on its page.
BANK_FIELDS = {
    "iban": "IBAN",
    "bankIdentifierCode": "BIC",
    "sortCode": "Sort code",
    "accountNumber": "Account number",
}


# Cancelling a scheduled payment (3.63 line, D40): what its payer can do with the line's cancels,
# the operator does on the payer's behalf, in any programme (a back-office action, recorded in
# the audit log as `payment.cancel` by `act`). It asks first, on a page with the optional reason.

REASON_LONGEST = 50
_REASON: TypeAdapter[str] = TypeAdapter(CancellationReason)


def _cancel_url(request: Request, programme: Programme, payment: Payment) -> str:
    suffix = "?from=detail" if request.query_params.get("from") == "detail" else ""
    return f"/portal/programmes/{programme.id}/payments/{payment.id}/cancel{suffix}"


def _cancel_back(request: Request, programme: Programme, payment: Payment) -> str:
    """The payment's page when the cancel was started there (`?from=detail`), else the list."""
    base = f"/portal/programmes/{programme.id}/payments"
    return f"{base}/{payment.id}" if request.query_params.get("from") == "detail" else base


def _not_scheduled(payment: Payment) -> str:
    name = payment_detail.KIND_NAMES[payment.kind].lower()
    return (
        f"Not cancelled: the {name} is {payment.state}; only a SCHEDULED payment can be "
        "cancelled. Nothing changed."
    )


def _reason(raw: str) -> str | None:
    """The reason typed (surrounding spaces dropped), None when none; one the API would refuse
    is `Refused` in plain words."""
    text = raw.strip()
    if not text:
        return None
    try:
        return _REASON.validate_python(text)
    except ValidationError:
        raise Refused(
            f"The reason may have at most {REASON_LONGEST} characters, each a letter, a digit, "
            "a space, - or _."
        ) from None


async def _scheduled_payment(
    request: Request, programme_id: str, payment_id: str, posted: bool
) -> tuple[sessions.Signed, dict[str, str], Programme, Payment] | Response:
    """The signed-in operator (and, for a post, its form with a valid CSRF token) and the
    programme's transfer, send or wire transfer, locked for a post; or the answer instead."""
    if posted:
        signed, form, refused = await posted_form(request)
        if refused is not None or signed is None:
            return refused or to_login()
    else:
        signed, form = await signed_in(request), {}
        if signed is None:
            return to_login()
    programme = await find_programme(request, programme_id)
    number = parse_id(payment_id)
    if programme is None or number is None:
        return not_found("payment")
    payment = await payments_repo.by_id(db_of(request), programme.id, number, lock=posted)
    if payment is None:
        return not_found("payment")
    return signed, form, programme, payment


def _cancel_form(
    request: Request,
    signed: sessions.Signed,
    programme: Programme,
    payment: Payment,
    reason: str = "",
    problem: str | None = None,
) -> Response:
    name = payment_detail.KIND_NAMES[payment.kind].lower()
    return render(
        "payment_cancel.html",
        status=400 if problem else 200,
        title="Cancel a scheduled payment",
        programme=programme,
        csrf=signed.csrf,
        msg=problem,
        error=problem is not None,
        text=(
            f"Cancel the scheduled {name} {payment.id} of "
            f"{money(payment.amount, payment.currency)}, due {when(payment.scheduled_at)} "
            "(UTC, programme clock)? It ends CANCELLED and never goes; it cannot be undone."
        ),
        action=_cancel_url(request, programme, payment),
        back=_cancel_back(request, programme, payment),
        reason=reason,
        longest=REASON_LONGEST,
    )


@pages.get("/programmes/{programme_id}/payments/{payment_id}/cancel")
async def payment_cancel_form(request: Request, programme_id: str, payment_id: str) -> Response:
    opened = await _scheduled_payment(request, programme_id, payment_id, posted=False)
    if isinstance(opened, Response):
        return opened
    signed, _, programme, payment = opened
    if payment.state != SCHEDULED:  # gone, or cancelled, since the page linking here
        back = _cancel_back(request, programme, payment)
        flash = Flash(_not_scheduled(payment), error=True, code="TRANSACTION_NOT_SCHEDULED")
        return done(request, signed, back, flash)
    return _cancel_form(request, signed, programme, payment)


@pages.post("/programmes/{programme_id}/payments/{payment_id}/cancel")
async def payment_cancel(request: Request, programme_id: str, payment_id: str) -> Response:
    """Cancels a scheduled payment with the reason given (`service.cancel_scheduled`, the line's
    own cancel); a bad reason shows the form again, a payment no longer SCHEDULED is refused with
    why, and neither changes anything."""
    opened = await _scheduled_payment(request, programme_id, payment_id, posted=True)
    if isinstance(opened, Response):
        return opened
    signed, form, programme, payment = opened
    if not confirmed(form):
        return RedirectResponse(_cancel_url(request, programme, payment), 303)
    typed = form.get("reason", "")[: REASON_LONGEST * 4]  # shown again: not all of a huge one
    try:
        reason = _reason(typed)
    except Refused as exc:
        return _cancel_form(request, signed, programme, payment, typed, str(exc))
    ctx = programme_ctx(request, programme)

    async def work() -> Flash:
        if payment.state != SCHEDULED:
            raise Refused(_not_scheduled(payment), "TRANSACTION_NOT_SCHEDULED")
        await service.cancel_scheduled(ctx, payment, reason)
        name = payment_detail.KIND_NAMES[payment.kind]
        return Flash(f"Cancelled: the scheduled {name.lower()} will not go.")

    return await act(request, signed, _cancel_back(request, programme, payment), work)
