"""Operator API: the card pool of a programme (D31, D32). Included by the programmes router
(portal/router.py), whose admin authentication and `/programmes` prefix it takes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query
from pydantic import BaseModel, Field

from multibank.api.deps import AppContainer, Db, conflicts
from multibank.api.openapi import not_found
from multibank.api.routing import UnitOfWorkRouter
from multibank.cards import pool
from multibank.kernel.errors import NotFound
from multibank.kernel.vocabulary import Currency, DigitsId
from multibank.kernel.wire import StrictBody
from multibank.portal.auditing import AuditedRoute
from multibank.programmes import service
from multibank.programmes.context import Ctx

router = UnitOfWorkRouter(route_class=AuditedRoute, tags=["Card pool"])
IdPath = Annotated[str, Path(pattern=r"^[0-9]{1,19}$")]
POOL_CONFLICTS = (
    "PROFILE_NOT_FOUND",
    "PAYMENT_MODEL_CONSTRAINTS_VIOLATED",
    "PROFILE_INACTIVE",
    "CURRENCY_NOT_SUPPORTED_BY_PROFILE",
    "PROVIDER_NOT_SUPPORTED_BY_PROFILE",
)


async def _ctx(db: Db, programme_id: IdPath, container: AppContainer) -> Ctx:
    number = int(programme_id)
    if number >= 2**63:
        raise NotFound("Programme not found")
    programme = await service.require_programme(db, number)
    return Ctx(db, programme, container.clock.now_ms(programme.clock_offset_ms))


PoolCtx = Annotated[Ctx, Depends(_ctx)]


class PoolCreate(StrictBody):
    profileId: DigitsId = Field(description="A prepaid card profile of the programme.")
    count: int = Field(ge=1, le=pool.MAX_BATCH)
    physical: bool = Field(
        default=False,
        description="Physical cards, already activated (D31): `PHYSICAL`, manufacturing "
        "`DELIVERED`, with a random PIN their owner reads after assign.",
    )
    currency: Currency | None = Field(default=None, description="Default: the profile's first.")


class PoolCardCreated(BaseModel):
    externalReference: str
    activationCode: str


class PoolCreated(BaseModel):
    cards: list[PoolCardCreated]


class PoolCard(BaseModel):
    id: str
    externalReference: str
    profileId: str
    identityType: str
    currency: str
    cardNumberFirstSix: str
    cardNumberLastFour: str
    expiryMmyy: str
    creationTimestamp: int
    activationLocked: bool = Field(
        description="Locked by wrong activation codes (decision 0074): it refuses every code, "
        "the right one included; hand out another card."
    )


class PoolPage(BaseModel):
    unassigned: int = Field(description="How many pool cards wait to be assigned.")
    cards: list[PoolCard]


@router.post(
    "/{programme_id}/card_pool",
    operation_id="cardPoolCreate",
    status_code=201,
    responses={**conflicts(*POOL_CONFLICTS), **not_found("no programme of that id")},
)
async def card_pool_create(body: PoolCreate, ctx: PoolCtx, container: AppContainer) -> PoolCreated:
    """Creates `count` unassigned prepaid cards of a card profile (the identity type is the
    profile's). Each card's `activationCode` is shown in this answer only: hand it out with
    the `externalReference`, which `POST /managed_cards/assign` takes."""
    made = await pool.create_pool(
        ctx, container.card_keys(), body.profileId, body.count, body.physical, body.currency
    )
    return PoolCreated(
        cards=[PoolCardCreated(externalReference=r, activationCode=c) for r, c in made]
    )


@router.get(
    "/{programme_id}/card_pool",
    operation_id="cardPoolGet",
    responses=not_found("no programme of that id"),
)
async def card_pool_get(
    ctx: PoolCtx,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> PoolPage:
    """The unassigned pool cards, newest first, with masked numbers (first six and last four
    digits), and how many there are. Activation codes are never shown again."""
    total, found = await pool.unassigned(ctx, offset, limit)
    return PoolPage(
        unassigned=total,
        cards=[
            PoolCard(
                id=str(c.id),
                externalReference=c.pool_reference or "",
                profileId=str(c.profile_id),
                identityType=c.identity_type,
                currency=c.currency,
                cardNumberFirstSix=c.number_first_six,
                cardNumberLastFour=c.number_last_four,
                expiryMmyy=c.expiry_mmyy,
                creationTimestamp=c.created_at,
                activationLocked=c.activation_failures >= pool.ACTIVATION_TRIES,
            )
            for c in found
        ],
    )
