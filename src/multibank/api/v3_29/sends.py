"""Sends tag (3.29.1, D12, D13): money to an instrument of another identity of the programme,
confirmed by SCA unless the programme turns it off or the low-value exemption applies."""

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
from multibank.api.routing import UnitOfWorkRoute
from multibank.api.v3_29.payments_common import (
    PaymentId,
    add_challenges,
    instrument_filter,
    known_states,
    owner,
    page_body,
    profile_filter,
)
from multibank.kernel.vocabulary import Tag
from multibank.payments import repository, service
from multibank.payments.models import SEND, Payment
from multibank.payments.schemas import (
    SEND_STATES,
    InstrumentType,
    SendRead,
    SendsPage,
    TransferCreate,
)

router = APIRouter(tags=["Sends"], route_class=UnitOfWorkRoute)
Id = Annotated[str, Query(pattern=r"^[0-9]+$", max_length=19)]
CREATE_CONFLICTS = (
    "PROFILE_NOT_FOUND",
    "PROFILE_INACTIVE",
    "SOURCE_NOT_FOUND",
    "DESTINATION_NOT_FOUND",
    "DESTINATION_BELONGS_TO_SAME_IDENTITY",
    "SOURCE_AND_DESTINATION_MUST_BE_IN_SAME_PROGRAMME",
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


def send_body(p: Payment) -> dict[str, Any]:
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
    "/sends",
    operation_id="sendCreate",
    response_model=SendRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses=conflicts(*CREATE_CONFLICTS),
)
async def send_create(body: TransferCreate, session: LoggedIn) -> dict[str, Any]:
    """Sends `destinationAmount` from the caller's `source` to another identity's
    `destination` in the same currency; the source also pays the send profile's fee.
    `COMPLETED` when SCA does not apply; otherwise `PENDING`, amount + fee held, until a
    challenge on it is verified (5 minutes)."""
    return send_body(await service.create_send(session.ctx, owner(session), body))


@router.get(
    "/sends",
    operation_id="sendsGet",
    response_model=SendsPage,
    response_model_exclude_none=True,
    responses=STEP_UP_RESPONSES,
)
async def sends_get(
    session: StepUpRequired,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    profileId: Id | None = None,
    source_id: Annotated[str | None, Query(alias="source.id", pattern=r"^[0-9]+$")] = None,
    source_type: Annotated[InstrumentType | None, Query(alias="source.type")] = None,
    state: Annotated[list[str] | None, Query(max_length=20)] = None,
    createdFrom: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    createdTo: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    tag: Annotated[Tag | None, Query()] = None,
) -> dict[str, Any]:
    """The logged-in identity's sends, newest first, in pages of at most 100."""
    filters = repository.Filters(
        profile_id=profile_filter(profileId),
        source=instrument_filter(source_type, source_id, "source"),
        states=known_states(state, SEND_STATES),
        created_from=createdFrom,
        created_to=createdTo,
        tag=tag,
    )
    total, rows = await service.page(session.ctx, owner(session), SEND, filters, offset, limit)
    return page_body("send", total, [send_body(p) for p in rows])


@router.get(
    "/sends/{id}",
    operation_id="sendGet",
    response_model=SendRead,
    response_model_exclude_none=True,
    responses=STEP_UP_RESPONSES,
)
async def send_get(id: PaymentId, session: StepUpRequired) -> dict[str, Any]:
    """One of the logged-in identity's sends; another identity's is 404."""
    return send_body(await service.load(session.ctx, owner(session), SEND, id))


add_challenges(router, "/sends", SEND, "send", "send")
