"""`POST /simulate/api/cards/{card_id}/pin_block` (D26): blocks the PIN of a physical, activated
card as three wrong PINs at a terminal would. Sandbox only."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Response
from sqlalchemy import select

from multibank.api.deps import AppContainer, Db, conflicts
from multibank.api.routing import UnitOfWorkRouter
from multibank.cards import physical
from multibank.cards.models import ManagedCard
from multibank.kernel.errors import NotFound
from multibank.kernel.validation import parse_id
from multibank.programmes.context import Ctx
from multibank.simulator.deps import SimulatorIdempotent, SimulatorProgramme

router = UnitOfWorkRouter(tags=["Simulator"])
CardPath = Annotated[str, Path(pattern=r"^[0-9]+$")]


async def _ctx(db: Db, programme: SimulatorProgramme, container: AppContainer) -> Ctx:
    return Ctx(db, programme, container.clock.now_ms(programme.clock_offset_ms))


@router.post(
    "/cards/{card_id}/pin_block",
    operation_id="simulateCardPinBlock",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
    responses=conflicts(*physical.PIN_UNBLOCK_CONFLICTS),
)
async def pin_block(card_id: CardPath, ctx: Annotated[Ctx, Depends(_ctx)]) -> Response:
    """`pinBlocked` turns true; a card of another programme, or none, is 404."""
    number = parse_id(card_id)
    card = None
    if number is not None:
        stmt = (
            select(ManagedCard)
            .where(ManagedCard.id == number, ManagedCard.programme_id == ctx.programme.id)
            .with_for_update()
        )
        card = (await ctx.db.execute(stmt)).scalar_one_or_none()
    if card is None:
        raise NotFound("Managed card not found")
    await physical.pin_block(ctx, card)
    return Response(status_code=204)
