"""A programme's cards (D24, D32): the list, numbers masked, by customer or searched by the last
four digits, the card's name or its owner's; a card's page (its statement, what becomes of its
money, its authorisations); the operator's SYSTEM block; in a sandbox a test purchase, as the
card simulator makes one (D26). Card fees are a form of the programme's page, registered here."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.accounts import repository as accounts_repo
from multibank.cards import money as card_money
from multibank.cards import operator as card_ops
from multibank.cards import repository as card_repository
from multibank.cards.models import ManagedCard
from multibank.kernel.errors import DomainError
from multibank.kernel.validation import parse_id
from multibank.ledger import statements
from multibank.portal import card_pages, payment_detail, readable
from multibank.portal.web.actions import Flash, act, programme_form, show
from multibank.portal.web.common import (
    PAGE,
    SEARCH_LONGEST,
    Offset,
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
)
from multibank.portal.web.forms import Refused, major_amount
from multibank.programmes import service
from multibank.programmes.models import Programme
from multibank.programmes.schemas import CardFeeWrite
from multibank.simulator import cards as card_simulator

pages = portal_router()


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
        spending,
        fund_movements_only=True,
        offset=entries,
        limit=PAGE,
        card_id=card.id,
        transactions=card_repository.statement_transactions(card),
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
