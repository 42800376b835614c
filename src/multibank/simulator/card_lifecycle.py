"""The card simulator's lifecycle operations (D26, cards.md §6.2): expire, about to expire and
renew a card now instead of on the programme clock. Sandbox only (`programme-key`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Path, Response

from multibank.api.deps import AppContainer, Db, conflicts
from multibank.api.openapi import not_found
from multibank.api.routing import UnitOfWorkRouter
from multibank.cards import lifecycle
from multibank.cards.models import ManagedCard
from multibank.kernel.errors import NotFound
from multibank.kernel.validation import parse_id
from multibank.programmes.context import Ctx
from multibank.simulator.deps import SimulatorIdempotent, SimulatorProgramme

router = UnitOfWorkRouter(tags=["Simulator"])
CardPath = Annotated[str, Path(pattern=r"^[0-9]+$")]
NOT_FOUND = not_found("no card of that id in this programme (another programme's included)")


async def _ctx(db: Db, programme: SimulatorProgramme, container: AppContainer) -> Ctx:
    return Ctx(db, programme, container.clock.now_ms(programme.clock_offset_ms))


SimCtx = Annotated[Ctx, Depends(_ctx)]


async def _apply(
    ctx: Ctx, card_id: str, action: Callable[[Ctx, ManagedCard], Awaitable[None]]
) -> Response:
    number = parse_id(card_id)
    card = None if number is None else await lifecycle.assigned_card(ctx, number)
    if card is None:
        raise NotFound("Managed card not found")
    await action(ctx, card)
    return Response(status_code=204)


@router.post(
    "/cards/{card_id}/expire",
    operation_id="simulateCardExpire",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
    responses={
        **conflicts("INSTRUMENT_DESTROYED", "INSTRUMENT_NOT_EXPIRABLE"),
        **NOT_FOUND,
    },
)
async def card_expire(card_id: CardPath, ctx: SimCtx) -> Response:
    """The card expires now, as the end of its expiry month would make it: `DESTROYED` with
    reason `EXPIRED`, a state_change `DESTROYED` and an expiries `CARD_EXPIRED` event. A
    renewing card is renewed at expiry instead (`INSTRUMENT_NOT_EXPIRABLE`)."""
    return await _apply(ctx, card_id, lifecycle.simulate_expire)


@router.post(
    "/cards/{card_id}/about_to_expire",
    operation_id="simulateCardAboutToExpire",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
    responses={**conflicts("INSTRUMENT_DESTROYED"), **NOT_FOUND},
)
async def card_about_to_expire(card_id: CardPath, ctx: SimCtx) -> Response:
    """Sends the expiries `CARD_ABOUT_TO_EXPIRE` event now; the programme clock then sends no
    second one for the card's current expiry."""
    return await _apply(ctx, card_id, lifecycle.simulate_about_to_expire)


@router.post(
    "/cards/{card_id}/renew",
    operation_id="simulateCardRenew",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
    responses={
        **conflicts(
            "INSTRUMENT_DESTROYED", "INSTRUMENT_MARKED_LOST_STOLEN", "INSTRUMENT_NOT_RENEWABLE"
        ),
        **NOT_FOUND,
    },
)
async def card_renew(card_id: CardPath, ctx: SimCtx) -> Response:
    """Renews a renewing card now, as its expiry would: same number, `startMmyy` this month,
    `expiryMmyy` moved `expiryPeriodMonths` (36) on, a new CVV (and CVV token), an expiries
    `CARD_RENEWED` event. A `NO_RENEW` card answers `INSTRUMENT_NOT_RENEWABLE`."""
    return await _apply(ctx, card_id, lifecycle.simulate_renew)
