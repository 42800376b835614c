"""The operator web portal at /portal/ (issue 14, D17): pages over the same services as the
operator API and the simulator, so no rule exists twice.

Signed in with the admin token (`portal.sessions`: a database session behind an HttpOnly,
SameSite=Strict cookie; signing out ends it). Every page answers a visitor without a session
with a redirect to the sign-in page; every form posts a CSRF token (the session's, or on the
sign-in form a cookie's), and a post without it is refused (403) before anything is read. Pages
are server-rendered (Jinja2, autoescaped) with one stylesheet and one small script (copy buttons)
served here: nothing from elsewhere, and a Content-Security-Policy that refuses any other script
and any inline one (decisions 0038, 0058). Every amount goes through one formatter
(`overview.amount`, the `money` global and `amount` filter); every refusal is said in plain words
with the API's errorCode in small print (`portal.readable`).

Every form post answers 303 to a page (POST/redirect/GET), so reloading never repeats an action.
What the action did, or why it was refused, travels to that page in a signed, HttpOnly cookie
read once (`Flash`): never in the URL, so no link can make the portal say something, and a
secret shown once (a new API key) is shown once. A refused action changes nothing: its
transaction is rolled back before the refusal is said. Actions that cannot be undone (revoking
a key, rejecting a wire transfer or a KYC, a new webhook secret) ask for confirmation on a page
of their own. Every list is paged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation
from typing import Annotated, Any

from fastapi import Query, Request, Response
from fastapi.responses import RedirectResponse
from sqlalchemy import ColumnElement, Subquery, and_, case, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.accounts import repository as accounts_repo
from multibank.api.routing import UnitOfWorkRouter
from multibank.cards import money as card_money
from multibank.cards import operator as card_ops
from multibank.cards.models import ManagedCard
from multibank.kernel.errors import DomainError
from multibank.kernel.money import ISO_4217, minor_unit_exponent
from multibank.kernel.notify import OutboxMessage
from multibank.kernel.validation import parse_id
from multibank.ledger import statements
from multibank.payments import owt
from multibank.payments import repository as payments_repo
from multibank.payments.models import OWT, SEND, TRANSFER, Payment
from multibank.payments.schemas import OWT_STATES, SEND_STATES, TRANSFER_STATES
from multibank.portal import card_pages, card_payments, payment_detail, readable, sessions
from multibank.portal.web import accounts, clock, customers, ledger, programmes, signin
from multibank.portal.web.actions import Flash, act, confirm_page, confirmed, programme_form, show
from multibank.portal.web.common import (
    PAGE,
    SEARCH_LONGEST,
    Offset,
    PortalRoute,
    contains,
    count_rows,
    db_of,
    find_programme,
    money,
    not_found,
    open_programme,
    owner_name,
    pager,
    portal_router,
    posted_form,
    posted_programme,
    programme_ctx,
    render,
    signed_in,
    to_login,
)
from multibank.portal.web.forms import (
    MOST_MINOR,
    Refused,
    field_amount,
    major_amount,
    webhook_url_ascii,
)
from multibank.portal.web.signin import WRONG_TOKEN_FROM_ENV, WRONG_TOKEN_STORED
from multibank.programmes import service
from multibank.programmes.models import Programme
from multibank.programmes.schemas import CardFeeWrite
from multibank.simulator import cards as card_simulator
from multibank.webhooks import service as webhooks

# What other modules and the tests take from `multibank.portal.web`, wherever it is defined.
__all__ = [
    "MOST_MINOR",
    "PAGE",
    "WRONG_TOKEN_FROM_ENV",
    "WRONG_TOKEN_STORED",
    "Offset",
    "PortalRoute",
    "Refused",
    "fallback",
    "field_amount",
    "major_amount",
    "pager",
    "render",
    "router",
    "show",
    "signed_in",
    "to_login",
    "webhook_url_ascii",
]

# The portal's pages, section by section in the order their routes are tried.
router = UnitOfWorkRouter(include_in_schema=False, route_class=PortalRoute)
pages = portal_router()  # the sections still here


# Payments, webhooks, inbox


PAYMENT_KINDS = {
    "TRANSFER": TRANSFER,
    "SEND": SEND,
    "OWT": OWT,
    **{kind: kind for kind in card_payments.CARD_KINDS.values()},
}
PAYMENT_STATES = tuple(
    dict.fromkeys((*TRANSFER_STATES, *SEND_STATES, *OWT_STATES, *card_payments.CARD_STATES))
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


async def _wire(
    request: Request, programme_id: str, payment_id: str, posted: bool
) -> tuple[sessions.Signed, dict[str, str], Programme, Payment] | Response:
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
    if programme is None or number is None or programme.mode != "sandbox":
        return not_found("wire transfer")
    payment = await payments_repo.by_id(db_of(request), programme.id, number, lock=posted)
    if payment is None or payment.kind != OWT:  # the simulator's rule: wire transfers only
        return not_found("wire transfer")
    return signed, form, programme, payment


def _wire_back(request: Request, programme: Programme, payment: Payment) -> str:
    """Where a wire transfer's action goes back to: the payment's page when it was started
    there (`?from=detail`), else the payments list."""
    base = f"/portal/programmes/{programme.id}/payments"
    return f"{base}/{payment.id}" if request.query_params.get("from") == "detail" else base


def _wire_confirm(request: Request, programme: Programme, payment: Payment, action: str) -> str:
    suffix = "?from=detail" if request.query_params.get("from") == "detail" else ""
    return f"/portal/programmes/{programme.id}/wire/{payment.id}/{action}{suffix}"


# What the confirmation page of each irreversible wire action says, and its button.
WIRE_CONFIRM = {
    "reject": (
        "Reject the wire transfer {id} of {amount}? It ends REJECTED and its amount and fee go "
        "back to the account; it cannot be undone.",
        "Reject the wire transfer",
    ),
    "return": (
        "Return the wire transfer {id} of {amount}, as the beneficiary's bank would? It ends "
        "RETURNED: the amount comes back to the source account (and the fee too when the wire "
        "transfer profile refunds it on a return); it cannot be undone.",
        "Return the wire transfer",
    ),
}


@pages.get("/programmes/{programme_id}/wire/{payment_id}/{action}")
async def wire_confirm(
    request: Request, programme_id: str, payment_id: str, action: str
) -> Response:
    opened = await _wire(request, programme_id, payment_id, posted=False)
    if isinstance(opened, Response):
        return opened
    if action not in WIRE_CONFIRM:
        return not_found("action")
    signed, _, programme, payment = opened
    text, button = WIRE_CONFIRM[action]
    amount = money(payment.amount, payment.currency)
    return confirm_page(
        signed,
        programme,
        text.format(id=payment.id, amount=amount),
        _wire_confirm(request, programme, payment, action),
        button,
        _wire_back(request, programme, payment),
    )


def _wire_refusal(action: str, code: str, state: str) -> str:
    """Why the bank's simulator refused a wire action, in plain words."""
    if action == "return":
        return (
            f"Not returned: only a COMPLETED wire transfer can be returned, and this one is "
            f"{state}. Nothing changed."
        )
    said = "settled" if action == "accept" else "rejected"
    if code == "DENIED_WIRE_TRANSFER_ALREADY_COMPLETED":
        return f"Not {said}: the wire transfer has already ended {state}. Nothing changed."
    return (
        f"Not {said}: the wire transfer is {state}; only one waiting at the bank (SUBMITTED "
        "or APPROVED) can be settled or rejected. Nothing changed."
    )


WIRE_DONE = {
    "accept": "Settled: the wire transfer has left the account.",
    "reject": "Rejected: its money is back on the account.",
    "return": "Returned: the bank sent its money back to the account.",
}


@pages.post("/programmes/{programme_id}/wire/{payment_id}/{action}")
async def wire_action(
    request: Request, programme_id: str, payment_id: str, action: str
) -> Response:
    opened = await _wire(request, programme_id, payment_id, posted=True)
    if isinstance(opened, Response):
        return opened
    signed, form, programme, payment = opened
    if action not in ("accept", "reject", "return"):
        return not_found("action")
    if action in WIRE_CONFIRM and not confirmed(form):
        return RedirectResponse(_wire_confirm(request, programme, payment, action), 303)
    ctx = programme_ctx(request, programme)
    state = payment.state

    async def work() -> Flash:
        # The simulator's own service (simulator/router.py owt_accept, _reject, _return).
        code = await owt.simulate(ctx, payment, action)
        if code != "COMPLETED":
            raise Refused(_wire_refusal(action, code, state), code)
        return Flash(WIRE_DONE[action])

    return await act(request, signed, _wire_back(request, programme, payment), work)


@pages.get("/programmes/{programme_id}/webhooks")
async def webhooks_page(
    request: Request,
    programme_id: str,
    eventType: Annotated[str | None, Query(max_length=80)] = None,
    state: Annotated[str | None, Query(pattern="^(|PENDING|DELIVERED|FAILED)$")] = None,
    offset: Offset = 0,
) -> Response:
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    db = db_of(request)
    page = await webhooks.page(db, programme.id, eventType or None, state or None, offset, PAGE)
    return await show(
        request,
        signed,
        "webhooks.html",
        title="Webhooks",
        programme=programme,
        settings=service.settings_of(programme),
        deliveries=page["deliveries"],
        event_types=await webhooks.event_types(db, programme.id),
        event_type=eventType,
        state=state,
        pager=pager(request, offset, PAGE, page["count"]),
    )


EXCERPT_SHOWN = 200  # characters of a receiver's answer shown; the store keeps no more either


@pages.get("/programmes/{programme_id}/webhooks/{event_id}")
async def webhook_page(request: Request, programme_id: str, event_id: str) -> Response:
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    number = parse_id(event_id)
    if number is None:
        return not_found("delivery")
    try:
        delivery = await webhooks.get(db_of(request), programme.id, number)
    except DomainError:
        return not_found("delivery")
    return await show(
        request,
        signed,
        "webhook.html",
        title=f"Delivery {delivery['id']}",
        programme=programme,
        d=delivery,
        payload=json.dumps(delivery["payload"], indent=2, sort_keys=True, ensure_ascii=False),
        excerpt_shown=EXCERPT_SHOWN,
    )


@pages.post("/programmes/{programme_id}/webhooks/{event_id}/redeliver")
async def webhook_redeliver(request: Request, programme_id: str, event_id: str) -> Response:
    opened = await posted_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, form, programme = opened
    number = parse_id(event_id)
    if number is None:
        return not_found("delivery")
    ctx = programme_ctx(request, programme)

    async def work() -> Flash:
        await webhooks.redeliver(ctx, number)
        return Flash("Sent again shortly.")

    back = f"/portal/programmes/{programme.id}/webhooks"
    if form.get("back") == "detail":
        back = f"{back}/{number}"
    return await act(request, signed, back, work)


@pages.get("/programmes/{programme_id}/inbox")
async def inbox_page(request: Request, programme_id: str, offset: Offset = 0) -> Response:
    signed = await signed_in(request)
    if signed is None:
        return to_login()
    programme = await find_programme(request, programme_id)
    if programme is None or programme.mode != "sandbox":
        return not_found("sandbox programme")
    db = db_of(request)
    stmt = select(OutboxMessage).where(OutboxMessage.programme_id == programme.id)
    count = await count_rows(db, stmt)
    rows = await db.execute(
        stmt.order_by(OutboxMessage.created_at.desc(), OutboxMessage.id.desc())
        .offset(offset)
        .limit(PAGE)
    )
    return await show(
        request,
        signed,
        "inbox.html",
        title="Inbox",
        programme=programme,
        messages=list(rows.scalars()),
        pager=pager(request, offset, PAGE, count),
    )


# Cards (D24, D32): the programme's cards with their numbers masked, each card's
# authorisations, and the operator's SYSTEM block; card fees are a form of the programme page.


@programme_form(pages, "card_fee")
async def card_fee(request: Request, form: dict[str, str], programme: Programme) -> Flash:
    kind, currency = form.get("kind", ""), form.get("currency", "")
    # The operator API's model: an unknown kind or a malformed currency is refused by it.
    changes = CardFeeWrite.model_validate(
        {kind: {currency: major_amount(form.get("amount"), currency, "The fee")}}
    )
    await service.set_card_fees(db_of(request), programme, changes.model_dump(exclude_none=True))
    return Flash("Card fee set.")


@pages.get("/programmes/{programme_id}/cards")
async def cards_page(
    request: Request,
    programme_id: str,
    identity: Annotated[str | None, Query(max_length=40)] = None,
    q: Annotated[str | None, Query(max_length=SEARCH_LONGEST)] = None,
    offset: Offset = 0,
) -> Response:
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    db = db_of(request)
    who = (identity or "").strip()
    number = parse_id(who) if who else None
    count, cards = 0, list[dict[str, Any]]()
    if not who or number is not None:
        text = (q or "").strip().lstrip("*•· ")
        stmt = card_pages.search(programme.id, number, contains(text) if text else None, text)
        count = await count_rows(db, stmt)
        ordered = stmt.order_by(ManagedCard.created_at.desc(), ManagedCard.id.desc())
        for card, balance, owner in (await db.execute(ordered.offset(offset).limit(PAGE))).all():
            cards.append({**card_ops.card_view(card, balance), "ownerName": owner or ""})
    return await show(
        request,
        signed,
        "cards.html",
        title="Cards",
        programme=programme,
        cards=cards,
        identity=who,
        q=(q or "").strip(),
        pager=pager(request, offset, PAGE, count),
    )


async def _card(request: Request, programme: Programme, value: str) -> Any:
    number = parse_id(value)
    if number is None:
        return None
    try:
        return await card_ops.get(db_of(request), programme.id, number, for_update=True)
    except DomainError:
        return None


@pages.get("/programmes/{programme_id}/cards/{card_id}")
async def card_page(
    request: Request,
    programme_id: str,
    card_id: str,
    offset: Offset = 0,
    entries: Offset = 0,
) -> Response:
    """A card: its owner by name, its statement (funding, purchases, fees, with the balances
    after), what becomes of its money, its authorisations, and in a sandbox a test purchase."""
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    number = parse_id(card_id)
    if number is None:
        return not_found("card")
    db = db_of(request)
    try:
        card, balance = await card_ops.get(db, programme.id, number)
    except DomainError:
        return not_found("card")
    count, found = await card_ops.authorisations(db, programme.id, card.id, offset, PAGE)
    spending = card.id if card.parent_account_id is None else card.parent_account_id
    query = statements.StatementQuery(
        spending, fund_movements_only=True, offset=entries, limit=PAGE, card_id=card.id
    )
    statement = await statements.statement(db, query)
    base = f"/portal/programmes/{programme.id}"
    return await show(
        request,
        signed,
        "card.html",
        title=card.friendly_name,
        programme=programme,
        card=card_ops.card_view(card, balance),
        owner=await owner_name(db, programme.id, card.identity_id),
        account_name=await _account_name(db, programme.id, card.parent_account_id),
        fate=card_pages.fate(card, balance),
        authorisations=found,
        pager=pager(request, offset, PAGE, count),
        entries=statement.entries,
        entry_links=await payment_detail.statement_links(db, base, programme.id, statement.entries),
        entries_pager=pager(request, entries, PAGE, statement.count, key="entries"),
    )


async def _account_name(db: AsyncSession, programme_id: int, account_id: int | None) -> str:
    if account_id is None:
        return ""
    account = await accounts_repo.get_in_programme(db, programme_id, account_id, False)
    return "" if account is None else account.friendly_name


@pages.post("/programmes/{programme_id}/cards/{card_id}/purchase")
async def card_purchase(request: Request, programme_id: str, card_id: str) -> Response:
    """The card simulator's purchase (an authorisation and its settlement at once), from the
    card's page of a sandbox programme: the same service, rules and refusals (D26)."""
    opened = await posted_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, form, programme = opened
    number = parse_id(card_id)
    if number is None or programme.mode != "sandbox":
        return not_found("card")
    ctx = programme_ctx(request, programme)
    card, profile_rules = await card_simulator.card_and_rules(ctx, str(number))
    if card is None:
        return not_found("card")
    url = f"/portal/programmes/{programme.id}/cards/{card.id}"

    async def work() -> Flash:
        amount = major_amount(form.get("amount"), card.currency, "The amount")
        merchant = (form.get("merchant") or "").strip() or card_money.DEFAULT_MERCHANT_NAME
        if len(merchant) > 50:
            raise Refused("The merchant's name must be at most 50 characters.")
        attempt = card_money.Attempt(
            currency=card.currency,
            amount=amount,
            merchant_name=merchant,
            atm=form.get("atm") == "yes",
        )
        outcome = await card_money.purchase(ctx, card, attempt, profile_rules=profile_rules)
        if outcome.code not in ("APPROVED", "COMPLETED"):
            raise Refused(readable.sentence(outcome.code), outcome.code)
        what = "ATM withdrawal" if attempt.atm else f"Purchase at {merchant}"
        return Flash(f"{what} of {money(amount, card.currency)} settled.", code=outcome.code)

    return await act(request, signed, url, work)


@pages.post("/programmes/{programme_id}/cards/{card_id}/{action}")
async def card_action(request: Request, programme_id: str, card_id: str, action: str) -> Response:
    opened = await posted_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, _, programme = opened
    found = await _card(request, programme, card_id)
    if found is None or action not in ("block", "unblock"):
        return not_found("card")
    card = found[0]
    ctx = programme_ctx(request, programme)

    async def work() -> Flash:
        if action == "block":
            await card_ops.system_block(ctx, card)
            return Flash("Card blocked (SYSTEM): its users cannot unblock it.")
        await card_ops.system_unblock(ctx, card)
        return Flash("Card unblocked.")

    return await act(request, signed, f"/portal/programmes/{programme.id}/cards/{card.id}", work)


router.include_router(signin.pages)
router.include_router(programmes.pages)
router.include_router(clock.pages)
router.include_router(customers.pages)
router.include_router(accounts.pages)
router.include_router(ledger.pages)
router.include_router(pages)

# Included after every other portal router (app.py): an address under /portal/ that no page
# answers gets the portal's own "not found" page, not the API's JSON. /portal/api is a mount
# matched before this, so the operator API keeps its JSON 404.
fallback = portal_router()


@fallback.get("/{rest:path}")
async def no_such_page(rest: str) -> Response:
    return not_found("page")
