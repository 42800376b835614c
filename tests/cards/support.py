"""What the card service tests share: a programme that records webhook events, the card's
events as written, and the balances of the ledger accounts a card step moves."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.cards import money
from multibank.cards.authorisations import CardAuthorisation
from multibank.cards.models import ManagedCard
from multibank.container import Container
from multibank.ledger.models import LedgerAccount
from multibank.programmes.context import Ctx
from multibank.webhooks.models import WebhookEvent
from tests import domain_factories as make

# Events are recorded only for a programme with a webhook URL; the tests' sessions are rolled
# back, so none is ever delivered.
HOOKS = "http://127.0.0.1:9/hooks"
MERCHANT_ID = "123456789"
FEE = 10  # a new programme's purchase fee in every currency (D19)
DAY = 86_400_000


async def programme(db: AsyncSession, container: Container) -> Ctx:
    return await make.new_programme(db, container, webhookUrl=HOOKS)


def attempt(amount: int, currency: str = "EUR", **over: Any) -> money.Attempt:
    """An online purchase attempt from one merchant (its id fixed, so attempts compare)."""
    fields: dict[str, Any] = {"merchant_name": "Amazon IT", "merchant_id": MERCHANT_ID}
    fields.update(over)
    return money.Attempt(currency=currency, amount=amount, **fields)


async def events(ctx: Ctx, card: ManagedCard) -> list[tuple[str, str, dict[str, Any]]]:
    """The card's webhook events as written, oldest first: (path, event type, payload)."""
    stmt = (
        select(WebhookEvent)
        .where(
            WebhookEvent.programme_id == ctx.programme.id,
            WebhookEvent.resource == f"managed_cards:{card.id}",
        )
        .order_by(WebhookEvent.id)
    )
    return [
        (row.path, row.event_type, json.loads(row.payload))
        for row in (await ctx.db.execute(stmt)).scalars()
    ]


async def last_event(ctx: Ctx, card: ManagedCard) -> dict[str, Any]:
    found = await events(ctx, card)
    assert found, "no event"
    return found[-1][2]


async def book(ctx: Ctx, card: ManagedCard) -> tuple[int, int]:
    """(available, actual) of the card's spending account's reserved book."""
    found = await money.reserved_book(ctx, money.spending_account(card), card.currency)
    return await make.balances(ctx, found)


async def scheme(ctx: Ctx, currency: str = "EUR") -> tuple[int, int]:
    """The programme's card scheme account in `currency` (available, actual), all shards."""
    row = (
        await ctx.db.execute(
            select(
                func.coalesce(func.sum(LedgerAccount.available), 0),
                func.coalesce(func.sum(LedgerAccount.actual), 0),
            ).where(
                LedgerAccount.programme_id == ctx.programme.id,
                LedgerAccount.kind == money.CARD_SCHEME,
                LedgerAccount.currency == currency,
            )
        )
    ).one()
    return int(row[0]), int(row[1])


async def authorisation(ctx: Ctx, authorisation_id: int | None) -> CardAuthorisation:
    assert authorisation_id is not None
    found = await ctx.db.scalar(
        select(CardAuthorisation)
        .where(CardAuthorisation.id == authorisation_id)
        .execution_options(populate_existing=True)
    )
    assert found is not None
    return found
