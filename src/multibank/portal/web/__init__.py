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

from typing import Annotated, Any

from fastapi import Query, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.accounts import repository as accounts_repo
from multibank.api.routing import UnitOfWorkRouter
from multibank.cards import money as card_money
from multibank.cards import operator as card_ops
from multibank.cards.models import ManagedCard
from multibank.kernel.errors import DomainError
from multibank.kernel.validation import parse_id
from multibank.ledger import statements
from multibank.portal import card_pages, payment_detail, readable
from multibank.portal.web import (
    accounts,
    clock,
    customers,
    deliveries,
    ledger,
    payments,
    programmes,
    signin,
    wires,
)
from multibank.portal.web.actions import Flash, act, programme_form, show
from multibank.portal.web.common import (
    PAGE,
    SEARCH_LONGEST,
    Offset,
    PortalRoute,
    contains,
    count_rows,
    db_of,
    money,
    not_found,
    open_programme,
    owner_name,
    pager,
    portal_router,
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
router.include_router(payments.pages)
router.include_router(wires.pages)
router.include_router(deliveries.pages)
router.include_router(pages)

# Included after every other portal router (app.py): an address under /portal/ that no page
# answers gets the portal's own "not found" page, not the API's JSON. /portal/api is a mount
# matched before this, so the operator API keeps its JSON 404.
fallback = portal_router()


@fallback.get("/{rest:path}")
async def no_such_page(rest: str) -> Response:
    return not_found("page")
