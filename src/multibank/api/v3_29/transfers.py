"""Transfers tag (3.29.1, D12): create, list and get transfers between two instruments of the
logged-in identity. 3.1.0 has none (its base URL answers 404)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Query, Request

from multibank.api.deps import conflicts
from multibank.api.openapi import not_found
from multibank.api.query_filters import QueryFilters
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29.payments_common import (
    PaymentOperations,
    add_payment_operations,
    instrument_filter,
    instrument_object,
    known_states,
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

router = UnitOfWorkRouter(tags=["Transfers"])
Id = Annotated[str, Query(pattern=r"^[0-9]+$", max_length=19)]
CREATE_CONFLICTS = (
    "PROFILE_INACTIVE",
    "SOURCE_NOT_FOUND",
    "SOURCE_CANNOT_BE_DEBIT_MODE_CARD",
    "DESTINATION_NOT_FOUND",
    "DESTINATION_CANNOT_BE_DEBIT_MODE_CARD",
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


TRANSFER_QUERY = QueryFilters(
    instrument_object(
        "instrumentId",
        InstrumentType,
        "The transfers from or to an instrument: `instrumentId[type]`, with `instrumentId[id]` "
        "for one instrument (an id needs its type: without it the answer is 400; the type "
        "alone keeps the transfers from or to an instrument of that type).",
    )
)


def transfer_filters_of(states: tuple[str, ...]) -> Callable[..., Awaitable[repository.Filters]]:
    """The list's filters, for a version whose transfers have `states`."""

    async def transfer_filters(
        request: Request,
        profileId: Id | None = None,
        state: Annotated[list[str] | None, Query(max_length=20)] = None,
        createdFrom: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
        createdTo: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
        tag: Annotated[Tag | None, Query()] = None,
    ) -> repository.Filters:
        objects = TRANSFER_QUERY.read(request)
        return repository.Filters(
            profile_id=profile_filter(profileId),
            instrument=instrument_filter(objects.get("instrumentId"), "instrumentId"),
            states=known_states(state, states),
            created_from=createdFrom,
            created_to=createdTo,
            tag=tag,
        )

    return transfer_filters


add_payment_operations(
    router,
    PaymentOperations(
        kind=TRANSFER,
        path="/transfers",
        key="transfer",
        prefix="transfer",
        what="transfer",
        body=transfer_body,
        read_model=TransferRead,
        page_model=TransfersPage,
        create_model=TransferCreate,
        create=service.create_transfer,
        create_doc="""Moves `destinationAmount` from `source` to `destination`, two instruments
        of the logged-in identity (accounts or prepaid cards) in the same currency; a debit
        card holds no money and is refused. The source also pays the transfer
        profile's fee in that currency. Answers the transfer, `COMPLETED`: the money has
        moved.""",
        create_responses={
            **conflicts(*CREATE_CONFLICTS),
            **not_found("no transfer profile of the programme has this profileId"),
        },
        filters=transfer_filters_of(TRANSFER_STATES),
        query=TRANSFER_QUERY,
        list_doc="""The logged-in identity's transfers, newest first, in pages of at most 100;
        `instrumentId[id]` with `instrumentId[type]` (or `instrumentId.id` with
        `instrumentId.type`) keeps those from or to that instrument. A query key shaped like a
        filter that this list does not have (`instrumentId[foo]`, `foo[bar]`, `foo.bar`) is a
        400, never ignored.""",
        challenges=False,
    ),
)
