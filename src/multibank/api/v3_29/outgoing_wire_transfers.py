"""Outgoing Wire Transfers tag (3.29.1, D12 to D14): from a managed account with an IBAN to an
external beneficiary by SEPA (EUR) or Faster Payments (GBP), confirmed by SCA, then processed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

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
from multibank.kernel.vocabulary import Tag
from multibank.payments import owt, repository
from multibank.payments.models import OWT, Payment
from multibank.payments.schemas import (
    OWT_STATES,
    InstrumentType,
    OwtCreate,
    OwtPage,
    OwtRead,
)

router = UnitOfWorkRouter(tags=["Outgoing Wire Transfers"])
Id = Annotated[str, Query(pattern=r"^[0-9]+$", max_length=19)]
CREATE_CONFLICTS = (
    "PROFILE_NOT_FOUND",
    "PROFILE_INACTIVE",
    "SOURCE_NOT_FOUND",
    "IBAN_UPGRADE_REQUIRED",
    "CURRENCY_MISMATCH",
    "INSTRUMENT_DENIED_TRANSACTION",
    "FEE_NOT_CONFIGURED_FOR_CURRENCY",
    "SOURCE_INSTRUMENT_BLOCKED",
    "SOURCE_INSTRUMENT_DESTROYED",
    "AMOUNT_INVALID",
    "FUNDS_INSUFFICIENT",
)


def owt_body(p: Payment) -> dict[str, Any]:
    return {
        "id": str(p.id),
        "profileId": str(p.profile_id),
        "tag": p.tag,
        "sourceInstrument": {"type": p.source_type, "id": str(p.source_id)},
        "transferAmount": {"currency": p.currency, "amount": p.amount},
        "description": p.description,
        "type": p.scheme,
        "destination": p.beneficiary,
        "state": p.state,
        "rejectedInfo": p.rejected_info,
        "creationTimestamp": p.created_at,
    }


OWT_QUERY = QueryFilters(
    instrument_object(
        "sourceInstrument",
        Literal["managed_accounts"],
        "The wire transfers from an account: `sourceInstrument[type]`, with "
        "`sourceInstrument[id]` for one account (an id needs its type: without it the answer "
        "is 400).",
    ),
    instrument_object(
        "instrument",
        InstrumentType,
        "The wire transfers of an instrument (a wire transfer's only instrument is its "
        "source): `instrument[type]`, with `instrument[id]` for one (an id needs its type).",
    ),
)


def owt_filters_of(states: tuple[str, ...]) -> Callable[..., Awaitable[repository.Filters]]:
    """The list's filters, for a version whose wire transfers have `states`."""

    async def owt_filters(
        request: Request,
        profileId: Id | None = None,
        state: Annotated[list[str] | None, Query(max_length=20)] = None,
        createdFrom: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
        createdTo: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
        tag: Annotated[Tag | None, Query()] = None,
    ) -> repository.Filters:
        objects = OWT_QUERY.read(request)
        return repository.Filters(
            profile_id=profile_filter(profileId),
            source=instrument_filter(objects.get("sourceInstrument"), "sourceInstrument"),
            instrument=instrument_filter(objects.get("instrument"), "instrument"),
            states=known_states(state, states),
            created_from=createdFrom,
            created_to=createdTo,
            tag=tag,
        )

    return owt_filters


add_payment_operations(
    router,
    PaymentOperations(
        kind=OWT,
        path="/outgoing_wire_transfers",
        key="transfer",
        prefix="outgoingWireTransfer",
        what="outgoing wire transfer",
        body=owt_body,
        read_model=OwtRead,
        page_model=OwtPage,
        create_model=OwtCreate,
        create=owt.create,
        create_doc="""Pays `transferAmount` from the caller's account (which needs its IBAN)
        to `destinationBeneficiary`: SEPA bank details for EUR, Faster Payments for GBP (`type`
        says which). The source also pays the wire transfer profile's fee. Answers
        `PENDING_CHALLENGE` (amount + fee held) until a challenge is verified, then it is
        `SUBMITTED`, `APPROVED` and `COMPLETED` after the programme's processing delay. A create
        refused for the source's state, the amount or the funds answers 409 and keeps its
        `idempotency-ref` (the same ref and payload answer the same 409, another payload 400);
        no list, get or webhook shows it.""",
        create_responses=conflicts(*CREATE_CONFLICTS),
        filters=owt_filters_of(OWT_STATES),
        query=OWT_QUERY,
        list_doc="""The logged-in identity's outgoing wire transfers, newest first, in pages of
        at most 100; `sourceInstrument[id]` (or `sourceInstrument.id`) needs
        `sourceInstrument[type]` (or `sourceInstrument.type`), and likewise `instrument`. A
        query key shaped like a filter that this list does not have (`sourceInstrument[foo]`,
        `foo[bar]`, `foo.bar`) is a 400, never ignored.""",
        challenges=True,
    ),
)
