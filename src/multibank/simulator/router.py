"""Simulator operations. More arrive with the features they drive (deposits, KYC, challenges)."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, FastAPI, Path, Response
from pydantic import BaseModel, Field, StringConstraints

from multibank import due_work
from multibank.accounts import repository as accounts_repo
from multibank.accounts import service as accounts
from multibank.accounts.models import ManagedAccount
from multibank.api.deps import AppContainer, Db, conflicts
from multibank.api.errors import install_error_handlers
from multibank.api.openapi import DescribedApp
from multibank.api.routing import UnitOfWorkRouter, after_commit
from multibank.audit import service as audit
from multibank.beneficiaries import service as beneficiaries
from multibank.factors import service as factors
from multibank.identities import service as identities
from multibank.identities.models import CONSUMER, CORPORATE
from multibank.kernel.errors import Conflict, NotFound
from multibank.kernel.money import FASTER_PAYMENTS_LIMIT, SEPA_LIMIT
from multibank.kernel.validation import parse_id
from multibank.kernel.wire import StrictBody
from multibank.linked_accounts import service as linked_accounts
from multibank.linked_accounts.schemas import SimulatedDecision, SimulatedSteps
from multibank.payments import batch_sca
from multibank.payments import owt as payment_owt
from multibank.payments import repository as payments_repo
from multibank.payments import sca as payment_sca
from multibank.payments import steps as payment_steps
from multibank.payments.models import FAILED, OWT, SCHEDULED, SEND, TRANSFER, Payment
from multibank.programmes.context import Ctx
from multibank.programmes.service import advance_clock
from multibank.simulator import card_pin, secure_session
from multibank.simulator import cards as card_simulator
from multibank.simulator.card_lifecycle import router as card_lifecycle_router
from multibank.simulator.deps import SimulatorIdempotent, SimulatorProgramme

router = UnitOfWorkRouter(tags=["Simulator"])


class Request(StrictBody):
    """Simulator request bodies take JSON types as declared (`"amount": false` is a 400)."""


class ClockAdvance(Request):
    seconds: int = Field(ge=1, le=10 * 365 * 86400)


class ClockState(BaseModel):
    offsetSeconds: int
    now: int


@router.post(
    "/clock/advance",
    operation_id="simulateClockAdvance",
    dependencies=[SimulatorIdempotent],
    responses=conflicts("CLOCK_LIMIT_REACHED"),
)
async def clock_advance(
    body: ClockAdvance, programme: SimulatorProgramme, db: Db, container: AppContainer
) -> ClockState:
    """Moves this programme's clock forward, so token, code and invite expiry can be tested.
    Before it answers, what the new time makes due has happened: payment challenges expired,
    wire transfers processed, IBAN allocations finished, cards expired or renewed (and told
    they are about to expire), physical cards' manufacturing steps taken, card authorisations
    held for 7 days expired, each in a transaction of its own. A payment, account, card or
    authorisation that a concurrent request was changing at that moment is left to that
    request, and if still due afterwards is taken by the server's background step (every
    second by default; it also takes whatever falls due later, without an advance). At most 10
    years a call, and 100 years ahead of real time in all (`CLOCK_LIMIT_REACHED`)."""
    offset_ms = await advance_clock(db, programme, body.seconds)
    # In the audit log as the portal's and the CLI's advances are (issue 41 §5): moving a
    # programme's clock expires codes, sessions and cards, which an operator must be able to see.
    after_s = offset_ms // 1000
    await audit.record(
        db,
        container.clock.system_ms(),
        audit.SIMULATOR,
        "clock.advance",
        programme.id,
        changes={"clockOffsetSeconds": [after_s - body.seconds, after_s]},
    )
    # The new time is committed alone, first; then each due step in a transaction of its own.
    after_commit(db, partial(due_work.catch_up, container.db, container.clock, programme.id))
    return ClockState(offsetSeconds=offset_ms // 1000, now=container.clock.now_ms(offset_ms))


class Reject(Request):
    permanent: bool = False


async def _simulator_ctx(db: Db, programme: SimulatorProgramme, container: AppContainer) -> Ctx:
    return Ctx(db, programme, container.clock.now_ms(programme.clock_offset_ms))


SimCtx = Annotated[Ctx, Depends(_simulator_ctx)]
IdentityPath = Annotated[str, Path(pattern=r"^[0-9]+$")]


async def _identity_id(ctx: Ctx, value: str, kind: str) -> int:
    number = parse_id(value)
    if number is None:
        raise NotFound("Identity not found")
    await identities.load(ctx, number, kind)
    return number


@router.post(
    "/corporates/{corporate_id}/verify",
    operation_id="simulateCorporateVerify",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
)
async def corporate_verify(corporate_id: IdentityPath, ctx: SimCtx) -> Response:
    """Fully verifies a corporate: root e-mail and mobile verified, KYB APPROVED."""
    await identities.simulate_verify(
        ctx, await _identity_id(ctx, corporate_id, CORPORATE), CORPORATE
    )
    return Response(status_code=204)


@router.post(
    "/consumers/{consumer_id}/verify",
    operation_id="simulateConsumerVerify",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
)
async def consumer_verify(consumer_id: IdentityPath, ctx: SimCtx) -> Response:
    """Fully verifies a consumer: e-mail and mobile verified, KYC APPROVED."""
    number = await _identity_id(ctx, consumer_id, CONSUMER)
    await identities.simulate_verify(ctx, number, CONSUMER)
    return Response(status_code=204)


@router.post(
    "/corporates/{corporate_id}/reject",
    operation_id="simulateCorporateReject",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
)
async def corporate_reject(
    corporate_id: IdentityPath, ctx: SimCtx, body: Reject | None = Body(default=None)
) -> Response:
    """Rejects a corporate's KYB; a permanent rejection refuses a new start."""
    number = await _identity_id(ctx, corporate_id, CORPORATE)
    await identities.simulate_reject(ctx, number, CORPORATE, bool(body and body.permanent))
    return Response(status_code=204)


@router.post(
    "/consumers/{consumer_id}/reject",
    operation_id="simulateConsumerReject",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
)
async def consumer_reject(
    consumer_id: IdentityPath, ctx: SimCtx, body: Reject | None = Body(default=None)
) -> Response:
    number = await _identity_id(ctx, consumer_id, CONSUMER)
    await identities.simulate_reject(ctx, number, CONSUMER, bool(body and body.permanent))
    return Response(status_code=204)


class CurrencyAmount(Request):
    currency: Annotated[str, StringConstraints(pattern=r"^[A-Z]*$", min_length=3, max_length=3)]
    # Minor units. Any integer is taken: one the account cannot hold is the business answer
    # DENIED_AMOUNT_NOT_POSITIVE or DENIED_OTHER, as on the reference; so is one over the
    # scheme limit (D11b), which is why the limit is described rather than a `maximum`.
    amount: int | None = Field(
        default=None,
        description="Minor units. At most the scheme limit of one payment: "
        f"{SEPA_LIMIT} for EUR (SEPA), {FASTER_PAYMENTS_LIMIT} for GBP (Faster Payments), "
        f"{SEPA_LIMIT} in any other currency's minor units. A larger amount answers "
        "`DENIED_OTHER` and nothing moves; zero or less answers `DENIED_AMOUNT_NOT_POSITIVE`.",
    )


PaymentNetwork = Literal["SEPA", "FASTER_PAYMENTS", "SWIFT", "BACS", "CHAPS", "RIX"]
# Any integer: one that is not a positive int64 is the business answer DENIED_INVALID_TX_ID.
TxId = int


class SepaDetails(Request):
    iban: Annotated[str, StringConstraints(pattern=r"^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$")]
    bankIdentifierCode: Annotated[str, StringConstraints(min_length=8, max_length=11)] | None = None


class FasterPaymentsDetails(Request):
    accountNumber: Annotated[str, StringConstraints(pattern=r"^[0-9]{8}$")]
    sortCode: Annotated[str, StringConstraints(pattern=r"^[0-9]{6}$")]


# Free text a deposit carries (kept, and shown in statements and webhooks): bounded as the
# interface bounds a payment party's name (an outgoing wire transfer's beneficiary name).
Text = Annotated[str, StringConstraints(max_length=200)]
SenderIban = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9_-]+$", max_length=50)]


class DepositByAccountId(Request):
    depositAmount: CurrencyAmount
    senderName: Text | None = None
    reference: Text | None = None
    receiverName: Text | None = None
    senderIban: SenderIban | None = None
    txId: TxId | None = None
    sepa: SepaDetails | None = None
    fasterPayments: FasterPaymentsDetails | None = None
    paymentNetwork: PaymentNetwork | None = None


class IbanDetails(Request):
    iban: Annotated[str, StringConstraints(pattern=r"^[A-Z0-9]*$", max_length=34)]


class DepositByIban(Request):
    depositAmount: CurrencyAmount
    iban: Annotated[str, StringConstraints(max_length=50)] | None = Field(
        default=None, description="Deprecated: use destinationIbanDetails"
    )
    destinationIbanDetails: IbanDetails | None = None
    paymentReference: Text | None = None
    senderName: Text | None = None
    reference: Text | None = None
    receiverName: Text | None = None
    txId: TxId | None = None


class Code(BaseModel):
    code: str


def _details(body: DepositByAccountId | DepositByIban) -> dict[str, str]:
    return {
        "sender": body.senderName or "",
        "reference": body.reference or "",
        "receiverName": body.receiverName or "",
    }


@router.post(
    "/accounts/{account_id}/deposit",
    operation_id="simulateDepositByAccountId",
    dependencies=[SimulatorIdempotent],
)
async def deposit_by_id(
    account_id: Annotated[str, Path(pattern=r"^[0-9]+$")], body: DepositByAccountId, ctx: SimCtx
) -> Code:
    """Credits a managed account as an incoming payment would (settlement → account)."""
    number = parse_id(account_id)
    account = (
        None
        if number is None
        else await accounts_repo.get_in_programme(ctx.db, ctx.programme.id, number, for_update=True)
    )
    code = await accounts.deposit(
        ctx,
        account,
        body.depositAmount.currency,
        body.depositAmount.amount,
        _details(body),
        tx_id=body.txId,
    )
    await _linked_transfer(ctx, account, code, body.reference)
    return Code(code=code)


@router.post(
    "/accounts/deposit", operation_id="simulateDepositByIban", dependencies=[SimulatorIdempotent]
)
async def deposit_by_iban(body: DepositByIban, ctx: SimCtx) -> Code:
    """An incoming wire transfer to an IBAN-upgraded account."""
    target = body.destinationIbanDetails.iban if body.destinationIbanDetails else body.iban
    account = None
    if target:
        account = await accounts_repo.by_iban(ctx.db, ctx.programme.id, target.replace(" ", ""))
    code = await accounts.deposit(
        ctx,
        account,
        body.depositAmount.currency,
        body.depositAmount.amount,
        _details(body),
        tx_id=body.txId,
    )
    await _linked_transfer(ctx, account, code, body.reference)
    return Code(code=code)


async def _linked_transfer(
    ctx: Ctx, account: ManagedAccount | None, code: str, reference: str | None
) -> None:
    """A deposit credited with a linked account's transfer-instruction reference completes
    that step (D39, D42): the deposit is the transfer the instruction asked for."""
    if account is not None and code == "COMPLETED" and reference:
        await linked_accounts.transfer_arrived(ctx, account, reference)


@router.post(
    "/managed_accounts/{account_id}/iban/allocate",
    operation_id="simulateIbanAllocate",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
    responses=conflicts("IBAN_NOT_PENDING"),
)
async def iban_allocate(
    account_id: Annotated[str, Path(pattern=r"^[0-9]+$")], ctx: SimCtx
) -> Response:
    """Finishes a pending IBAN allocation now instead of after the programme's delay."""
    number = parse_id(account_id)
    account = (
        None
        if number is None
        else await accounts_repo.get_in_programme(ctx.db, ctx.programme.id, number)
    )
    if account is None:
        raise NotFound("Managed account not found")
    await accounts.allocate_pending_iban(ctx, account)
    return Response(status_code=204)


# Push step-up challenges (contract §8): the device's answer, which a sandbox has no device for.


class ChallengeCode(BaseModel):
    code: str


ChallengePath = Annotated[str, Path(pattern=r"^[0-9]+$")]
CHALLENGE_CONFLICTS: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such challenge of that user in this programme"},
    409: {
        "description": "The challenge is no longer pending: CHALLENGE_ALREADY_SETTLED, or "
        "CHALLENGE_EXPIRED once its 5 minutes are up",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "errorCode": {
                            "type": "string",
                            "enum": ["CHALLENGE_ALREADY_SETTLED", "CHALLENGE_EXPIRED"],
                        }
                    },
                }
            }
        },
    },
}


async def _settle(ctx: Ctx, credentials_id: str, challenge_id: str, outcome: str) -> ChallengeCode:
    """A step-up challenge, or a payment's push challenge (named by its id or the payment's)."""
    user_id, number = parse_id(credentials_id), parse_id(challenge_id)
    if user_id is None or number is None:
        raise NotFound("Challenge not found")
    batch = await batch_sca.push_of(ctx, number, user_id)
    if batch is not None:  # a batch's push (the 3.63 line's `/challenges`, D37)
        return ChallengeCode(code=await batch_sca.settle_push(ctx, batch, outcome))
    found = await payment_sca.push_challenge_of(ctx, user_id, number)
    if found is not None:
        return ChallengeCode(code=await payment_sca.settle_push(ctx, *found, outcome))
    return ChallengeCode(code=await factors.settle_challenge(ctx, user_id, number, outcome))


@router.post(
    "/factors/{credentials_id}/challenges/{challenge_id}/verify_success",
    operation_id="simulateChallengeVerifySuccess",
    dependencies=[SimulatorIdempotent],
    responses=CHALLENGE_CONFLICTS,
)
async def challenge_verify_success(
    credentials_id: ChallengePath, challenge_id: ChallengePath, ctx: SimCtx
) -> ChallengeCode:
    """The device approves: `COMPLETED`, and the session the challenge was issued in is stepped
    up. `credentials_id` is the user's id (login `credentials.id`)."""
    return await _settle(ctx, credentials_id, challenge_id, factors.COMPLETED)


@router.post(
    "/factors/{credentials_id}/challenges/{challenge_id}/verify_invalid",
    operation_id="simulateChallengeVerifyInvalid",
    dependencies=[SimulatorIdempotent],
    responses=CHALLENGE_CONFLICTS,
)
async def challenge_verify_invalid(
    credentials_id: ChallengePath, challenge_id: ChallengePath, ctx: SimCtx
) -> ChallengeCode:
    """The device rejects: `DENIED`; the session still needs a step-up."""
    return await _settle(ctx, credentials_id, challenge_id, factors.DENIED)


@router.post(
    "/factors/{credentials_id}/challenges/{challenge_id}/verify_expired",
    operation_id="simulateChallengeVerifyExpired",
    dependencies=[SimulatorIdempotent],
    responses=CHALLENGE_CONFLICTS,
)
async def challenge_verify_expired(
    credentials_id: ChallengePath, challenge_id: ChallengePath, ctx: SimCtx
) -> ChallengeCode:
    """The device never answers: `EXPIRED`; a new challenge may be issued."""
    return await _settle(ctx, credentials_id, challenge_id, factors.EXPIRED)


# Payments (D14, D15)

PaymentPath = Annotated[str, Path(pattern=r"^[0-9]+$")]


class PaymentCode(BaseModel):
    code: str


async def _locked_payment(ctx: Ctx, value: str) -> Payment | None:
    number = parse_id(value)
    if number is None:
        return None
    return await payments_repo.by_id(ctx.db, ctx.programme.id, number, lock=True)


async def _payment(ctx: Ctx, value: str, kind: str, what: str) -> Payment:
    number = parse_id(value)
    payment = (
        None
        if number is None
        else await payments_repo.by_id(ctx.db, ctx.programme.id, number, True)
    )
    if payment is None or payment.kind != kind:
        raise NotFound(f"{what} not found")
    return payment


async def _wire(ctx: Ctx, owt_id: str, action: str) -> PaymentCode:
    number = parse_id(owt_id)
    payment = (
        None
        if number is None
        else await payments_repo.by_id(ctx.db, ctx.programme.id, number, True)
    )
    if payment is None or payment.kind != OWT:
        return PaymentCode(code="DENIED_WIRE_TRANSFER_NOT_FOUND")
    return PaymentCode(code=await payment_owt.simulate(ctx, payment, action))


@router.post(
    "/wiretransfers/outgoing/{outgoing_wire_transfer_id}/accept",
    operation_id="simulateOutgoingWireTransferAccept",
    dependencies=[SimulatorIdempotent],
)
async def owt_accept(outgoing_wire_transfer_id: PaymentPath, ctx: SimCtx) -> PaymentCode:
    """Completes a submitted (or approved) outgoing wire transfer at once: `COMPLETED`;
    `DENIED_WIRE_TRANSFER_ALREADY_COMPLETED`, `DENIED_WIRE_TRANSFER_NOT_FOUND`, or `DENIED`
    for one still waiting for SCA or already ended."""
    return await _wire(ctx, outgoing_wire_transfer_id, "accept")


@router.post(
    "/wiretransfers/outgoing/{outgoing_wire_transfer_id}/reject",
    operation_id="simulateOutgoingWireTransferReject",
    dependencies=[SimulatorIdempotent],
)
async def owt_reject(outgoing_wire_transfer_id: PaymentPath, ctx: SimCtx) -> PaymentCode:
    """The sending institution rejects a submitted outgoing wire transfer: it ends `REJECTED`
    (rejectedInfo SYSTEM) and amount + fee are released. Codes as for accept."""
    return await _wire(ctx, outgoing_wire_transfer_id, "reject")


@router.post(
    "/wiretransfers/outgoing/{outgoing_wire_transfer_id}/return",
    operation_id="simulateOutgoingWireTransferReturn",
    dependencies=[SimulatorIdempotent],
)
async def owt_return(outgoing_wire_transfer_id: PaymentPath, ctx: SimCtx) -> PaymentCode:
    """The beneficiary's bank returns a completed outgoing wire transfer: it ends `RETURNED`;
    the amount comes back to the source, and the fee too when the wire transfer profile's
    `returnFeeRefunded` is on. `DENIED` unless it was `COMPLETED`."""
    return await _wire(ctx, outgoing_wire_transfer_id, "return")


@router.post(
    "/sends/{send_id}/reject",
    operation_id="simulateSendReject",
    dependencies=[SimulatorIdempotent],
    responses={404: {"description": "No send of that id in this programme"}},
)
async def send_reject(send_id: PaymentPath, ctx: SimCtx) -> PaymentCode:
    """Rejects a send still waiting for SCA: `REJECTED`, amount + fee released (`COMPLETED`);
    `DENIED` for a send that already ended."""
    payment = await _payment(ctx, send_id, SEND, "Send")
    return PaymentCode(code=await payment_sca.reject_waiting(ctx, payment))


@router.post(
    "/challenges/{payment_id}/expire",
    operation_id="simulateChallengeExpire",
    dependencies=[SimulatorIdempotent],
    responses={404: {"description": "No send or outgoing wire transfer of that id"}},
)
async def challenge_expire(payment_id: PaymentPath, ctx: SimCtx) -> PaymentCode:
    """The SCA time of a send or outgoing wire transfer runs out now, as 5 minutes of the
    programme clock would: a send ends `REJECTED`, a wire transfer `FAILED`, the hold released
    (`COMPLETED`); `DENIED` for a payment not waiting for SCA."""
    payment = await _locked_payment(ctx, payment_id)
    if payment is None or payment.kind not in (SEND, OWT):
        raise NotFound("Payment not found")
    return PaymentCode(code=await payment_sca.expire_now(ctx, payment))


# A batch challenge's push answered as the reference's sandbox names it (D37, D42): `authy` is
# the AUTHY channel, `okay` the BIOMETRIC one; each says "not found" its own way (as observed).

PUSH_VENDORS = {"authy": ("AUTHY", "NOT_FOUND"), "okay": ("BIOMETRIC", "REQUEST_NOT_FOUND")}


@router.post(
    "/{vendor}/challenge/{sca_challenge_id}/{decision}",
    operation_id="simulateMultipleChallengePush",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
    responses=conflicts("NOT_FOUND", "REQUEST_NOT_FOUND", "ALREADY_COMPLETED"),
)
async def batch_push(
    vendor: Literal["authy", "okay"],
    sca_challenge_id: ChallengePath,
    decision: Literal["accept", "reject"],
    ctx: SimCtx,
) -> Response:
    """The device accepts or rejects the push of a batch challenge (`POST /challenges/push/
    {channel}` on the 3.63 line): accept passes every payment in it, reject ends the challenge
    (its payments may be challenged again, the rejection counted as a wrong answer). 409
    `NOT_FOUND` (authy) or `REQUEST_NOT_FOUND` (okay) when no push on that channel has this id;
    `ALREADY_COMPLETED` when it was answered already or its time is up."""
    channel, missing = PUSH_VENDORS[vendor]
    number = parse_id(sca_challenge_id)
    row = None if number is None else await batch_sca.push_of(ctx, number)
    if row is None or row.channel != channel:
        raise Conflict(missing)
    outcome = factors.COMPLETED if decision == "accept" else factors.DENIED
    try:
        await batch_sca.settle_push(ctx, row, outcome)
    except Conflict:
        raise Conflict("ALREADY_COMPLETED") from None
    return Response(status_code=204)


@router.post(
    "/{vendor}/beneficiary_management/{batch_id}/{decision}",
    operation_id="simulateBeneficiaryBatchPush",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
    responses=conflicts("NOT_FOUND", "REQUEST_NOT_FOUND", "ALREADY_COMPLETED"),
)
async def beneficiary_batch_push(
    vendor: Literal["authy", "okay"],
    batch_id: ChallengePath,
    decision: Literal["accept", "reject"],
    ctx: SimCtx,
) -> Response:
    """The device accepts or rejects the push of a beneficiary batch's challenge (D38, D42):
    accept completes the batch, reject fails it. 409 `NOT_FOUND` (authy) or `REQUEST_NOT_FOUND`
    (okay) when no push on that channel is open on the batch; `ALREADY_COMPLETED` when it was
    decided already."""
    channel, missing = PUSH_VENDORS[vendor]
    number = parse_id(batch_id)
    why = (
        "missing"
        if number is None
        else await beneficiaries.push_answered(ctx, number, channel, decision == "accept")
    )
    if why == "missing":
        raise Conflict(missing)
    if why == "decided":
        raise Conflict("ALREADY_COMPLETED").keeping_changes()
    return Response(status_code=204)


# Scheduled payments (3.63 line, D40, D42): one goes now, whatever its time.

SCHEDULED_KINDS = {"transfers": TRANSFER, "sends": SEND, "outgoing_wire_transfers": OWT}


class ScheduledRun(BaseModel):
    state: Literal["SUCCESS", "ERROR"]
    errorCode: str | None = None


@router.post(
    "/{kind}/{payment_id}/scheduled_execute",
    operation_id="simulateScheduledExecute",
    dependencies=[SimulatorIdempotent],
    response_model_exclude_none=True,
    responses={
        **conflicts("TRANSACTION_NOT_SCHEDULED"),
        404: {"description": "No payment of that kind and id in this programme"},
    },
)
async def scheduled_execute(
    kind: Literal["transfers", "sends", "outgoing_wire_transfers"],
    payment_id: PaymentPath,
    ctx: SimCtx,
) -> ScheduledRun:
    """Runs a `SCHEDULED` transfer, send or outgoing wire transfer now, as its time would: the
    checks of a create again, then the money moves (a wire transfer is `SUBMITTED` and on).
    `SUCCESS`, or `ERROR` with why it ended `FAILED` (e.g. `FUNDS_INSUFFICIENT`); a payment not
    scheduled is 409 `TRANSACTION_NOT_SCHEDULED`."""
    payment = await _payment(ctx, payment_id, SCHEDULED_KINDS[kind], "Payment")
    if payment.state != SCHEDULED:
        raise Conflict("TRANSACTION_NOT_SCHEDULED")
    await payment_steps.execute(ctx, payment)
    if payment.state == FAILED:
        code = payment.failure or "GENERIC"
        return ScheduledRun(
            state="ERROR", errorCode="FUNDS_INSUFFICIENT" if code == "INSUFFICIENT_FUNDS" else code
        )
    return ScheduledRun(state="SUCCESS")


# Linked accounts (3.63 line, v3.63.md §4.3, D42).

LinkedAccountPath = Annotated[str, Path(pattern=r"^[0-9]+$", max_length=19)]


async def _linked_account_id(value: str) -> int:
    number = parse_id(value)
    if number is None:
        raise NotFound("Linked account not found")
    return number


@router.post(
    "/linked_accounts/{account_id}/set",
    operation_id="simulateLinkedAccountSet",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
    responses=conflicts("ALREADY_COMPLETED", "ALREADY_REJECTED"),
)
async def linked_account_set(
    account_id: LinkedAccountPath, body: SimulatedDecision, ctx: SimCtx
) -> Response:
    """Decides a linked account's verification at once, whatever its steps: `VERIFIED` (the
    account `ACTIVE`) or `REJECTED`, with `overriddenReason` `SIMULATOR`. An account no longer
    `PENDING_VERIFICATION` is 409 `ALREADY_COMPLETED` (`ALREADY_REJECTED` if rejected)."""
    number = await _linked_account_id(account_id)
    await linked_accounts.simulate_set(ctx, number, body.state)
    return Response(status_code=204)


@router.post(
    "/linked_accounts/{account_id}/verify",
    operation_id="simulateLinkedAccountVerify",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
    responses=conflicts("ALREADY_COMPLETED", "ALREADY_REJECTED"),
)
async def linked_account_verify(
    account_id: LinkedAccountPath, body: SimulatedSteps, ctx: SimCtx
) -> Response:
    """Ends the steps named of a linked account's verification run with `result`: when every
    step is `COMPLETED` the account is `ACTIVE`; a step `REJECTED` rejects it. A step the run
    does not have (`MICRO_DEPOSIT`) is 400; a run already decided 409."""
    number = await _linked_account_id(account_id)
    await linked_accounts.simulate_verify(ctx, number, body.steps, body.result)
    return Response(status_code=204)


ROUTERS: list[APIRouter] = [
    router,
    secure_session.router,
    card_pin.router,
    card_lifecycle_router,
    card_simulator.router,
]


def build_simulator() -> FastAPI:
    app = DescribedApp(
        title="multibank sandbox simulator",
        version="1",
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url="/redoc",
    )
    install_error_handlers(app)
    for r in ROUTERS:
        app.include_router(r)
    return app
