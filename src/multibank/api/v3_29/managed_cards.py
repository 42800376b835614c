"""Managed cards tag (3.29.1 only, D18): create, list, get, update, block, unblock, remove,
spend rules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Path, Query, Response

from multibank.accounts.service import Owner
from multibank.api.deps import (
    STEP_UP_RESPONSES,
    AppContainer,
    CallerIdempotent,
    LoggedIn,
    Session,
    StepUpRequired,
    conflicts,
)
from multibank.api.routing import UnitOfWorkRouter
from multibank.cards import lifecycle, manufacturing, money, repository, service, spend_rules
from multibank.cards.models import ManagedCard
from multibank.cards.schemas import (
    AllLevelSpendRules,
    CardLevelSpendRules,
    CardLevelSpendRulesRead,
    ManagedCardCreate,
    ManagedCardRead,
    ManagedCardsPage,
    ManagedCardUpdate,
)
from multibank.kernel.carddata import CardKeyring
from multibank.kernel.errors import BadRequest
from multibank.kernel.vocabulary import Currency, Tag
from multibank.ledger.models import LedgerAccount
from multibank.programmes.context import Ctx

router = UnitOfWorkRouter(tags=["Managed Cards"])
CardId = Annotated[str, Path(pattern=r"^[0-9]+$")]
# A state, or several joined by commas, or nothing: the official demo app sends
# `state=ACTIVE,BLOCKED` and `state=` (all cards), as the reference accepts (decision 0053).
StateValue = Annotated[
    str,
    Query(pattern="^((ACTIVE|BLOCKED|DESTROYED)(,(ACTIVE|BLOCKED|DESTROYED))*)?$"),
]
BlockedReasonValue = Annotated[str, Query(pattern="^(USER|SYSTEM|LOST)$")]
DestroyedReasonValue = Annotated[str, Query(pattern="^(SYSTEM|USER|LOST|STOLEN|EXPIRED)$")]
ManufacturingValue = Annotated[
    str, Query(pattern="^(REQUESTED|SENT_FOR_FULFILLMENT|DISPATCHED|DELIVERED)$")
]
CREATE_CONFLICTS = (
    "PROFILE_NOT_FOUND",
    "PAYMENT_MODEL_CONSTRAINTS_VIOLATED",
    "PROFILE_INACTIVE",
    "CURRENCY_NOT_SUPPORTED_BY_PROFILE",
    "PROVIDER_NOT_SUPPORTED_BY_PROFILE",
    "OWNER_IDENTITY_NOT_VERIFIED",
    "IDENTITY_KYC_LEVEL_STEPUP_REQUIRED",
    "PARENT_MANAGED_ACCOUNT_NOT_FOUND",
    "PARENT_MANAGED_ACCOUNT_NOT_ACTIVE",
    "WALLETS_NOT_ENABLED",
    "AUTH_FORWARDING_NOT_ENABLED",
)
# The 409s of every spend-rule write (cards.md §3.1 #11 to #13); create adds ALREADY_SET. A
# destroyed card refuses as for its other changes; contradicting rules are SPEND_RULE_INVALID
# (decision 0073).
SPEND_RULE_CONFLICTS = (
    "SPEND_LIMIT_CURRENCY_DIFFERENT_FROM_CARD_CURRENCY",
    "SPEND_LIMIT_NOT_SUPPORTED_FOR_PREPAID_MODE_CARD",
    "SPEND_LIMIT_DUPLICATE_INTERVAL",
    "SPEND_LIMIT_AMOUNT_INVALID",
    "SPEND_RULE_INVALID",
    "INSTRUMENT_DESTROYED",
)
UPDATE_CONFLICTS = (
    "INSTRUMENT_DESTROYED",
    "INSTRUMENT_NOT_PHYSICAL",
    "WALLETS_NOT_ENABLED",
    "AUTH_FORWARDING_NOT_ENABLED",
)


def owner(session: Session) -> Owner:
    return Owner(session.auth.identity_id, session.auth.identity_type)


def card_body(
    keys: CardKeyring,
    card: ManagedCard,
    balance: LedgerAccount | None,
    spent: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The card as 3.32.1 writes it: the number and CVV as tokens of the description's lengths
    (D21a), never in clear."""
    state: dict[str, str] = {"state": card.state}
    if card.blocked_reason:
        state["blockedReason"] = card.blocked_reason
    if card.destroyed_reason:
        state["destroyedReason"] = card.destroyed_reason
    body: dict[str, Any] = {
        "id": str(card.id),
        "profileId": str(card.profile_id),
        "externalHandle": card.external_handle,
        "tag": card.tag,
        "friendlyName": card.friendly_name,
        "currency": card.currency,
        "state": state,
        "type": card.type,
        "cardBrand": card.card_brand,
        "cardNumber": {"value": keys.number_token(card.id)},
        "cvv": {"value": keys.cvv_token(card.id, card.version)},
        "cardNumberFirstSix": card.number_first_six,
        "cardNumberLastFour": card.number_last_four,
        "nameOnCard": card.name_on_card,
        "nameOnCardLine2": card.name_on_card_line2,
        "startMmyy": card.start_mmyy,
        "expiryMmyy": card.expiry_mmyy,
        "cardLevelClassification": card.level,
        "expiryPeriodMonths": card.expiry_period_months,
        "renewalType": "NO_RENEW" if card.renewal_type == "NO_RENEW" else "AUTO_RENEW",
        "creationTimestamp": card.created_at,
        "cardholderMobileNumber": card.cardholder_mobile,
        "billingAddress": card.billing_address,
        "digitalWallets": {"walletsEnabled": False, "pushProvisioningEnabled": False},
        "mode": card.mode,
    }
    if card.mode == service.PREPAID and balance is not None:
        body["balances"] = service.balances_of(balance)
    if card.mode == service.DEBIT:
        body["parentManagedAccountId"] = str(card.parent_account_id)
        # Each spend limit less what was spent in its window (`spent`, by interval); without
        # limits a debit card has the implicit ALWAYS limit of 0 (D22).
        used = spent or {}
        body["availableToSpend"] = [
            {
                "value": {
                    "currency": limit["value"]["currency"],
                    "amount": int(limit["value"]["amount"]) - used.get(limit["interval"], 0),
                },
                "interval": limit["interval"],
            }
            for limit in money.limits_of(card)
        ]
    physical = manufacturing.details(card)
    if physical is not None:
        body["physicalCardDetails"] = physical
    return body


async def card_out(ctx: Ctx, keys: CardKeyring, row: repository.Row) -> dict[str, Any]:
    """`card_body` with a debit card's spend in its current windows read (D22)."""
    card, balance = row
    spent = await money.spent(ctx, card) if card.mode == service.DEBIT else None
    return card_body(keys, card, balance, spent)


# Over 8 parameters: each of the interface's filters is a query parameter of its own.
@router.get(
    "/managed_cards",
    operation_id="managedCardsGet",
    response_model=ManagedCardsPage,
    response_model_exclude_none=True,
    responses=STEP_UP_RESPONSES,
)
async def managed_cards_get(
    session: StepUpRequired,
    container: AppContainer,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int | None, Query(ge=1, le=100)] = None,
    profileId: Annotated[str | None, Query(pattern=r"^[0-9]+$", max_length=19)] = None,
    friendlyName: Annotated[str | None, Query(min_length=1, max_length=50)] = None,
    state: Annotated[list[StateValue] | None, Query()] = None,
    blocked_reason: Annotated[
        list[BlockedReasonValue] | None,
        Query(
            alias="state.blockedReason",
            description="Needs `state=BLOCKED` among the `state` values (400 otherwise); "
            "applies to the blocked cards only.",
        ),
    ] = None,
    destroyed_reason: Annotated[
        list[DestroyedReasonValue] | None,
        Query(
            alias="state.destroyedReason",
            description="Needs `state=DESTROYED` among the `state` values (400 otherwise); "
            "applies to the destroyed cards only.",
        ),
    ] = None,
    currency: Annotated[Currency | None, Query()] = None,
    type: Annotated[str | None, Query(pattern="^(VIRTUAL|PHYSICAL)$")] = None,
    externalHandle: Annotated[str | None, Query(max_length=100)] = None,
    cardNumberFirstSix: Annotated[str | None, Query(pattern=r"^[0-9]{6}$")] = None,
    cardNumberLastFour: Annotated[str | None, Query(pattern=r"^[0-9]{4}$")] = None,
    createdFrom: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    createdTo: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    mode: Annotated[str | None, Query(pattern="^(PREPAID_MODE|DEBIT_MODE)$")] = None,
    tag: Annotated[Tag | None, Query()] = None,
    parentManagedAccountId: Annotated[str | None, Query(pattern=r"^[0-9]+$", max_length=19)] = None,
    manufacturingState: Annotated[list[ManufacturingValue] | None, Query()] = None,
) -> dict[str, Any]:
    """The caller's identity's cards, newest first, filtered (filters combine with AND); repeat
    the key for the array filters (`?state=BLOCKED&state=DESTROYED`; `state` also takes values
    joined by commas, and an empty one filters nothing). `state.blockedReason`
    needs `BLOCKED` among the `state` values and `state.destroyedReason` needs `DESTROYED`
    (400 otherwise); each applies only to the cards in its state. Pages of at most 100."""
    states = [each for value in state or () for each in value.split(",") if each]
    if blocked_reason and "BLOCKED" not in states:
        raise BadRequest("state.blockedReason needs state BLOCKED")
    if destroyed_reason and "DESTROYED" not in states:
        raise BadRequest("state.destroyedReason needs state DESTROYED")
    ids = [int(v) if v and int(v) < 2**63 else None for v in (profileId, parentManagedAccountId)]
    if (profileId and ids[0] is None) or (parentManagedAccountId and ids[1] is None):
        return {"cards": [], "count": 0, "responseCount": 0}
    filters = repository.Filters(
        profile_id=ids[0],
        friendly_name=friendlyName,
        states=states,
        blocked_reasons=blocked_reason or (),
        destroyed_reasons=destroyed_reason or (),
        currency=currency,
        type=type,
        external_handle=externalHandle,
        first_six=cardNumberFirstSix,
        last_four=cardNumberLastFour,
        created_from=createdFrom,
        created_to=createdTo,
        mode=mode,
        tag=tag,
        parent_account_id=ids[1],
        manufacturing_states=manufacturingState or (),
    )
    total, rows = await service.page(session.ctx, owner(session), filters, offset, limit)
    # Expiry and renewal due by the programme clock happen before the answer (D24).
    if await lifecycle.refresh(container.db, container.clock, session.ctx, (c for c, _ in rows)):
        total, rows = await service.page(session.ctx, owner(session), filters, offset, limit)
    keys = container.card_keys()
    return {
        "cards": [await card_out(session.ctx, keys, row) for row in rows],
        "count": total,
        "responseCount": len(rows),
    }


@router.post(
    "/managed_cards",
    operation_id="managedCardCreate",
    response_model=ManagedCardRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses={**conflicts(*CREATE_CONFLICTS), **STEP_UP_RESPONSES},
)
async def managed_card_create(
    body: ManagedCardCreate, session: StepUpRequired, container: AppContainer
) -> dict[str, Any]:
    """A virtual card from the caller's identity type's card profile of the body's `mode`: a
    prepaid card (`currency`, its own balance, starting at 0) or a debit card
    (`parentManagedAccountId`, spending that account; the card takes its currency). The owner's
    due diligence must be approved. `cardNumber.value` and `cvv.value` are tokens."""
    keys = container.card_keys()
    card = await service.create(session.ctx, keys, owner(session), body)
    row = await service.load(session.ctx, owner(session), str(card.id))
    return await card_out(session.ctx, keys, row)


@router.get(
    "/managed_cards/{id}",
    operation_id="managedCardGet",
    response_model=ManagedCardRead,
    response_model_exclude_none=True,
    responses=STEP_UP_RESPONSES,
)
async def managed_card_get(
    id: CardId, session: StepUpRequired, container: AppContainer
) -> dict[str, Any]:
    """One of the caller's identity's cards; another identity's is 404."""
    row = await service.load(session.ctx, owner(session), id)
    if await lifecycle.refresh(container.db, container.clock, session.ctx, [row[0]]):
        row = await service.load(session.ctx, owner(session), id)
    return await card_out(session.ctx, container.card_keys(), row)


@router.patch(
    "/managed_cards/{id}",
    operation_id="managedCardUpdate",
    response_model=ManagedCardRead,
    response_model_exclude_none=True,
    responses={**conflicts(*UPDATE_CONFLICTS), **STEP_UP_RESPONSES},
)
async def managed_card_update(
    id: CardId, body: ManagedCardUpdate, session: StepUpRequired, container: AppContainer
) -> dict[str, Any]:
    """Changes only the fields sent; delivery details are for physical cards."""
    row = await service.update(session.ctx, owner(session), id, body)
    return await card_out(session.ctx, container.card_keys(), row)


@router.post(
    "/managed_cards/{id}/block",
    operation_id="managedCardBlock",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=conflicts(
        "INSTRUMENT_ALREADY_BLOCKED", "INSTRUMENT_DESTROYED", "INSTRUMENT_MARKED_LOST_STOLEN"
    ),
)
async def managed_card_block(id: CardId, session: LoggedIn) -> Response:
    """A block by the user (reason USER), which the user can lift."""
    await service.block(session.ctx, owner(session), id)
    return Response(status_code=204)


@router.post(
    "/managed_cards/{id}/unblock",
    operation_id="managedCardUnblock",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=conflicts(
        "INSTRUMENT_NOT_BLOCKED",
        "INSTRUMENT_DESTROYED",
        "INSTRUMENT_MARKED_LOST_STOLEN",
        "INSTRUMENT_INACTIVE",
    ),
)
async def managed_card_unblock(id: CardId, session: LoggedIn) -> Response:
    """Lifts a USER block; a SYSTEM block (the operator's) answers INSTRUMENT_INACTIVE."""
    await service.unblock(session.ctx, owner(session), id)
    return Response(status_code=204)


@router.post(
    "/managed_cards/{id}/remove",
    operation_id="managedCardRemove",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=conflicts("BALANCE_NOT_ZERO", "INSTRUMENT_ALREADY_REMOVED"),
)
async def managed_card_remove(id: CardId, session: LoggedIn) -> Response:
    """Irreversible (state DESTROYED, reason USER); a prepaid card must hold nothing."""
    await service.remove(session.ctx, owner(session), id)
    return Response(status_code=204)


@router.get(
    "/managed_cards/{id}/spend_rules",
    operation_id="managedCardSpendRulesGet",
    response_model=AllLevelSpendRules,
    response_model_exclude_none=True,
)
async def managed_card_spend_rules_get(id: CardId, session: LoggedIn) -> dict[str, Any]:
    """The card's rules at every level; a card without rules (or destroyed) has empty levels."""
    return await spend_rules.read(session.ctx, owner(session), id)


@router.post(
    "/managed_cards/{id}/spend_rules",
    operation_id="managedCardSpendRulesCreate",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=conflicts(*SPEND_RULE_CONFLICTS, "SPEND_RULE_ALREADY_SET"),
)
async def managed_card_spend_rules_create(
    id: CardId, body: CardLevelSpendRules, session: LoggedIn
) -> Response:
    """Sets the card's rules once (SPEND_RULE_ALREADY_SET after); spend limits are for debit
    cards, in the card's currency, one per interval, at least 0. A blocked card takes rules, a
    destroyed one none (INSTRUMENT_DESTROYED). Rules that contradict each other (a minimum
    above the maximum, a value both allowed and blocked) are SPEND_RULE_INVALID; an unknown
    key is a 400."""
    await spend_rules.create(session.ctx, owner(session), id, body)
    return Response(status_code=204)


@router.patch(
    "/managed_cards/{id}/spend_rules",
    operation_id="managedCardSpendRulesUpdate",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=conflicts(*SPEND_RULE_CONFLICTS),
)
async def managed_card_spend_rules_update(
    id: CardId, body: CardLevelSpendRules, session: LoggedIn
) -> Response:
    """Changes only the rules sent (an empty list clears that list); 404 without rules."""
    await spend_rules.update(session.ctx, owner(session), id, body)
    return Response(status_code=204)


@router.put(
    "/managed_cards/{id}/spend_rules",
    operation_id="managedCardSpendRulesSet",
    response_model=CardLevelSpendRulesRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses=conflicts(*SPEND_RULE_CONFLICTS),
    deprecated=True,
)
async def managed_card_spend_rules_set(
    id: CardId, body: CardLevelSpendRules, session: LoggedIn
) -> dict[str, Any]:
    """Replaces every rule of the card (deprecated in 3.32.1) and answers what is stored."""
    return await spend_rules.replace(session.ctx, owner(session), id, body)


@router.delete(
    "/managed_cards/{id}/spend_rules",
    operation_id="managedCardSpendRulesDelete",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=conflicts("INSTRUMENT_DESTROYED"),
)
async def managed_card_spend_rules_delete(id: CardId, session: LoggedIn) -> Response:
    """Removes the card's rules; 404 when it has none; a destroyed card's are gone already
    (INSTRUMENT_DESTROYED)."""
    await spend_rules.delete(session.ctx, owner(session), id)
    return Response(status_code=204)
