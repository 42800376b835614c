"""Transfers tag (3.29.1, D12): create, list and get transfers between two instruments of the
logged-in identity. 3.1.0 has none (its base URL answers 404)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from multibank.api.deps import (
    STEP_UP_RESPONSES,
    CallerIdempotent,
    LoggedIn,
    StepUpRequired,
    conflicts,
)
from multibank.api.openapi import not_found
from multibank.api.routing import UnitOfWorkRoute
from multibank.api.v3_29.payments_common import (
    PaymentId,
    instrument_filter,
    known_states,
    owner,
    profile_filter,
)
from multibank.kernel.vocabulary import Tag
from multibank.payments import repository, service
from multibank.payments.models import TRANSFER, Payment
from multibank.payments.schemas import (
    TRANSFER_STATES,
    InstrumentType,
    TransferCreate,
    TransferRead,
    TransfersPage,
)

router = APIRouter(tags=["Transfers"], route_class=UnitOfWorkRoute)
Id = Annotated[str, Query(pattern=r"^[0-9]+$", max_length=19)]
CREATE_CONFLICTS = (
    "PROFILE_INACTIVE",
    "SOURCE_NOT_FOUND",
    "DESTINATION_NOT_FOUND",
    "SOURCE_AND_DESTINATION_MUST_BE_DIFFERENT",
    "SOURCE_INSTRUMENT_BLOCKED",
    "SOURCE_INSTRUMENT_DESTROYED",
    "DESTINATION_INSTRUMENT_BLOCKED",
    "DESTINATION_INSTRUMENT_DESTROYED",
    "INSTRUMENT_DENIED_TRANSACTION",
    "CURRENCY_MISMATCH",
    "FEE_NOT_CONFIGURED_FOR_CURRENCY",
    "AMOUNT_INVALID",
    "FUNDS_INSUFFICIENT",
)


def transfer_body(p: Payment) -> dict[str, Any]:
    return {
        "id": str(p.id),
        "profileId": str(p.profile_id),
        "tag": p.tag,
        "source": {"type": p.source_type, "id": str(p.source_id)},
        "destination": {"type": p.destination_type, "id": str(p.destination_id)},
        "destinationAmount": {"currency": p.currency, "amount": p.amount},
        "state": p.state,
        "creationTimestamp": p.created_at,
    }


@router.post(
    "/transfers",
    operation_id="transferCreate",
    response_model=TransferRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses={
        **conflicts(*CREATE_CONFLICTS),
        **not_found("no transfer profile of the programme has this profileId"),
    },
)
async def transfer_create(body: TransferCreate, session: LoggedIn) -> dict[str, Any]:
    """Moves `destinationAmount` from `source` to `destination`, two instruments of the
    logged-in identity in the same currency. The source also pays the transfer profile's fee in
    that currency. Answers the transfer, `COMPLETED`: the money has moved."""
    return transfer_body(await service.create_transfer(session.ctx, owner(session), body))


@router.get(
    "/transfers",
    operation_id="transfersGet",
    response_model=TransfersPage,
    response_model_exclude_none=True,
    responses=STEP_UP_RESPONSES,
)
async def transfers_get(
    session: StepUpRequired,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    profileId: Id | None = None,
    instrument_id: Annotated[
        str | None, Query(alias="instrumentId.id", pattern=r"^[0-9]+$")
    ] = None,
    instrument_type: Annotated[InstrumentType | None, Query(alias="instrumentId.type")] = None,
    state: Annotated[list[str] | None, Query(max_length=20)] = None,
    createdFrom: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    createdTo: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    tag: Annotated[Tag | None, Query()] = None,
) -> dict[str, Any]:
    """The logged-in identity's transfers, newest first, in pages of at most 100;
    `instrumentId.id` with `instrumentId.type` keeps those from or to that instrument."""
    filters = repository.Filters(
        profile_id=profile_filter(profileId),
        instrument=instrument_filter(instrument_type, instrument_id, "instrumentId"),
        states=known_states(state, TRANSFER_STATES),
        created_from=createdFrom,
        created_to=createdTo,
        tag=tag,
    )
    total, rows = await service.page(session.ctx, owner(session), TRANSFER, filters, offset, limit)
    return {
        "transfer": [transfer_body(p) for p in rows],
        "count": total,
        "responseCount": len(rows),
    }


@router.get(
    "/transfers/{id}",
    operation_id="transferGet",
    response_model=TransferRead,
    response_model_exclude_none=True,
    responses=STEP_UP_RESPONSES,
)
async def transfer_get(id: PaymentId, session: StepUpRequired) -> dict[str, Any]:
    """One of the logged-in identity's transfers; another identity's is 404."""
    return transfer_body(await service.load(session.ctx, owner(session), TRANSFER, id))
