"""Outgoing Wire Transfers on the 3.63 line (v3.63.md §5, §6; D35, D40, D41): the 3.29.1
operations on the same wire transfers, showing every state of the line (`INVALID`,
`PENDING_CONFIRMATION`, `SCHEDULED`, `CANCELLED`) with the line's fields, `scheduledTimestamp`
on create, plus Confirmation of Payee's confirm, the cancel of a wire transfer that has not gone
yet, and the (deprecated) bulk cancel of scheduled ones."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body
from pydantic import ValidationError

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
from multibank.api.v3_63.scheduling import (
    EVERY_STATE,
    add_bulk_cancel,
    due_first,
    scheduling,
    with_executed,
)
from multibank.beneficiaries import service as beneficiaries
from multibank.beneficiaries.models import BANK, Beneficiary
from multibank.kernel.errors import Conflict
from multibank.kernel.validation import parse_id
from multibank.linked_accounts import repository as linked_accounts
from multibank.linked_accounts.models import LinkedAccount
from multibank.payments import owt, service
from multibank.payments.models import OWT, Payment
from multibank.payments.schemas import (
    OWT_STATES_3_63,
    BeneficiaryRef,
    CancellationBody,
    FasterPaymentsBankDetails,
    LinkedAccountRef,
    OwtCreate3_63,
    OwtPage3_63,
    OwtRead3_63,
    SepaBankDetails,
)
from multibank.payments.schemas import Beneficiary as PaymentBeneficiary
from multibank.programmes.context import Ctx

router = UnitOfWorkRouter(tags=["Outgoing Wire Transfers"])


def owt_body_3_63(p: Payment) -> dict[str, Any]:
    return {
        **owt_body(p),
        "challengeExemptionReason": p.exemption,
        "validationOutcomes": p.validation_outcomes,
        **scheduling(p),
        **_named_destination(p),
    }


def _named_destination(p: Payment) -> dict[str, Any]:
    """Paid to a trusted beneficiary or a linked account: the destination is named so
    (v3.63.md §2.4, §4.5)."""
    if p.beneficiary_id is not None:
        return {"destination": {"beneficiaryId": str(p.beneficiary_id)}}
    if p.linked_account_id is not None:
        return {"destination": {"type": "linked_accounts", "id": str(p.linked_account_id)}}
    return {}


async def create_confirming_payee(ctx: Ctx, who: service.Owner, data: OwtCreate3_63) -> Payment:
    at = service.scheduled_time(ctx, data.scheduledTimestamp)
    named = data.destinationBeneficiary
    if isinstance(named, BeneficiaryRef):
        trusted = await beneficiaries.payable(ctx, who.identity_id, named.beneficiaryId, BANK)
        data = data.model_copy(update={"destinationBeneficiary": _bank_details(trusted)})
        payee = owt.Payee(beneficiary=trusted.id)
    elif isinstance(named, LinkedAccountRef):
        own = await _linked(ctx, who, named, data.transferAmount.currency)
        data = data.model_copy(update={"destinationBeneficiary": _linked_details(own)})
        # No Confirmation of Payee for one's own account (v3.63.md §6.3, D41).
        return await owt.create(ctx, who, data, scheduled_at=at, payee=owt.Payee(linked=own.id))
    else:
        payee = None
    return await owt.create(ctx, who, data, confirm_payee=True, scheduled_at=at, payee=payee)


async def _linked(
    ctx: Ctx, who: service.Owner, named: LinkedAccountRef, currency: str
) -> LinkedAccount:
    """The caller's `ACTIVE` linked account with bank details a wire transfer can reach, in
    the payment's currency (D39)."""
    number = parse_id(named.id) or 0
    found = await linked_accounts.get(ctx.db, ctx.programme.id, who.identity_id, number)
    reference = {} if found is None else found.account_reference
    if (
        found is None
        or found.state != "ACTIVE"
        or not (reference.get("iban") or reference.get("accountNumber"))
    ):
        raise Conflict("EXTERNAL_DESTINATION_ACCOUNT_NOT_FOUND")
    if found.currency != currency:
        raise Conflict("CURRENCY_MISMATCH")
    return found


def _linked_details(account: LinkedAccount) -> PaymentBeneficiary:
    """A linked account as a wire transfer's bank details: its IBAN (SEPA; its BIC when it has
    one) or its account number and sort code (Faster Payments)."""
    reference = account.account_reference
    details: SepaBankDetails | FasterPaymentsBankDetails
    if reference.get("iban"):
        details = SepaBankDetails.model_construct(
            iban=reference["iban"], bankIdentifierCode=reference.get("bankIdentifierCode") or ""
        )
    else:
        details = FasterPaymentsBankDetails.model_construct(
            accountNumber=reference["accountNumber"], sortCode=reference.get("sortCode") or ""
        )
    return PaymentBeneficiary.model_construct(
        name=account.name, bankCountry=account.country, bankAccountDetails=details
    )


def _bank_details(payee: Beneficiary) -> PaymentBeneficiary:
    """A trusted beneficiary's bank details as a wire transfer's; ones a wire transfer cannot
    carry (a SEPA beneficiary with no BIC) are `BENEFICIARY_BANK_DETAILS_INVALID`."""
    info, details = payee.information, payee.details
    bank = dict(details.get("bankAccountDetails") or {})
    bank.pop("secondaryReference", None)
    fields = {
        k: details[k] for k in ("address", "bankName", "bankAddress", "bankCountry") if k in details
    }
    try:
        return PaymentBeneficiary.model_validate(
            {
                "name": info.get("businessName") or info.get("fullName"),
                **fields,
                "bankAccountDetails": bank,
            }
        )
    except ValidationError:
        raise Conflict("BENEFICIARY_BANK_DETAILS_INVALID") from None


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
        create_model=OwtCreate3_63,
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
        the funds answers 409, keeps its `idempotency-ref` and is kept `INVALID`.

        With `scheduledTimestamp`, once confirmed and past SCA it is `SCHEDULED`: its funds are
        neither checked nor held until the programme's clock reaches that time; then its
        source, due diligence and funds are checked and it is `SUBMITTED` and on, or `FAILED`.
        Until then `POST /outgoing_wire_transfers/{id}/cancel` stops it.

        `destinationBeneficiary` may name a trusted beneficiary instead
        (`{"beneficiaryId": ...}`, an `ACTIVE` bank-details beneficiary of the identity): no SCA
        (`challengeExemptionReason` `TRUSTED_BENEFICIARY`), and the answer's `destination` names
        it. Unknown or another identity's: `BENEFICIARY_NOT_FOUND`; an instrument one or one not
        `ACTIVE`: `BENEFICIARY_TYPE_INVALID`. Or one of the identity's own linked accounts
        (`{"type": "linked_accounts", "id": ...}`, `ACTIVE`, in the payment's currency, else
        `EXTERNAL_DESTINATION_ACCOUNT_NOT_FOUND` or `CURRENCY_MISMATCH`): no Confirmation of
        Payee, SCA as any wire transfer.""",
        create_responses=conflicts(
            *CREATE_CONFLICTS,
            "SCHEDULED_TIMESTAMP_INVALID",
            "BENEFICIARY_NOT_FOUND",
            "BENEFICIARY_TYPE_INVALID",
            "BENEFICIARY_BANK_DETAILS_INVALID",
            "EXTERNAL_DESTINATION_ACCOUNT_NOT_FOUND",
        ),
        filters=with_executed(owt_filters_of(OWT_STATES_3_63)),
        query=OWT_QUERY,
        list_doc="""The logged-in identity's outgoing wire transfers in every state of the
        line, newest first, in pages of at most 100; `sourceInstrument[id]` (or
        `sourceInstrument.id`) needs `sourceInstrument[type]` (or `sourceInstrument.type`),
        and likewise `instrument`. A query key shaped like a filter that this list does not
        have (`sourceInstrument[foo]`, `foo[bar]`, `foo.bar`) is a 400, never ignored.""",
        challenges=True,
        hidden=EVERY_STATE,
        on_read=due_first,
    ),
)
add_bulk_cancel(
    router,
    "/outgoing_wire_transfers",
    OWT,
    "outgoingWireTransferCancel",
    "outgoing wire transfer",
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
    """Stops a wire transfer that has not gone yet (`PENDING_CONFIRMATION`,
    `PENDING_CHALLENGE` or `SCHEDULED`): it is `CANCELLED`, with the `cancellationReason` given,
    and what it held is back in the account's available balance. Any other state is 409
    `INVALID_STATE`."""
    payment = await service.load(session.ctx, owner(session), OWT, id, True, EVERY_STATE)
    await owt.cancel(session.ctx, payment, None if body is None else body.cancellationReason)
    return owt_body_3_63(payment)
