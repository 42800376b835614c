"""Outgoing Wire Transfers on the 3.63 line (v3.63.md §5, §6; D35, D40, D41): the 3.29.1
operations on the same wire transfers, showing every state of the line (`INVALID`,
`PENDING_CONFIRMATION`, `CANCELLED`) with the line's fields, plus Confirmation of Payee's
confirm and the cancel of a wire transfer that has not gone yet."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body

from multibank.api.deps import STEP_UP_RESPONSES, StepUpRequired, conflicts
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29.outgoing_wire_transfers import (
    CREATE_CONFLICTS,
    OWT_QUERY,
    owt_body,
    owt_filters_of,
)
from multibank.api.v3_29.payments_common import (
    PaymentId,
    PaymentOperations,
    add_payment_operations,
    owner,
)
from multibank.payments import owt, service
from multibank.payments.models import OWT, Payment
from multibank.payments.schemas import (
    OWT_STATES_3_63,
    CancellationBody,
    OwtCreate,
    OwtPage3_63,
    OwtRead3_63,
)
from multibank.programmes.context import Ctx

router = UnitOfWorkRouter(tags=["Outgoing Wire Transfers"])
# Nothing is hidden from the line: its clients know every state a wire transfer can be in.
EVERY_STATE: tuple[str, ...] = ()


def owt_body_3_63(p: Payment) -> dict[str, Any]:
    return {
        **owt_body(p),
        "challengeExemptionReason": p.exemption,
        "validationOutcomes": p.validation_outcomes,
        "cancellationReason": p.cancellation_reason,
    }


async def create_confirming_payee(ctx: Ctx, who: service.Owner, data: OwtCreate) -> Payment:
    return await owt.create(ctx, who, data, confirm_payee=True)


add_payment_operations(
    router,
    PaymentOperations(
        kind=OWT,
        path="/outgoing_wire_transfers",
        key="transfer",
        prefix="outgoingWireTransfer",
        what="outgoing wire transfer",
        body=owt_body_3_63,
        read_model=OwtRead3_63,
        page_model=OwtPage3_63,
        create_model=OwtCreate,
        create=create_confirming_payee,
        create_doc="""Pays `transferAmount` from the caller's account (which needs its IBAN)
        to `destinationBeneficiary`: SEPA bank details for EUR, Faster Payments for GBP (`type`
        says which). The source also pays the wire transfer profile's fee.

        **Confirmation of Payee** (GBP, sandbox): the payee's bank is asked whether the name
        matches the account, and the answer is `PENDING_CONFIRMATION` with
        `validationOutcomes` (amount + fee held): show the result to the payer, then
        `POST /outgoing_wire_transfers/{id}/confirm` to go on or `…/cancel` to stop. The
        sandbox answers by the account number's last four digits: `9991` a close match
        (`MBAM`, with the account's name), `9992` no match (`ANNM`), `9993` no such account
        (`AC01`), anything else an exact match. Unconfirmed, it fails after 5 minutes of the
        programme clock. A live programme's and a SEPA wire transfer are not checked.

        Otherwise, and once confirmed: `PENDING_CHALLENGE` until a challenge is verified
        (unless SCA does not apply: then `SUBMITTED` at once, with its
        `challengeExemptionReason`), then `SUBMITTED`, `APPROVED` and `COMPLETED` after the
        programme's processing delay. A create refused for the source's state, the amount or
        the funds answers 409, keeps its `idempotency-ref` and is kept `INVALID`.""",
        create_responses=conflicts(*CREATE_CONFLICTS),
        filters=owt_filters_of(OWT_STATES_3_63),
        query=OWT_QUERY,
        list_doc="""The logged-in identity's outgoing wire transfers in every state of the
        line, newest first, in pages of at most 100; `sourceInstrument[id]` (or
        `sourceInstrument.id`) needs `sourceInstrument[type]` (or `sourceInstrument.type`),
        and likewise `instrument`. A query key shaped like a filter that this list does not
        have (`sourceInstrument[foo]`, `foo[bar]`, `foo.bar`) is a 400, never ignored.""",
        challenges=True,
        hidden=EVERY_STATE,
    ),
)


@router.post(
    "/outgoing_wire_transfers/{id}/confirm",
    operation_id="outgoingWireTransferConfirm",
    response_model=OwtRead3_63,
    response_model_exclude_none=True,
    responses={**STEP_UP_RESPONSES, **conflicts("INVALID_STATE")},
)
async def owt_confirm(id: PaymentId, session: StepUpRequired) -> dict[str, Any]:
    """The payer saw the Confirmation of Payee result and goes on: `PENDING_CONFIRMATION` →
    `PENDING_CHALLENGE` (or `SUBMITTED` when SCA does not apply, with its
    `challengeExemptionReason`). Any other state is 409 `INVALID_STATE`."""
    who = owner(session)
    payment = await service.load(session.ctx, who, OWT, id, True, EVERY_STATE)
    await owt.confirm(session.ctx, who, payment)
    return owt_body_3_63(payment)


@router.post(
    "/outgoing_wire_transfers/{id}/cancel",
    operation_id="outgoingWireTransferSingleCancel",
    response_model=OwtRead3_63,
    response_model_exclude_none=True,
    responses={**STEP_UP_RESPONSES, **conflicts("INVALID_STATE")},
)
async def owt_cancel(
    id: PaymentId,
    session: StepUpRequired,
    body: Annotated[CancellationBody | None, Body()] = None,
) -> dict[str, Any]:
    """Stops a wire transfer that has not gone yet (`PENDING_CONFIRMATION` or
    `PENDING_CHALLENGE`): it is `CANCELLED`, with the `cancellationReason` given, and its
    amount and fee are back in the account's available balance. Any other state is 409
    `INVALID_STATE`."""
    payment = await service.load(session.ctx, owner(session), OWT, id, True, EVERY_STATE)
    await owt.cancel(session.ctx, payment, None if body is None else body.cancellationReason)
    return owt_body_3_63(payment)
