"""Batch SCA challenges (the 3.63 line's `/challenges`, v3.63.md §3, D36, D37): one SMS code or
one push confirms several sends or wire transfers of one identity at once.

All or nothing at start: every id must be the caller's identity's payment of the named kind
(else 404, nothing made) and each must await SCA with no challenge open on it (else 409
`STATE_INVALID`, nothing made). A started challenge marks each payment as a per-resource one
would (`sca.start_otp`: channel, user, `PENDING_CHALLENGE`, 5 minutes), so the deprecated
per-resource operations refuse a payment inside it and a batch refuses one inside theirs: one
challenge model (D36). The right answer passes every payment in id order (a send completes, a
wire transfer is submitted, a scheduled one becomes `SCHEDULED`: `sca.passed`); wrong answers
count on the challenge as on a per-resource one, and the last one ends its payments as an
expired challenge ends them (a send `REJECTED`, a wire transfer `FAILED`, the hold released).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from sqlalchemy import select

from multibank.factors import service as factors
from multibank.kernel import codes, notify
from multibank.kernel.errors import Conflict, Forbidden, NotFound
from multibank.kernel.ids import new_id
from multibank.kernel.money import Money
from multibank.kernel.tokens import AuthSession
from multibank.linked_accounts import service as linked
from multibank.payments import repository as repo
from multibank.payments import sca
from multibank.payments.models import (
    AWAITING_SCA,
    BATCH_COMPLETED,
    BATCH_FAILED,
    BATCH_PENDING,
    OWT,
    PENDING_CHALLENGE,
    SEND,
    BatchChallenge,
    Payment,
)
from multibank.payments.service import CHALLENGE_TTL_MS
from multibank.programmes.context import Ctx

SENDS, OWTS, DECLARATIONS = "sends", "outgoing_wire_transfers", "linked_account_declaration"
KINDS = {SENDS: SEND, OWTS: OWT}
OTP_PURPOSE = "SCA_BATCH"


def _subject(row: BatchChallenge) -> str:
    return f"batch:{row.id}"


def _permitted(auth: AuthSession, resource_type: str) -> None:
    """A linked account's declaration is its identity's root user's to confirm (D37)."""
    if resource_type == DECLARATIONS and auth.credential_type != "ROOT":
        raise Forbidden("INSUFFICIENT_PERMISSIONS")


async def _resources(
    ctx: Ctx, auth: AuthSession, resource_type: str, ids: Sequence[str]
) -> list[Payment]:
    """The caller's identity's payments named, locked in id order; 404 for any that is not one
    (unknown, another identity's, of the other kind)."""
    kind = KINDS[resource_type]
    found = []
    for number in sorted({int(i) for i in ids}):
        payment = await repo.get(
            ctx.db, ctx.programme.id, auth.identity_id, kind, number, lock=True, hidden=()
        )
        if payment is None:
            raise NotFound("Resource not found")
        found.append(payment)
    return found


def _can_include(payment: Payment) -> None:
    """Awaiting SCA with no challenge open on it; an exempted one has nothing to confirm."""
    waiting = payment.state in AWAITING_SCA and payment.challenge_channel is None
    if not waiting or payment.exemption is not None:
        raise Conflict("STATE_INVALID")


async def _start(
    ctx: Ctx, auth: AuthSession, resource_type: str, ids: Sequence[str], channel: str
) -> tuple[BatchChallenge, list[Payment]]:
    declared: list[str] | None = None
    payments: list[Payment] = []
    if resource_type == DECLARATIONS:
        # Linked accounts whose ownership declaration awaits the root user (D37, D39).
        accounts = await linked.awaiting_declaration(ctx, auth.identity_id, ids, refuse_state=True)
        declared = [str(a.id) for a in accounts]
    else:
        payments = await _resources(ctx, auth, resource_type, ids)
        for payment in payments:
            _can_include(payment)
    row = BatchChallenge(
        id=new_id(),
        programme_id=ctx.programme.id,
        identity_id=auth.identity_id,
        user_id=auth.user_id,
        session_id=auth.id,
        resource_type=resource_type,
        channel=channel,
        status=BATCH_PENDING,
        failures=0,
        created_at=ctx.now,
        expires_at=ctx.now + CHALLENGE_TTL_MS,
        resource_ids=declared,
    )
    ctx.db.add(row)
    for payment in payments:
        payment.batch_challenge_id = row.id
        sca.started(ctx, payment, auth, channel)
    return row, payments


async def start_otp(
    ctx: Ctx, auth: AuthSession, resource_type: str, ids: Sequence[str]
) -> BatchChallenge:
    """One SMS code for every payment named, with their count and total in the message."""
    _permitted(auth, resource_type)
    mobile = await factors.registered_mobile(ctx, auth)
    row, payments = await _start(ctx, auth, resource_type, ids, sca.SMS)
    issued = await ctx.issue_code(_subject(row), OTP_PURPOSE, ttl_ms=CHALLENGE_TTL_MS)
    totals: dict[str, int] = {}
    for p in payments:
        totals[p.currency] = totals.get(p.currency, 0) + p.amount + p.fee
    amount = " and ".join(Money(total, currency).format() for currency, total in totals.items())
    await notify.record(
        ctx.db,
        programme_id=ctx.programme.id,
        sandbox=ctx.sandbox,
        channel="SMS",
        recipient=mobile,
        subject="Payments confirmation",
        body=f"Your code to make {len(payments)} payments of {amount} in all is {issued.code}. "
        "It expires in 5 minutes.",
        now_ms=ctx.now,
    )
    await ctx.db.flush()
    return row


async def start_push(
    ctx: Ctx, auth: AuthSession, resource_type: str, ids: Sequence[str], channel: str
) -> BatchChallenge:
    """A push to the user's enrolled device for every payment named."""
    _permitted(auth, resource_type)
    await factors.require_push(ctx, auth, channel)
    row, _ = await _start(ctx, auth, resource_type, ids, channel)
    await ctx.db.flush()
    return row


async def _challenge(
    ctx: Ctx, auth: AuthSession, challenge_id: str, resource_type: str
) -> BatchChallenge:
    """The identity's challenge of that kind, locked; 404 otherwise."""
    stmt = (
        select(BatchChallenge)
        .where(
            BatchChallenge.programme_id == ctx.programme.id,
            BatchChallenge.identity_id == auth.identity_id,
            BatchChallenge.id == int(challenge_id),
        )
        .with_for_update()
    )
    row = (await ctx.db.execute(stmt)).scalar_one_or_none()
    if row is None or row.resource_type != resource_type:
        raise NotFound("Challenge not found")
    return row


async def _payments(ctx: Ctx, row: BatchChallenge) -> list[Payment]:
    """The challenge's payments still waiting on it, locked in id order."""
    stmt = (
        select(Payment)
        .where(
            Payment.programme_id == ctx.programme.id,
            Payment.batch_challenge_id == row.id,
            Payment.state == PENDING_CHALLENGE,
        )
        .order_by(Payment.id)
        .with_for_update()
    )
    return list((await ctx.db.execute(stmt)).scalars())


async def _passed(ctx: Ctx, row: BatchChallenge) -> None:
    row.status = BATCH_COMPLETED
    row.settled_at = ctx.now
    if row.resource_ids is not None:  # declarations: each still awaited is done
        for account_id in row.resource_ids:
            try:
                found = await linked.awaiting_declaration(ctx, row.identity_id, [account_id])
            except NotFound:
                continue  # removed or decided meanwhile
            await linked.declaration_passed(ctx, found[0])
        return
    for payment in await _payments(ctx, row):
        await sca.passed(ctx, payment)


async def _ended(ctx: Ctx, row: BatchChallenge, why: str) -> None:
    """Not passed: its payments end as an expired challenge ends them, the holds released."""
    row.status = BATCH_FAILED
    row.settled_at = ctx.now
    for payment in await _payments(ctx, row):
        await sca.end(ctx, payment, why)


async def verify_otp(
    ctx: Ctx, auth: AuthSession, challenge_id: str, resource_type: str, code: str
) -> None:
    """The batch's SMS code, from the user who started it. A refusal that counts (a wrong code,
    an expiry) is kept although the answer is a 409."""
    _permitted(auth, resource_type)
    row = await _challenge(ctx, auth, challenge_id, resource_type)
    if row.status != BATCH_PENDING or row.channel != sca.SMS:
        raise Conflict("STATE_INVALID")
    if row.user_id != auth.user_id:
        raise Conflict("CHANNEL_NOT_REGISTERED")
    await factors.registered_mobile(ctx, auth)
    if ctx.now >= row.expires_at:
        await _ended(ctx, row, sca.CHALLENGE_EXPIRED)
        raise Conflict("VERIFICATION_CODE_EXPIRED").keeping_changes()
    try:
        await codes.consume(
            ctx.db,
            programme_id=ctx.programme.id,
            sandbox=ctx.sandbox,
            subject=_subject(row),
            purpose=OTP_PURPOSE,
            code=code,
            now_ms=ctx.now,
        )
    except codes.CodeExpired:
        await _ended(ctx, row, sca.CHALLENGE_EXPIRED)
        raise Conflict("VERIFICATION_CODE_EXPIRED").keeping_changes() from None
    except codes.CodeInvalid:
        await _wrong_answer(ctx, row)
    await _passed(ctx, row)
    await ctx.db.flush()


async def _wrong_answer(ctx: Ctx, row: BatchChallenge) -> None:
    row.failures += 1
    limit = ctx.programme.sca_challenge_limit
    if row.failures >= limit:
        await _ended(ctx, row, sca.CHALLENGE_LIMIT_EXCEEDED)
        raise Conflict(sca.CHALLENGE_LIMIT_EXCEEDED).keeping_changes()
    if row.failures == limit - 1:
        raise Conflict("ONE_CHALLENGE_LIMIT_REMAINING").keeping_changes()
    raise Conflict("VERIFICATION_CODE_INVALID").keeping_changes()


# The device's answer to a batch's push (the simulator, D37, D42)


async def push_of(ctx: Ctx, number: int, user_id: int | None = None) -> BatchChallenge | None:
    """The programme's push batch challenge `number` (of `user_id`, when given), locked."""
    stmt = select(BatchChallenge).where(
        BatchChallenge.programme_id == ctx.programme.id,
        BatchChallenge.id == number,
        BatchChallenge.channel != sca.SMS,
    )
    if user_id is not None:
        stmt = stmt.where(BatchChallenge.user_id == user_id)
    row = (await ctx.db.execute(stmt.with_for_update())).scalar_one_or_none()
    return row


async def settle_push(ctx: Ctx, row: BatchChallenge, outcome: str) -> str:
    """COMPLETED passes the batch; DENIED ends it (its payments freed for a new challenge, the
    denial counted on each as a wrong answer); EXPIRED ends its payments. Answers `outcome`."""
    if row.status != BATCH_PENDING:
        raise Conflict("CHALLENGE_ALREADY_SETTLED")
    if row.expires_at <= ctx.now:
        raise Conflict("CHALLENGE_EXPIRED")
    if outcome == factors.COMPLETED:
        await _passed(ctx, row)
    elif outcome == factors.DENIED:
        row.status = BATCH_FAILED
        row.settled_at = ctx.now
        for payment in await _payments(ctx, row):
            payment.challenge_channel = None
            payment.batch_challenge_id = None
            with contextlib.suppress(Conflict):
                await sca.wrong_answer(ctx, payment)
    else:
        await _ended(ctx, row, sca.CHALLENGE_EXPIRED)
    await ctx.db.flush()
    return outcome
