"""Physical cards (3.29.1 only, D18, D25): upgrade, activate, PIN get and unblock, replace
damaged, report lost or stolen, replace lost or stolen, contactless-limit reset."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Response
from pydantic import BaseModel, StringConstraints

from multibank.api.deps import (
    STEP_UP_RESPONSES,
    AppContainer,
    CallerIdempotent,
    LoggedIn,
    StepUpRequired,
    conflicts,
)
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29.managed_cards import CardId, card_body, owner
from multibank.cards import physical, service
from multibank.cards.schemas import (
    DeliveryAddress,
    DeliveryMethod,
    ManagedCardRead,
    NameOnCardLine2,
)
from multibank.kernel.vocabulary import Wire

router = UnitOfWorkRouter(tags=["Managed Cards"])
ActivationCode = Annotated[str, StringConstraints(pattern=r"^[0-9]+$", min_length=1, max_length=6)]
Reference = Annotated[str, StringConstraints(min_length=1, max_length=50)]


class PinValue(Wire):
    value: Annotated[str, StringConstraints(min_length=4, max_length=24)]


class PhysicalUpgrade(Wire):
    """`productReference` and `carrierType` may be left out (each profile has one, `DEFAULT`);
    `pin.value` is a PIN token from the sandbox's `secure_session/tokenize`, and without it a
    random PIN is drawn."""

    productReference: Reference | None = None
    carrierType: Reference | None = None
    deliveryMethod: DeliveryMethod | None = None
    deliveryAddress: DeliveryAddress
    activationCode: ActivationCode
    pin: PinValue | None = None
    nameOnCardLine2: NameOnCardLine2 | None = None


class ActivationBody(Wire):
    activationCode: ActivationCode


class PinRead(BaseModel):
    pin: dict[str, str]


@router.post(
    "/managed_cards/{id}/physical",
    operation_id="managedCardPhysicalUpgrade",
    response_model=ManagedCardRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses={**conflicts(*physical.UPGRADE_CONFLICTS), **STEP_UP_RESPONSES},
)
async def physical_upgrade(
    id: CardId, body: PhysicalUpgrade, session: StepUpRequired, container: AppContainer
) -> dict[str, Any]:
    """Orders the card in plastic: `type` stays VIRTUAL and `physicalCardDetails` says
    REQUESTED, pending activation; manufacturing moves on with the programme clock. A PIN token
    that is not known answers 404."""
    keys = container.card_keys()
    await physical.upgrade(
        session.ctx,
        keys,
        owner(session),
        id,
        product_reference=body.productReference,
        carrier_type=body.carrierType,
        delivery_method=body.deliveryMethod,
        delivery_address=body.deliveryAddress.model_dump(exclude_none=True),
        activation_code=body.activationCode,
        pin_token=body.pin.value if body.pin else None,
        name_on_card_line2=body.nameOnCardLine2,
    )
    return card_body(keys, *await service.load(session.ctx, owner(session), id))


@router.post(
    "/managed_cards/{id}/physical/activate",
    operation_id="managedCardPhysicalActivate",
    response_model=ManagedCardRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses={**conflicts(*physical.ACTIVATE_CONFLICTS), **STEP_UP_RESPONSES},
)
async def physical_activate(
    id: CardId, body: ActivationBody, session: StepUpRequired, container: AppContainer
) -> dict[str, Any]:
    """With the upgrade's (or replacement's) activation code, in any manufacturing state: the
    card becomes PHYSICAL and DELIVERED."""
    keys = container.card_keys()
    await physical.activate(session.ctx, keys, owner(session), id, body.activationCode)
    return card_body(keys, *await service.load(session.ctx, owner(session), id))


@router.get(
    "/managed_cards/{id}/physical/pin",
    operation_id="managedCardPhysicalPinGet",
    response_model=PinRead,
    responses={**conflicts(*physical.PIN_GET_CONFLICTS), **STEP_UP_RESPONSES},
)
async def physical_pin_get(
    id: CardId, session: StepUpRequired, container: AppContainer
) -> dict[str, Any]:
    """The PIN as a token (`pin.value`); the sandbox detokenises it for the card's owner."""
    token = await physical.pin_token(session.ctx, container.card_keys(), owner(session), id)
    return {"pin": {"value": token}}


@router.patch(
    "/managed_cards/{id}/physical/pin/unblock",
    operation_id="managedCardPhysicalPinUnBlock",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=conflicts(*physical.PIN_UNBLOCK_CONFLICTS),
)
async def physical_pin_unblock(id: CardId, session: LoggedIn) -> Response:
    """Clears `pinBlocked` (set by too many wrong PINs)."""
    await physical.pin_unblock(session.ctx, owner(session), id)
    return Response(status_code=204)


@router.post(
    "/managed_cards/{id}/physical/replace_damaged",
    operation_id="managedCardPhysicalReplaceDamaged",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses={**conflicts(*physical.DAMAGED_CONFLICTS), **STEP_UP_RESPONSES},
)
async def physical_replace_damaged(
    id: CardId, body: ActivationBody, session: StepUpRequired, container: AppContainer
) -> Response:
    """The same card (id and number) is made again, pending activation with the new code; it
    keeps working online meanwhile."""
    await physical.replace_damaged(
        session.ctx, container.card_keys(), owner(session), id, body.activationCode
    )
    return Response(status_code=204)


@router.post(
    "/managed_cards/{id}/physical/report_lost",
    operation_id="managedCardPhysicalReportLost",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=conflicts(*physical.LOST_CONFLICTS),
)
async def physical_report_lost(id: CardId, session: LoggedIn) -> Response:
    """Blocks the card (reason LOST; a card blocked already keeps its reason); activated or not."""
    await physical.report_lost(session.ctx, owner(session), id)
    return Response(status_code=204)


@router.post(
    "/managed_cards/{id}/physical/report_stolen",
    operation_id="managedCardPhysicalReportStolen",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=conflicts(*physical.STOLEN_CONFLICTS),
)
async def physical_report_stolen(id: CardId, session: LoggedIn) -> Response:
    """Destroys an activated card (reason STOLEN); its money waits for the replacement."""
    await physical.report_stolen(session.ctx, owner(session), id)
    return Response(status_code=204)


@router.post(
    "/managed_cards/{id}/physical/replace_lost_stolen",
    operation_id="managedCardPhysicalReplaceLostOrStolen",
    response_model=ManagedCardRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses={**conflicts(*physical.REPLACE_CONFLICTS), **STEP_UP_RESPONSES},
)
async def physical_replace_lost_stolen(
    id: CardId, body: ActivationBody, session: StepUpRequired, container: AppContainer
) -> dict[str, Any]:
    """A new card (new id and number, same mode, spend rules and PIN) pending activation with
    the code sent; a prepaid card's available balance moves to it. Answers the old card, now
    DESTROYED, whose `physicalCardDetails.replacement.replacementId` is the new card's id."""
    keys = container.card_keys()
    row = await physical.replace_lost_stolen(
        session.ctx, keys, owner(session), id, body.activationCode
    )
    return card_body(keys, *row)


@router.post(
    "/managed_cards/{id}/physical/contactless_limit/reset",
    operation_id="managedCardPhysicalContactlessLimitReset",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=conflicts(*physical.CONTACTLESS_CONFLICTS),
)
async def physical_contactless_reset(id: CardId, session: LoggedIn) -> Response:
    """Only wearable cards have a contactless limit; the sandbox makes none, so an active
    physical card answers PHYSICAL_CARD_TYPE_NOT_SUPPORTED."""
    await physical.contactless_reset(session.ctx, owner(session), id)
    return Response(status_code=204)
