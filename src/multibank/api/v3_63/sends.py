"""Sends on the 3.63 line (v3.63.md §5, D35, D40): the 3.29.1 operations on the same sends,
with `scheduledTimestamp` on create, every state of the line, the exemption that applied, the
scheduling fields and filters, and the bulk cancel."""

from __future__ import annotations

from typing import Any

from multibank.api.deps import conflicts
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29.payments_common import PaymentOperations, add_payment_operations
from multibank.api.v3_29.sends import CREATE_CONFLICTS, SEND_QUERY, send_filters_of
from multibank.api.v3_29.transfers import transfer_body
from multibank.api.v3_63.scheduling import (
    EVERY_STATE,
    add_bulk_cancel,
    due_first,
    scheduling,
    with_executed,
)
from multibank.beneficiaries import service as beneficiaries
from multibank.beneficiaries.models import INSTRUMENT
from multibank.payments import service
from multibank.payments.models import SEND, Payment
from multibank.payments.schemas import (
    SEND_STATES_3_63,
    BeneficiaryRef,
    InstrumentId,
    SendCreate3_63,
    SendRead3_63,
    SendsPage3_63,
)
from multibank.programmes.context import Ctx

router = UnitOfWorkRouter(tags=["Sends"])


def send_body_3_63(p: Payment) -> dict[str, Any]:
    body = {**transfer_body(p), "challengeExemptionReason": p.exemption, **scheduling(p)}
    if p.beneficiary_id is not None:  # paid to a trusted beneficiary: named so (v3.63.md §2.4)
        body["destination"] = {"beneficiaryId": str(p.beneficiary_id)}
    return body


async def create(ctx: Ctx, who: service.Owner, data: SendCreate3_63) -> Payment:
    at = service.scheduled_time(ctx, data.scheduledTimestamp)
    if not isinstance(data.destination, BeneficiaryRef):
        return await service.create_send(ctx, who, data, at)
    # A trusted beneficiary's instrument (D38): the send to it needs no SCA.
    payee = await beneficiaries.payable(
        ctx, who.identity_id, data.destination.beneficiaryId, INSTRUMENT
    )
    instrument = InstrumentId.model_validate(
        {"type": payee.instrument_type, "id": str(payee.instrument_id)}
    )
    plain = data.model_copy(update={"destination": instrument})
    return await service.create_send(ctx, who, plain, at, payee.id)


add_payment_operations(
    router,
    PaymentOperations(
        kind=SEND,
        path="/sends",
        key="send",
        prefix="send",
        what="send",
        body=send_body_3_63,
        read_model=SendRead3_63,
        page_model=SendsPage3_63,
        create_model=SendCreate3_63,
        create=create,
        create_doc="""Sends `destinationAmount` from the caller's `source` to another identity's
        `destination` in the same currency (accounts or prepaid cards; a debit card holds no
        money and is refused); the source also pays the send profile's fee. `COMPLETED` when
        SCA does not apply (`challengeExemptionReason` says why); otherwise `PENDING`, amount +
        fee held, until a challenge on it is verified (5 minutes).

        With `scheduledTimestamp`, once past SCA (or with none to pass) it is `SCHEDULED`:
        nothing is held until the programme's clock reaches that time; then the checks of a
        create run again and it is `COMPLETED` or `FAILED`. Until then
        `POST /sends/bulk/cancel` stops it.

        `destination` may name a trusted beneficiary instead (`{"beneficiaryId": ...}`, an
        `ACTIVE` instrument beneficiary of the identity): the send needs no SCA
        (`challengeExemptionReason` `TRUSTED_BENEFICIARY`) and answers that `destination`.
        Unknown or another identity's: `BENEFICIARY_NOT_FOUND`; a bank-details one or one not
        `ACTIVE`: `BENEFICIARY_TYPE_INVALID`.""",
        create_responses=conflicts(
            *CREATE_CONFLICTS,
            "SCHEDULED_TIMESTAMP_INVALID",
            "BENEFICIARY_NOT_FOUND",
            "BENEFICIARY_TYPE_INVALID",
        ),
        filters=with_executed(send_filters_of(SEND_STATES_3_63)),
        query=SEND_QUERY,
        list_doc="""The logged-in identity's sends in every state of the line, newest first,
        in pages of at most 100; `source[id]` (or `source.id`) needs `source[type]` (or
        `source.type`); `executedFrom` and `executedTo` (epoch ms) keep those executed then. A
        query key shaped like a filter that this list does not have is a 400, never
        ignored.""",
        challenges=True,
        hidden=EVERY_STATE,
        on_read=due_first,
    ),
)
add_bulk_cancel(router, "/sends", SEND, "sendCancel", "send")
