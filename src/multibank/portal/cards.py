"""Operator API for cards (D24, D32): card profiles, card fees, the programme's cards with
masked numbers, SYSTEM block and unblock, each card's authorisations. Admin-authenticated as the
rest of the operator API; a card of another programme answers 404."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Query, Response
from pydantic import BaseModel

from multibank.api.deps import Db, conflicts
from multibank.api.openapi import not_found
from multibank.api.routing import UnitOfWorkRouter
from multibank.cards import operator
from multibank.portal.auditing import AuditedRoute
from multibank.portal.router import (
    THROTTLED,
    IdPath,
    PortalCtx,
    ProgrammePath,
    int_id,
    require_admin,
)
from multibank.programmes import service
from multibank.programmes.schemas import CardFeesRead, CardFeeWrite

router = UnitOfWorkRouter(
    prefix="/programmes",
    tags=["Cards"],
    route_class=AuditedRoute,
    dependencies=[Depends(require_admin)],
    responses=THROTTLED,
)
CARD_NOT_FOUND = not_found("no managed card of that id in this programme")
StateValue = Annotated[str, Query(pattern="^(ACTIVE|BLOCKED|DESTROYED)$")]


class CardProfileRead(BaseModel):
    id: str
    kind: str
    identityType: str
    mode: str
    currencies: list[str]
    active: bool
    cardBrand: str
    bin: str
    expiryPeriodMonths: int
    renewalType: str
    authorisationExpiryDays: int
    spendRules: dict[str, Any]


class CardIdentity(BaseModel):
    type: str
    id: str


class CardBalances(BaseModel):
    availableBalance: int
    actualBalance: int


class OperatorCardRead(BaseModel):
    """A card as the operator sees it: never more of the number than its first six and last four
    digits (`maskedCardNumber`: first six, six asterisks, last four)."""

    id: str
    # None while the card waits unassigned in the card pool.
    identity: CardIdentity | None
    profileId: str
    mode: str
    type: str
    cardBrand: str
    currency: str
    friendlyName: str
    maskedCardNumber: str
    cardNumberFirstSix: str
    cardNumberLastFour: str
    nameOnCard: str
    state: dict[str, str]
    startMmyy: str
    expiryMmyy: str
    renewalType: str
    creationTimestamp: int
    parentManagedAccountId: str | None = None
    poolReference: str | None = None
    manufacturingState: str | None = None
    # The money the card spends: a prepaid card's own, a debit card's parent account's.
    balances: CardBalances | None = None


class OperatorCardsPage(BaseModel):
    cards: list[OperatorCardRead]
    count: int


class AuthorisationStep(BaseModel):
    id: str
    type: str
    state: str
    timestamp: int


class AuthorisationRead(BaseModel):
    id: str
    state: str
    timestamp: int
    merchantName: str | None = None
    merchantCategoryCode: str | None = None
    merchantId: str | None = None
    merchantTerminalCountry: str | None = None
    merchantTransactionType: str | None = None
    authorisationCode: str | None = None
    transactionAmount: dict[str, Any] | None = None
    steps: list[AuthorisationStep]


class AuthorisationsPage(BaseModel):
    authorisations: list[AuthorisationRead]
    count: int


@router.get("/{programme_id}/card_profiles", operation_id="cardProfilesList")
async def list_card_profiles(programme: ProgrammePath, db: Db) -> list[CardProfileRead]:
    """The four card profiles (one per identity type and mode) and what each fixes for its
    cards. `active`, `currencies` and `spendRules` change through
    `PATCH …/profiles/{profile_id}`."""
    return [CardProfileRead(**p) for p in await operator.card_profiles(db, programme)]


@router.get("/{programme_id}/card_fees", operation_id="cardFeesGet")
async def get_card_fees(programme: ProgrammePath, db: Db) -> CardFeesRead:
    """What a purchase, a refund and an ATM withdrawal cost the cardholder, per currency, in
    minor units (charged at settlement)."""
    return await service.card_fees_of(db, programme)


@router.put(
    "/{programme_id}/card_fees",
    operation_id="cardFeesUpdate",
    responses=conflicts("CURRENCY_NOT_SUPPORTED_BY_PROFILE"),
)
async def put_card_fees(body: CardFeeWrite, programme: ProgrammePath, db: Db) -> CardFeesRead:
    """Changes the fees named, in the currencies named; the others stay. A currency that is not
    the programme's changes nothing (`CURRENCY_NOT_SUPPORTED_BY_PROFILE`)."""
    return await service.set_card_fees(db, programme, body.model_dump(exclude_none=True))


@router.get("/{programme_id}/managed_cards", operation_id="operatorCardsList")
async def list_cards(
    programme: ProgrammePath,
    db: Db,
    identityId: Annotated[str | None, Query(pattern=r"^[0-9]{1,19}$")] = None,
    state: Annotated[list[StateValue] | None, Query()] = None,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> OperatorCardsPage:
    """The programme's cards, or one identity's (`identityId`: a corporate or consumer id),
    newest first, with their numbers masked."""
    identity = None if identityId is None else int(identityId)
    if identity is not None and identity >= 2**63:
        return OperatorCardsPage(cards=[], count=0)
    total, rows = await operator.page(db, programme.id, identity, state or [], offset, limit)
    return OperatorCardsPage(
        cards=[OperatorCardRead(**operator.card_view(c, b)) for c, b in rows], count=total
    )


@router.get(
    "/{programme_id}/managed_cards/{card_id}",
    operation_id="operatorCardGet",
    responses=CARD_NOT_FOUND,
)
async def get_card(card_id: IdPath, programme: ProgrammePath, db: Db) -> OperatorCardRead:
    card, balance = await operator.get(db, programme.id, int_id(card_id, "Managed card"))
    return OperatorCardRead(**operator.card_view(card, balance))


@router.get(
    "/{programme_id}/managed_cards/{card_id}/authorisations",
    operation_id="operatorCardAuthorisations",
    responses=CARD_NOT_FOUND,
)
async def card_authorisations(
    card_id: IdPath,
    programme: ProgrammePath,
    db: Db,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> AuthorisationsPage:
    """The card's authorisations, newest first: `state` PENDING while the hold is open, then
    COMPLETED (settled), REVERSED or EXPIRED; `steps` the later steps that name it."""
    card, _ = await operator.get(db, programme.id, int_id(card_id, "Managed card"))
    total, found = await operator.authorisations(db, programme.id, card.id, offset, limit)
    return AuthorisationsPage(authorisations=[AuthorisationRead(**a) for a in found], count=total)


@router.post(
    "/{programme_id}/managed_cards/{card_id}/block",
    operation_id="managedCardSystemBlock",
    status_code=204,
    response_class=Response,
    responses={
        **conflicts(
            "INSTRUMENT_MARKED_LOST_STOLEN", "INSTRUMENT_DESTROYED", "INSTRUMENT_ALREADY_BLOCKED"
        ),
        **CARD_NOT_FOUND,
    },
)
async def system_block(card_id: IdPath, ctx: PortalCtx) -> Response:
    """Blocks a card with reason SYSTEM, which its users cannot lift (their unblock answers
    409 INSTRUMENT_INACTIVE). A card its user blocked takes the SYSTEM reason."""
    card, _ = await operator.get(
        ctx.db, ctx.programme.id, int_id(card_id, "Managed card"), for_update=True
    )
    await operator.system_block(ctx, card)
    return Response(status_code=204)


@router.post(
    "/{programme_id}/managed_cards/{card_id}/unblock",
    operation_id="managedCardSystemUnblock",
    status_code=204,
    response_class=Response,
    responses={
        **conflicts(
            "INSTRUMENT_MARKED_LOST_STOLEN", "INSTRUMENT_DESTROYED", "INSTRUMENT_NOT_BLOCKED"
        ),
        **CARD_NOT_FOUND,
    },
)
async def system_unblock(card_id: IdPath, ctx: PortalCtx) -> Response:
    """Lifts a SYSTEM block: the card is ACTIVE again. A card blocked by its user only is not
    the operator's to unblock (INSTRUMENT_NOT_BLOCKED)."""
    card, _ = await operator.get(
        ctx.db, ctx.programme.id, int_id(card_id, "Managed card"), for_update=True
    )
    await operator.system_unblock(ctx, card)
    return Response(status_code=204)
