"""Outgoing wire transfers (money-movement.md §1.4, D12 to D14): from a managed account with an
IBAN to an external beneficiary, by SEPA (EUR) or Faster Payments (GBP).

A create that names a bad beneficiary is a 400 and leaves nothing. One refused for the source's
state, the amount, or the money is still stored, `INVALID`, with why, and answers 409: the record
keeps its idempotency-ref taken, and no list, get or webhook shows it (D12a). An accepted one
holds amount + fee and waits for SCA (`PENDING_CHALLENGE`) unless SCA does not apply; once
verified it is `SUBMITTED`, then `APPROVED`, then `COMPLETED` after the programme's processing
delay (programme clock), each step taken once by whichever process finds it due
(`payments.steps`). The sandbox's canned destination IBANs force the other endings.

Through the 3.63 line a sandbox's GBP wire transfer first waits for its payer to confirm the
payee (`PENDING_CONFIRMATION`, Confirmation of Payee: `payments.cop`, D41), holding its money as
it would awaiting SCA; `confirm` moves it on to SCA, `cancel` ends it `CANCELLED` and gives the
money back. Unconfirmed for as long as a challenge may wait, it ends `FAILED` the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stdnum import iban as stdnum_iban

from multibank.accounts import service as accounts
from multibank.accounts.models import ManagedAccount
from multibank.kernel.errors import BadRequest, Conflict
from multibank.kernel.ids import new_id
from multibank.kernel.money import FASTER_PAYMENTS_LIMIT, SEPA_LIMIT
from multibank.ledger import service as ledger
from multibank.ledger.models import REVENUE, SETTLEMENT
from multibank.payments import cop, events
from multibank.payments.models import (
    APPROVED,
    CANCELLED,
    COMPLETED,
    FAILED,
    INVALID,
    OWT,
    PENDING_CHALLENGE,
    PENDING_CONFIRMATION,
    REJECTED,
    RETURNED,
    SCHEDULED,
    SUBMITTED,
    Payment,
)
from multibank.payments.schemas import (
    DESCRIPTION_LIMIT,
    FPS_TEXT,
    INT64_MAX,
    InstrumentId,
    OwtCreate,
    SepaBankDetails,
)
from multibank.payments.service import (
    CHALLENGE_TTL_MS,
    MANAGED_ACCOUNTS,
    Owner,
    check_source,
    check_verified,
    details_of,
    exemption_of,
    failure_of,
    fee_of,
    give_back,
    hold,
    instruments,
    new_payment,
    own_account,
    pay_out,
    profile_of,
    schedule,
)
from multibank.programmes import repository as programmes
from multibank.programmes.context import Ctx

SEPA, FASTER_PAYMENTS = "SEPA", "FASTER_PAYMENTS"
SCHEME_CURRENCY = {SEPA: "EUR", FASTER_PAYMENTS: "GBP"}
# The most one payment may carry on each scheme (kernel/money.py).
SCHEME_LIMIT = {SEPA: SEPA_LIMIT, FASTER_PAYMENTS: FASTER_PAYMENTS_LIMIT}
# Characters the Faster Payments scheme carries in a name (the description's pattern).
FPS_NAME = re.compile(FPS_TEXT)

# Sandbox destination IBANs that name an outcome (money-movement.md §1.4, D14); accepted as
# written although their check digits do not verify.
CANNED_PREFIX = "WV38WEAV50201555"
CANNED = {
    f"{CANNED_PREFIX}5551": "REQUIRES_APPROVAL",
    f"{CANNED_PREFIX}5552": "FAILURE",
    f"{CANNED_PREFIX}5553": "DECLINED",
    f"{CANNED_PREFIX}5554": "UNKNOWN_SUCCESS",
    f"{CANNED_PREFIX}5555": "UNKNOWN_FAILURE",
    f"{CANNED_PREFIX}5556": "DELAYED_RESPONSE",
    f"{CANNED_PREFIX}5557": "NOT_SEPA_INSTANT",
    f"{CANNED_PREFIX}5558": "INTERNAL_TRANSFER",
    f"{CANNED_PREFIX}5559": "RETURN_OWT",
    f"{CANNED_PREFIX}5560": "RETURN_BEFORE_COMPLETE_OWT",
    f"{CANNED_PREFIX}5561": "REJECTED_OWT",
}
# Outcomes that stay SUBMITTED until the simulator accepts or rejects.
WAIT_FOR_SIMULATOR = ("REQUIRES_APPROVAL", "UNKNOWN_FAILURE")
DELAYED_FACTOR = 10  # DELAYED_RESPONSE takes ten processing delays
# A wire transfer waits for its payer's confirmation of the payee as long as for a challenge;
# then it fails and its money is given back (decision 0084).
CONFIRMATION_TTL_MS = CHALLENGE_TTL_MS
CONFIRMATION_EXPIRED = "CONFIRMATION_EXPIRED"
# What its payer may cancel (3.63 line, D40, D41): what has not gone yet.
CANCELLABLE = (PENDING_CHALLENGE, PENDING_CONFIRMATION, SCHEDULED)


def _bad(field: str, message: str, error: str = "REGEX") -> BadRequest:
    return BadRequest(
        f"request.{field}: {message}",
        [{"fieldName": field, "error": error, "params": []}],
    )


def _normal_iban(value: str) -> str:
    return value.replace(" ", "").upper()


def scheme_of(data: OwtCreate) -> str:
    details = data.destinationBeneficiary.bankAccountDetails
    return SEPA if isinstance(details, SepaBankDetails) else FASTER_PAYMENTS


def check_beneficiary(data: OwtCreate, scheme: str, sandbox: bool) -> None:
    """The 400s the scheme decides: a blank or (FPS) unsupported name, the reference's length
    and presence, and an IBAN whose check digits fail (the sandbox's canned IBANs excepted)."""
    b = data.destinationBeneficiary
    if not b.name.strip():
        raise _bad("destinationBeneficiary.name", "must not be blank", "HAS_TEXT")
    if scheme == FASTER_PAYMENTS and not FPS_NAME.fullmatch(b.name):
        raise _bad("destinationBeneficiary.name", "characters Faster Payments does not carry")
    description = data.description
    if scheme == SEPA and not (description and description.strip()):
        raise _bad("description", "required for SEPA", "REQUIRED")
    if description is not None and len(description) > DESCRIPTION_LIMIT[scheme]:
        limit = DESCRIPTION_LIMIT[scheme]
        raise BadRequest(
            f"request.description: size must be between 0 and {limit}",
            [{"fieldName": "description", "error": "SIZE", "params": ["0", str(limit)]}],
        )
    details = b.bankAccountDetails
    if isinstance(details, SepaBankDetails):
        iban = _normal_iban(details.iban)
        if not (sandbox and iban in CANNED) and not stdnum_iban.is_valid(iban):
            raise _bad(
                "destinationBeneficiary.bankAccountDetails.iban", "check digits do not verify"
            )


def outcome_of(payment: Payment) -> str | None:
    """The canned outcome a sandbox wire transfer's destination IBAN names, if any."""
    details = (payment.beneficiary or {}).get("bankAccountDetails") or {}
    iban = details.get("iban")
    return CANNED.get(_normal_iban(iban)) if isinstance(iban, str) else None


async def create(
    ctx: Ctx,
    owner: Owner,
    data: OwtCreate,
    confirm_payee: bool = False,
    scheduled_at: int | None = None,
    payee: Payee | None = None,
) -> Payment:
    """`confirm_payee`: made through the 3.63 line, whose GBP wire transfers a sandbox checks
    for Confirmation of Payee (D41). `scheduled_at` (the line, D40): past its confirmation and
    SCA it is `SCHEDULED`; its funds are not checked, nor held, before its time.
    `payee` (the line): a trusted beneficiary's (exempt from SCA, D38) or a linked account's
    (D39) bank details, named on the payment."""
    scheme = scheme_of(data)
    checks_payee = confirm_payee and scheme == FASTER_PAYMENTS and ctx.sandbox
    check_beneficiary(data, scheme, ctx.sandbox)
    profile = await profile_of(ctx, OWT, data.profileId)
    if profile is None:
        raise Conflict("PROFILE_NOT_FOUND")
    if not profile.active:
        raise Conflict("PROFILE_INACTIVE")
    found = await instruments(ctx, [data.sourceInstrument])
    source = own_account(found, data.sourceInstrument, owner)
    if source is None:
        raise Conflict("SOURCE_NOT_FOUND")
    await accounts.allocate_if_due(ctx, source)  # its row is locked already (`instruments`)
    if source.iban_state != "ALLOCATED":
        raise Conflict("IBAN_UPGRADE_REQUIRED")
    currency, amount = data.transferAmount.currency, data.transferAmount.amount
    if SCHEME_CURRENCY[scheme] != currency or source.currency != currency:
        raise Conflict("CURRENCY_MISMATCH")
    await check_verified(ctx, owner.identity_id)
    fee = fee_of(profile, currency)
    payment = new_payment(
        ctx,
        OWT,
        owner,
        profile,
        data.tag,
        source_type=MANAGED_ACCOUNTS,
        source_id=source.id,
        beneficiary=data.destinationBeneficiary.model_dump(exclude_none=True),
        scheme=scheme,
        description=data.description,
        currency=currency,
        amount=amount,
        fee=fee,
        state=INVALID,
    )
    # Before the hold: the exemption locks the identity's row, and every payment takes that
    # lock before any balance's (a send does the same), so two never wait on each other. One
    # to be confirmed decides it when confirmed (`confirm`): an abandoned one takes no place.
    sca = ctx.programme.owt_sca_required
    if payee is not None:
        payment.beneficiary_id, payment.linked_account_id = payee.beneficiary, payee.linked
    exemption = None if checks_payee else await exemption_of(ctx, owner, payment, sca)
    payment.scheduled_at = scheduled_at
    refusal = await _held_or_refused(ctx, payment, source)
    if refusal is not None:
        # Kept, INVALID, with why; the answer is the refusal, and the ref keeps it (D12). No
        # webhook: INVALID is no state of the 3.29.1 interface, whose clients never see it (D12a).
        code, payment.failure = refusal
        ctx.db.add(payment)
        await ctx.db.flush()
        raise Conflict(code).keeping_changes().storing_answer()
    ctx.db.add(payment)
    if checks_payee:
        await _to_confirm(ctx, payment)
    elif sca and exemption is None:
        payment.state = PENDING_CHALLENGE
        payment.due_at = ctx.now + CHALLENGE_TTL_MS
        await ctx.db.flush()
        await events.payment(ctx, payment)
    else:
        payment.exemption = exemption
        await ctx.db.flush()
        await _go(ctx, payment)
    return payment


async def _to_confirm(ctx: Ctx, payment: Payment) -> None:
    """The sandbox's Confirmation of Payee answer; the payer confirms or cancels next."""
    payment.validation_outcomes = cop.sandbox_outcomes(payment.beneficiary or {})
    payment.state = PENDING_CONFIRMATION
    payment.due_at = ctx.now + CONFIRMATION_TTL_MS
    await ctx.db.flush()
    await events.payment(ctx, payment)


async def _go(ctx: Ctx, payment: Payment) -> None:
    """Past its confirmation and SCA: submitted now, or scheduled for its time."""
    if payment.scheduled_at is not None:
        await schedule(ctx, payment)
    else:
        await submit(ctx, payment)


async def execute(ctx: Ctx, payment: Payment) -> None:
    """A scheduled wire transfer whose time has come (the caller holds its row lock and saw it
    `SCHEDULED`): its source and due diligence checked again, amount + fee held, then
    `SUBMITTED` and on as any other; a check that fails ends it `FAILED` with why."""
    wanted = InstrumentId.model_validate({"type": MANAGED_ACCOUNTS, "id": str(payment.source_id)})
    found = await instruments(ctx, [wanted])
    source = found.get((MANAGED_ACCOUNTS, payment.source_id))
    try:
        if source is None:
            raise Conflict("SOURCE_NOT_FOUND")
        check_source(source)
        await check_verified(ctx, payment.identity_id)
        # A savepoint: a hold refused for funds leaves no half-written transaction.
        async with ctx.db.begin_nested():
            await hold(ctx, payment, source, details_of(payment, source, None))
    except Conflict as refusal:
        await give_back(ctx, payment, FAILED, failure_of(refusal))
        return
    await ctx.db.flush()
    await submit(ctx, payment)


async def _held_or_refused(
    ctx: Ctx, payment: Payment, source: ManagedAccount
) -> tuple[str, str] | None:
    """Amount + fee held (not for a scheduled one: nothing is held before its time), or why
    the create is refused (`_refusal`, or the funds)."""
    refusal = _refusal(source, payment.scheme or SEPA, payment.amount, payment.fee)
    if refusal is None and payment.scheduled_at is None:
        try:
            # A savepoint: a hold refused for funds leaves no half-written transaction.
            async with ctx.db.begin_nested():
                await hold(ctx, payment, source, details_of(payment, source, None))
        except Conflict:
            refusal = ("FUNDS_INSUFFICIENT", "INSUFFICIENT_FUNDS")
    return refusal


def _refusal(source: ManagedAccount, scheme: str, amount: int, fee: int) -> tuple[str, str] | None:
    """(errorCode, the stored validation failure) of a create that is kept as INVALID."""
    if source.state == "DESTROYED":
        return "SOURCE_INSTRUMENT_DESTROYED", "SOURCE_INSTRUMENT_DESTROYED"
    if source.state == "BLOCKED":
        return "SOURCE_INSTRUMENT_BLOCKED", "SOURCE_INSTRUMENT_BLOCKED"
    if amount <= 0 or amount > SCHEME_LIMIT[scheme]:
        return "AMOUNT_INVALID", "AMOUNT_INVALID"
    if amount + fee > INT64_MAX:
        return "FUNDS_INSUFFICIENT", "INSUFFICIENT_FUNDS"
    return None


# The payer's confirmation of the payee, and its cancel (3.63 line, D40, D41)


async def confirm(ctx: Ctx, owner: Owner, payment: Payment) -> None:
    """`PENDING_CONFIRMATION` → `PENDING_CHALLENGE`, or `SUBMITTED` when SCA does not apply
    (off, or exempted now); the caller holds the payment's row lock. Any other state is 409
    `INVALID_STATE`."""
    if payment.state != PENDING_CONFIRMATION:
        raise Conflict("INVALID_STATE")
    sca = ctx.programme.owt_sca_required
    exemption = await exemption_of(ctx, owner, payment, sca)
    payment.updated_at = ctx.now
    if sca and exemption is None:
        payment.state = PENDING_CHALLENGE
        payment.due_at = ctx.now + CHALLENGE_TTL_MS
        await ctx.db.flush()
        await events.payment(ctx, payment)
    else:
        payment.exemption = exemption
        await ctx.db.flush()
        await _go(ctx, payment)


async def cancel(ctx: Ctx, payment: Payment, reason: str | None) -> None:
    """A wire transfer that has not gone yet ends `CANCELLED`, its money given back; the caller
    holds its row lock. Any other state is 409 `INVALID_STATE`. A challenge in flight goes with
    it: its code or push answer then finds nothing to confirm."""
    if payment.state not in CANCELLABLE:
        raise Conflict("INVALID_STATE")
    payment.cancellation_reason = reason
    await give_back(ctx, payment, CANCELLED, None)


@dataclass(frozen=True)
class Payee:
    """Whom the line's wire transfer pays when its payer named them by id (v3.63.md §2.4, §4.5):
    a trusted beneficiary, or one of its linked accounts."""

    beneficiary: int | None = None
    linked: int | None = None


# Processing (D14)


async def submit(ctx: Ctx, payment: Payment) -> None:
    """SCA passed (or not needed): sent to the sending institution. The approval step is due at
    once, unless the destination is one the simulator must settle."""
    payment.state = SUBMITTED
    payment.updated_at = ctx.now
    payment.due_at = None if outcome_of(payment) in WAIT_FOR_SIMULATOR else ctx.now
    await events.payment(ctx, payment)


def _delay_ms(ctx: Ctx, payment: Payment) -> int:
    delay = ctx.programme.owt_processing_delay_seconds * 1000
    return delay * DELAYED_FACTOR if outcome_of(payment) == "DELAYED_RESPONSE" else delay


async def step(ctx: Ctx, payment: Payment) -> None:
    """The next step of a due wire transfer past SCA (the caller holds its row lock)."""
    outcome = outcome_of(payment)
    if payment.state == PENDING_CONFIRMATION:  # never confirmed: it ends, its money given back
        await give_back(ctx, payment, FAILED, CONFIRMATION_EXPIRED)
    elif payment.state == SUBMITTED:
        if outcome == "FAILURE":
            payment.rejected_info = "SYSTEM"
            await give_back(ctx, payment, FAILED, "FAILURE")
        elif outcome in ("DECLINED", "REJECTED_OWT"):
            payment.rejected_info = "SYSTEM"
            await give_back(ctx, payment, REJECTED, outcome)
        elif outcome == "RETURN_BEFORE_COMPLETE_OWT":
            await give_back(ctx, payment, RETURNED, outcome)
        else:
            payment.state = APPROVED
            payment.updated_at = ctx.now
            payment.due_at = ctx.now + _delay_ms(ctx, payment)
            await events.payment(ctx, payment)
    elif payment.state == APPROVED:
        await complete(ctx, payment)
    elif payment.state == COMPLETED and outcome == "RETURN_OWT":
        await give_back_after_completion(ctx, payment)
    else:  # nothing is due in this state
        payment.due_at = None


async def complete(ctx: Ctx, payment: Payment) -> None:
    """The money leaves: amount to the settlement account, fee to revenue."""
    await pay_out(ctx, payment)
    outcome = outcome_of(payment)
    if outcome == "INTERNAL_TRANSFER":
        await _arrives_back(ctx, payment)
    elif outcome == "RETURN_OWT":
        payment.due_at = ctx.now + _delay_ms(ctx, payment)


async def _arrives_back(ctx: Ctx, payment: Payment) -> None:
    """The destination is the sender's own account: the amount comes back as a deposit."""
    settlement = await ledger.system_account(
        ctx.db, ctx.programme.id, SETTLEMENT, payment.currency, ctx.now
    )
    b = payment.beneficiary or {}
    await ledger.post(
        ctx.db,
        programme_id=ctx.programme.id,
        type_="DEPOSIT",
        legs=[
            ledger.Leg(payment.source_id, payment.currency, payment.amount, payment.amount),
            ledger.Leg(settlement, payment.currency, -payment.amount, -payment.amount, False),
        ],
        now_ms=ctx.now,
        details={
            k: v
            for k, v in {"sender": b.get("name"), "reference": payment.description}.items()
            if v
        },
    )


async def give_back_after_completion(ctx: Ctx, payment: Payment) -> None:
    """A return: the amount comes back to the source, and the fee too when the wire transfer
    profile says so (D14); the payment ends RETURNED."""
    profile = await programmes.get_profile(ctx.db, ctx.programme.id, payment.profile_id)
    fee = payment.fee if profile is not None and profile.return_fee_refunded else 0
    settlement = await ledger.system_account(
        ctx.db, ctx.programme.id, SETTLEMENT, payment.currency, ctx.now
    )
    c = payment.currency
    legs = [
        ledger.Leg(payment.source_id, c, payment.amount + fee, payment.amount + fee),
        ledger.Leg(settlement, c, -payment.amount, -payment.amount, guarded=False),
    ]
    if fee:
        revenue = await ledger.system_account(
            ctx.db,
            ctx.programme.id,
            REVENUE,
            c,
            ctx.now,
            shard=ledger.revenue_shard(payment.source_id),
        )
        legs.append(ledger.Leg(revenue, c, -fee, -fee, guarded=False))
    await ledger.post(
        ctx.db,
        programme_id=ctx.programme.id,
        type_=OWT,
        legs=legs,
        now_ms=ctx.now,
        details={
            "byAccount": {
                str(payment.source_id): {
                    "fields": {
                        "relatedTransactionId": str(payment.id),
                        "relatedTransactionIdType": OWT,
                    }
                }
            }
        },
        transaction_id=new_id(),
    )
    payment.state = RETURNED
    payment.due_at = None
    payment.updated_at = ctx.now
    await events.payment(ctx, payment)


# The simulator's settlement of a submitted wire transfer (D14, D15)


async def simulate(ctx: Ctx, payment: Payment, action: str) -> str:
    """accept, reject or return; answers the simulator's `code`."""
    if action == "return":
        if payment.state != COMPLETED:
            return "DENIED"
        await give_back_after_completion(ctx, payment)
        return "COMPLETED"
    if payment.state in (COMPLETED, RETURNED):
        return "DENIED_WIRE_TRANSFER_ALREADY_COMPLETED"
    if payment.state not in (SUBMITTED, APPROVED):
        return "DENIED"
    if action == "accept":
        await complete(ctx, payment)
    else:
        payment.rejected_info = "SYSTEM"
        await give_back(ctx, payment, REJECTED, "REJECTED_BY_SIMULATOR")
    return "COMPLETED"
