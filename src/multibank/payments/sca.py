"""Strong customer authentication of sends and wire transfers (D13; money-movement.md §1.3, §1.5).

A payment that needs SCA waits, its amount + fee held, for one challenge at a time: an SMS code
(`…/challenges/otp/SMS`, then `…/verify`) or a push to an enrolled device (`…/challenges/push/
{channel}`, settled in the sandbox by the simulator's factor challenge operations). The code is
bound to the payment (its id, amount and payee are in the SMS: PSD2 dynamic linking) and to the
user who started the challenge. Wrong answers count down to ONE_CHALLENGE_LIMIT_REMAINING and
then CHALLENGE_LIMIT_EXCEEDED, which ends the payment. A challenge not passed within 5 minutes of
its start (or of the payment's creation, when none was started) ends it too: a send `REJECTED`,
a wire transfer `FAILED`, the hold released.
"""

from __future__ import annotations

import contextlib

from sqlalchemy import select

from multibank.factors import service as factors
from multibank.factors.models import ScaChallenge
from multibank.kernel import codes, notify
from multibank.kernel.errors import Conflict
from multibank.kernel.ids import new_id
from multibank.kernel.money import Money
from multibank.kernel.tokens import AuthSession
from multibank.payments import owt
from multibank.payments import repository as repo
from multibank.payments.models import (
    AWAITING_SCA,
    FAILED,
    PENDING_CHALLENGE,
    REJECTED,
    SEND,
    Payment,
)
from multibank.payments.service import CHALLENGE_TTL_MS, give_back, pay_out, schedule
from multibank.programmes.context import Ctx

SMS = "SMS"
OTP_PURPOSE = "SCA_PAYMENT"
CHALLENGE_EXPIRED = "CHALLENGE_EXPIRED"
CHALLENGE_LIMIT_EXCEEDED = "CHALLENGE_LIMIT_EXCEEDED"


def _subject(payment: Payment) -> str:
    return f"payment:{payment.id}"


def _ended_state(payment: Payment) -> str:
    return REJECTED if payment.kind == SEND else FAILED


def _payee(payment: Payment) -> str:
    if payment.beneficiary:
        return str(payment.beneficiary.get("name", "the beneficiary"))
    kind = "card" if payment.destination_type == "managed_cards" else "account"
    return f"{kind} {payment.destination_id}"


def _can_start(payment: Payment) -> None:
    if payment.exemption is not None:
        raise Conflict("SCA_EXEMPTION_APPLIED")
    if payment.state not in AWAITING_SCA or payment.challenge_channel is not None:
        raise Conflict("STATE_INVALID")


def started(ctx: Ctx, payment: Payment, auth: AuthSession, channel: str) -> None:
    payment.challenge_channel = channel
    payment.challenge_user_id = auth.user_id
    payment.challenge_started_at = ctx.now
    payment.state = PENDING_CHALLENGE
    payment.due_at = ctx.now + CHALLENGE_TTL_MS
    payment.updated_at = ctx.now


async def start_otp(ctx: Ctx, auth: AuthSession, payment: Payment) -> None:
    """An SMS code to the user's enrolled mobile, naming the amount and the payee."""
    _can_start(payment)
    mobile = await factors.registered_mobile(ctx, auth)
    issued = await ctx.issue_code(_subject(payment), OTP_PURPOSE, ttl_ms=CHALLENGE_TTL_MS)
    amount = Money(payment.amount + payment.fee, payment.currency).format()
    await notify.record(
        ctx.db,
        programme_id=ctx.programme.id,
        sandbox=ctx.sandbox,
        channel="SMS",
        recipient=mobile,
        subject="Payment confirmation",
        body=f"Your code to pay {amount} to {_payee(payment)} is {issued.code}. "
        "It expires in 5 minutes.",
        now_ms=ctx.now,
    )
    started(ctx, payment, auth, SMS)


async def start_push(ctx: Ctx, auth: AuthSession, payment: Payment, channel: str) -> int:
    """A push challenge to the user's enrolled device; answers the challenge's id."""
    _can_start(payment)
    await factors.require_push(ctx, auth, channel)
    row = ScaChallenge(
        id=new_id(),
        programme_id=ctx.programme.id,
        user_id=auth.user_id,
        session_id=auth.id,
        channel=channel,
        status=factors.PENDING,
        created_at=ctx.now,
        expires_at=ctx.now + CHALLENGE_TTL_MS,
        payment_id=payment.id,
    )
    ctx.db.add(row)
    started(ctx, payment, auth, channel)
    await ctx.db.flush()
    return row.id


async def verify_otp(ctx: Ctx, auth: AuthSession, payment: Payment, code: str) -> None:
    """The SMS code of the payment's challenge: a send completes, a wire transfer is submitted.
    A refusal that counts (a wrong code, an expiry) is kept although the answer is a 409."""
    waiting = payment.state == PENDING_CHALLENGE and payment.challenge_channel == SMS
    if not waiting or payment.batch_challenge_id is not None:  # a batch's code is the batch's
        if payment.failure == CHALLENGE_EXPIRED:
            raise Conflict("VERIFICATION_CODE_EXPIRED")
        raise Conflict("STATE_INVALID")
    if payment.challenge_user_id != auth.user_id:
        # The challenge is the starting user's: another user of the identity cannot answer it.
        raise Conflict("CHANNEL_NOT_REGISTERED")
    await factors.registered_mobile(ctx, auth)
    since = payment.challenge_started_at or payment.created_at
    if ctx.now >= since + CHALLENGE_TTL_MS:
        await expire(ctx, payment)
        raise Conflict("VERIFICATION_CODE_EXPIRED").keeping_changes()
    try:
        await codes.consume(
            ctx.db,
            programme_id=ctx.programme.id,
            sandbox=ctx.sandbox,
            subject=_subject(payment),
            purpose=OTP_PURPOSE,
            code=code,
            now_ms=ctx.now,
        )
    except codes.CodeExpired:
        await expire(ctx, payment)
        raise Conflict("VERIFICATION_CODE_EXPIRED").keeping_changes() from None
    except codes.CodeInvalid:
        await wrong_answer(ctx, payment)
    await passed(ctx, payment)


async def wrong_answer(ctx: Ctx, payment: Payment) -> None:
    payment.challenge_failures += 1
    payment.updated_at = ctx.now
    limit = ctx.programme.sca_challenge_limit
    if payment.challenge_failures >= limit:
        await give_back(ctx, payment, _ended_state(payment), CHALLENGE_LIMIT_EXCEEDED)
        raise Conflict(CHALLENGE_LIMIT_EXCEEDED).keeping_changes()
    if payment.challenge_failures == limit - 1:
        raise Conflict("ONE_CHALLENGE_LIMIT_REMAINING").keeping_changes()
    raise Conflict("VERIFICATION_CODE_INVALID").keeping_changes()


async def passed(ctx: Ctx, payment: Payment) -> None:
    payment.sca_at = ctx.now
    if payment.scheduled_at is not None:  # it goes at its time, nothing held till then (D40)
        await schedule(ctx, payment)
    elif payment.kind == SEND:
        await pay_out(ctx, payment)
    else:
        await owt.submit(ctx, payment)


async def expire(ctx: Ctx, payment: Payment) -> None:
    """The payment's time for SCA is up: it ends, the hold released."""
    await end(ctx, payment, CHALLENGE_EXPIRED)


async def end(ctx: Ctx, payment: Payment, why: str) -> None:
    """Its challenge not passed: a send ends `REJECTED`, a wire transfer `FAILED`, the hold
    released, with `why`."""
    await give_back(ctx, payment, _ended_state(payment), why)


async def settle_push(ctx: Ctx, row: ScaChallenge, payment: Payment, outcome: str) -> str:
    """The device's answer to a payment's push challenge (simulator): COMPLETED passes SCA,
    DENIED counts as a wrong answer (a new challenge may be started while attempts remain),
    EXPIRED ends the payment. Answers the simulator's `code`."""
    if row.status != factors.PENDING:
        raise Conflict("CHALLENGE_ALREADY_SETTLED")
    if row.expires_at <= ctx.now:
        raise Conflict("CHALLENGE_EXPIRED")
    row.status = outcome
    row.settled_at = ctx.now
    live = payment.state == PENDING_CHALLENGE and payment.challenge_channel == row.channel
    if not live:  # the payment has moved on (expired, rejected); the device's answer is moot
        await ctx.db.flush()
        return outcome
    if outcome == factors.COMPLETED:
        await passed(ctx, payment)
    elif outcome == factors.DENIED:
        payment.challenge_channel = None
        # Counted; the simulator's answer is the device's, not the count's.
        with contextlib.suppress(Conflict):
            await wrong_answer(ctx, payment)
    else:
        await expire(ctx, payment)
    await ctx.db.flush()
    return outcome


async def push_challenge_of(
    ctx: Ctx, user_id: int, number: int
) -> tuple[ScaChallenge, Payment] | None:
    """The user's payment push challenge named by its own id, or by the payment's id (the
    challenge operations answer 204 without a body, so the sandbox names it by the payment),
    with the payment, locked; None when `number` names neither."""
    mine = (ScaChallenge.programme_id == ctx.programme.id) & (ScaChallenge.user_id == user_id)
    stmt = select(ScaChallenge).where(
        mine, ScaChallenge.payment_id.is_not(None), ScaChallenge.id == number
    )
    row = (await ctx.db.execute(stmt)).scalar_one_or_none()
    if row is None:
        latest = (
            select(ScaChallenge)
            .where(mine, ScaChallenge.payment_id == number)
            .order_by(ScaChallenge.created_at.desc(), ScaChallenge.id.desc())
            .limit(1)
        )
        row = (await ctx.db.execute(latest)).scalar_one_or_none()
    if row is None or row.payment_id is None:
        return None
    payment = await repo.by_id(ctx.db, ctx.programme.id, row.payment_id, lock=True)
    return None if payment is None else (row, payment)


# The simulator's hand on a waiting payment (D15); each answers the simulator's `code`.


async def reject_waiting(ctx: Ctx, payment: Payment) -> str:
    """A send still waiting for SCA is rejected, its hold released; one that ended is DENIED."""
    if payment.state not in AWAITING_SCA:
        return "DENIED"
    await give_back(ctx, payment, REJECTED, "REJECTED_BY_SIMULATOR")
    return "COMPLETED"


async def expire_now(ctx: Ctx, payment: Payment) -> str:
    """The payment's time for SCA runs out now, as 5 minutes of the programme clock would."""
    if payment.state not in AWAITING_SCA:
        return "DENIED"
    await expire(ctx, payment)
    return "COMPLETED"
