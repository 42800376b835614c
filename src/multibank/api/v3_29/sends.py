"""Sends tag (3.29.1, D12, D13): money to an instrument of another identity of the programme,
confirmed by SCA unless the programme turns it off or the low-value exemption applies."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Query, Request

from multibank.api.deps import conflicts
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
from multibank.api.v3_29.transfers import transfer_body
from multibank.kernel.vocabulary import Tag
from multibank.payments import repository, service
from multibank.payments.models import SEND
from multibank.payments.schemas import (
    SEND_STATES,
    InstrumentType,
    SendRead,
    SendsPage,
    TransferCreate,
)

router = UnitOfWorkRouter(tags=["Sends"])
Id = Annotated[str, Query(pattern=r"^[0-9]+$", max_length=19)]
CREATE_CONFLICTS = (
    "PROFILE_NOT_FOUND",
    "PROFILE_INACTIVE",
    "SOURCE_NOT_FOUND",
    "SOURCE_CANNOT_BE_DEBIT_MODE_CARD",
    "DESTINATION_NOT_FOUND",
    "DESTINATION_CANNOT_BE_DEBIT_MODE_CARD",
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


SEND_QUERY = QueryFilters(
    instrument_object(
        "source",
        InstrumentType,
        "The sends from an instrument: `source[type]`, with `source[id]` for one instrument "
        "(an id needs its type: without it the answer is 400; the type alone keeps the sends "
        "from an instrument of that type).",
    )
)


def send_filters_of(states: tuple[str, ...]) -> Callable[..., Awaitable[repository.Filters]]:
    """The list's filters, for a version whose sends have `states`."""

    async def send_filters(
        request: Request,
        profileId: Id | None = None,
        state: Annotated[list[str] | None, Query(max_length=20)] = None,
        createdFrom: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
        createdTo: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
        tag: Annotated[Tag | None, Query()] = None,
    ) -> repository.Filters:
        objects = SEND_QUERY.read(request)
        return repository.Filters(
            profile_id=profile_filter(profileId),
            source=instrument_filter(objects.get("source"), "source"),
            states=known_states(state, states),
            created_from=createdFrom,
            created_to=createdTo,
            tag=tag,
        )

    return send_filters


add_payment_operations(
    router,
    PaymentOperations(
        kind=SEND,
        path="/sends",
        key="send",
        prefix="send",
        what="send",
        body=transfer_body,  # a send has the transfer's shape
        read_model=SendRead,
        page_model=SendsPage,
        create_model=TransferCreate,
        create=service.create_send,
        create_doc="""Sends `destinationAmount` from the caller's `source` to another identity's
        `destination` in the same currency (accounts or prepaid cards; a debit card holds no
        money and is refused); the source also pays the send profile's fee.
        `COMPLETED` when SCA does not apply; otherwise `PENDING`, amount + fee held, until a
        challenge on it is verified (5 minutes).""",
        create_responses=conflicts(*CREATE_CONFLICTS),
        filters=send_filters_of(SEND_STATES),
        query=SEND_QUERY,
        list_doc="""The logged-in identity's sends, newest first, in pages of at most 100;
        `source[id]` (or `source.id`) needs `source[type]` (or `source.type`). A query key
        shaped like a filter that this list does not have (`source[foo]`, `foo[bar]`,
        `foo.bar`) is a 400, never ignored.""",
        challenges=True,
    ),
)
