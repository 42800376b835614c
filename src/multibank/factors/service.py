"""Additional factors (SMS one-time passwords, push devices) and the step-up of a session that
proves one of them (D7, docs/decisions/0007). Flushes, never commits.

- SMS: enrolment sends a code to the user's mobile; verifying it activates the factor and marks
  the mobile verified. The factor stays bound to that verified mobile: once the mobile changes
  (which resets its verified flag) the factor counts as INACTIVE until enrolled again.
- Push (AUTHY, BIOMETRIC): a sandbox enrolment is ACTIVE at once (D11); a live one waits,
  PENDING_VERIFICATION, for the device to link with the linking code.
- Step-up: an SMS code bound to the session, or a push challenge the simulator settles; either
  marks the session `stepped_up` for the rest of its life, and records when (`stepped_up_at`,
  which a later session's card statement may rely on for a minute: docs/decisions/0059).
"""

from __future__ import annotations

from dataclasses import dataclass

from multibank.factors import events
from multibank.factors import repository as repo
from multibank.factors.models import AuthFactor, ScaChallenge
from multibank.kernel import codes, notify
from multibank.kernel.errors import Conflict, NotFound
from multibank.kernel.ids import new_id
from multibank.kernel.tokens import AuthSession
from multibank.programmes.context import Ctx
from multibank.users.models import User

SMS = "SMS"
AUTHY = "AUTHY"
BIOMETRIC = "BIOMETRIC"
PUSH_CHANNELS = (AUTHY, BIOMETRIC)
# SCAChallengeType of each SCAChannel.
CHANNEL_TYPE = {SMS: "OTP", AUTHY: "PUSH", BIOMETRIC: "BIOMETRIC"}

PENDING_VERIFICATION = "PENDING_VERIFICATION"
ACTIVE = "ACTIVE"
INACTIVE = "INACTIVE"

# Challenge states.
PENDING = repo.PENDING
COMPLETED = "COMPLETED"
DENIED = "DENIED"
EXPIRED = repo.EXPIRED

ENROL_SMS = "SCA_ENROL_SMS"
STEPUP_SMS = "SCA_STEPUP_SMS"
LINK_PUSH = "SCA_LINK_"  # + channel
RESEND_MS = 15_000  # D11: a new SMS code for the same purpose only after 15 seconds
CHALLENGE_TTL_MS = 5 * 60_000


@dataclass(frozen=True)
class FactorView:
    type: str
    status: str
    channel: str


def _mobile(user: User) -> str | None:
    if not user.mobile_country_code or not user.mobile_number:
        return None
    return f"{user.mobile_country_code}{user.mobile_number}"


def _status(factor: AuthFactor, user: User) -> str:
    """The factor's status as it counts: an SMS factor lives only as long as the mobile it was
    verified for (a changed mobile is unverified again, and must not receive step-up codes)."""
    if factor.channel == SMS and factor.status == ACTIVE and not user.mobile_verified:
        return INACTIVE
    return factor.status


async def _user(ctx: Ctx, auth: AuthSession, lock: bool = False) -> User:
    user = await repo.user(ctx.db, ctx.programme.id, auth.user_id, lock)
    if user is None:  # a live session always names a user; never trust that blindly
        raise NotFound("User not found")
    return user


async def _save_factor(
    ctx: Ctx, user: User, factor: AuthFactor | None, channel: str, status: str
) -> AuthFactor:
    """One row per user and channel: a new enrolment reuses an INACTIVE or pending row."""
    if factor is None:
        factor = AuthFactor(
            id=new_id(),
            programme_id=ctx.programme.id,
            user_id=user.id,
            type=CHANNEL_TYPE[channel],
            channel=channel,
            status=status,
            created_at=ctx.now,
            updated_at=ctx.now,
        )
        ctx.db.add(factor)
    else:
        factor.status = status
        factor.updated_at = ctx.now
    await ctx.db.flush()
    return factor


async def _check_resend(ctx: Ctx, subject: str, purpose: str) -> None:
    last = await codes.latest(ctx.db, ctx.programme.id, subject, purpose)
    if last is not None and ctx.now - last.created_at < RESEND_MS:
        raise Conflict("RETRY_IN_15SEC")


async def _send_sms_code(ctx: Ctx, subject: str, purpose: str, recipient: str, what: str) -> None:
    issued = await ctx.issue_code(subject, purpose)
    await notify.record(
        ctx.db,
        programme_id=ctx.programme.id,
        sandbox=ctx.sandbox,
        channel="SMS",
        recipient=recipient,
        subject=what,
        body=f"Your {what.lower()} code is {issued.code}. It expires in 10 minutes.",
        now_ms=ctx.now,
    )


async def _consume(ctx: Ctx, subject: str, purpose: str, code: str) -> None:
    await ctx.check_code(
        subject,
        purpose,
        code,
        "VERIFICATION_CODE_INVALID",
        expired="VERIFICATION_CODE_EXPIRED",
    )


def _enrol_subject(user: User, mobile: str) -> str:
    # Bound to the number the code went to: a code sent before the mobile changed cannot
    # verify the new one.
    return f"user:{user.id}:sms:{mobile}"


# Factors


async def list_factors(ctx: Ctx, auth: AuthSession) -> list[FactorView]:
    user = await _user(ctx, auth)
    rows = await repo.factors_of(ctx.db, ctx.programme.id, user.id)
    return [FactorView(f.type, _status(f, user), f.channel) for f in rows]


async def has_active_factor(ctx: Ctx, auth: AuthSession) -> bool:
    """Whether the user could step up at all (the first factor may be enrolled without)."""
    user = await _user(ctx, auth)
    rows = await repo.factors_of(ctx.db, ctx.programme.id, user.id)
    return any(_status(f, user) == ACTIVE for f in rows)


async def enrol_sms_start(ctx: Ctx, auth: AuthSession) -> None:
    """Step 1: a code to the user's mobile; the factor is PENDING_VERIFICATION until step 2."""
    user = await _user(ctx, auth, lock=True)
    factor = await repo.factor(ctx.db, ctx.programme.id, user.id, SMS)
    if factor is not None and _status(factor, user) == ACTIVE:
        raise Conflict("CHANNEL_ALREADY_REGISTERED")
    mobile = _mobile(user)
    if mobile is None:
        raise Conflict("MOBILE_NUMBER_NOT_AVAILABLE")
    subject = _enrol_subject(user, mobile)
    await _check_resend(ctx, subject, ENROL_SMS)
    await _save_factor(ctx, user, factor, SMS, PENDING_VERIFICATION)
    await _send_sms_code(ctx, subject, ENROL_SMS, mobile, "Enrolment")


async def enrol_sms_verify(ctx: Ctx, auth: AuthSession, code: str) -> None:
    """Step 2: the code of step 1 activates the factor and proves the mobile."""
    user = await _user(ctx, auth, lock=True)
    factor = await repo.factor(ctx.db, ctx.programme.id, user.id, SMS)
    if factor is not None and _status(factor, user) == ACTIVE:
        raise Conflict("CHANNEL_ALREADY_REGISTERED")
    mobile = _mobile(user)
    if factor is None or factor.status != PENDING_VERIFICATION or mobile is None:
        raise Conflict("VERIFICATION_CODE_INVALID")  # no code was sent for this mobile
    await _consume(ctx, _enrol_subject(user, mobile), ENROL_SMS, code)
    factor.status = ACTIVE
    factor.updated_at = ctx.now
    user.mobile_verified = True
    await ctx.db.flush()
    await events.factor(ctx, user.id, SMS, ACTIVE)


async def enrol_push(ctx: Ctx, auth: AuthSession, channel: str) -> str:
    """The linking code the device links with. Sandbox has no device, so the factor is ACTIVE at
    once (D11); live waits, PENDING_VERIFICATION, for the device."""
    user = await _user(ctx, auth, lock=True)
    factor = await repo.factor(ctx.db, ctx.programme.id, user.id, channel)
    if factor is not None and factor.status == ACTIVE:
        raise Conflict("CHANNEL_ALREADY_REGISTERED")
    # Kept hashed like every one-time code (10 minutes, 5 tries); `123456` in sandbox (D1).
    issued = await ctx.issue_code(f"user:{user.id}", LINK_PUSH + channel)
    await _save_factor(ctx, user, factor, channel, ACTIVE if ctx.sandbox else PENDING_VERIFICATION)
    if ctx.sandbox:
        await events.factor(ctx, user.id, channel, ACTIVE)
    return issued.code


async def unlink_push(ctx: Ctx, auth: AuthSession, channel: str) -> None:
    """The factor becomes INACTIVE (kept for the record) and its pending challenges expire."""
    factor = await repo.factor(ctx.db, ctx.programme.id, auth.user_id, channel)
    if factor is None or factor.status == INACTIVE:
        raise Conflict("CHANNEL_NOT_REGISTERED")
    factor.status = INACTIVE
    factor.updated_at = ctx.now
    await repo.expire_pending_of_channel(ctx.db, ctx.programme.id, auth.user_id, channel, ctx.now)
    await ctx.db.flush()
    await events.factor(ctx, auth.user_id, channel, INACTIVE)


# Step-up


async def _registered_mobile(ctx: Ctx, auth: AuthSession) -> str:
    user = await _user(ctx, auth)
    factor = await repo.factor(ctx.db, ctx.programme.id, user.id, SMS)
    mobile = _mobile(user)
    if factor is None or _status(factor, user) != ACTIVE or mobile is None:
        raise Conflict("CHANNEL_NOT_REGISTERED")
    return mobile


def _stepup_subject(auth: AuthSession) -> str:
    # Bound to the session: a code steps up only the login it was asked for.
    return f"session:{auth.id}"


async def stepup_sms_start(ctx: Ctx, auth: AuthSession) -> None:
    mobile = await _registered_mobile(ctx, auth)
    subject = _stepup_subject(auth)
    await _check_resend(ctx, subject, STEPUP_SMS)
    await _send_sms_code(ctx, subject, STEPUP_SMS, mobile, "Authentication")


async def stepup_sms_verify(ctx: Ctx, auth: AuthSession, code: str) -> None:
    await _registered_mobile(ctx, auth)
    subject = _stepup_subject(auth)
    if await codes.latest(ctx.db, ctx.programme.id, subject, STEPUP_SMS) is None:
        raise Conflict("STATE_INVALID")  # no challenge was issued in this session
    await _consume(ctx, subject, STEPUP_SMS, code)
    await repo.mark_stepped_up(ctx.db, ctx.programme.id, auth.id, ctx.now)
    await events.stepup(ctx, await _user(ctx, auth), auth.id, SMS, "VERIFIED")


async def stepup_push_start(ctx: Ctx, auth: AuthSession, channel: str) -> int:
    """A push challenge to the device; one in flight per session (interface rule 6).

    Two racing requests of one session cannot both pass the check: a write renews the session
    row first (api/deps.py `_live_session`), so PostgreSQL holds that row lock until commit,
    and SQLite writes are serial.
    """
    factor = await repo.factor(ctx.db, ctx.programme.id, auth.user_id, channel)
    if factor is None or factor.status != ACTIVE:
        raise Conflict("CHANNEL_NOT_REGISTERED")
    if await repo.challenge_in_flight(ctx.db, ctx.programme.id, auth.id, ctx.now) is not None:
        raise Conflict("CHALLENGE_LIMIT_EXCEEDED")
    await repo.expire_timed_out(ctx.db, ctx.programme.id, auth.id, ctx.now)
    row = ScaChallenge(
        id=new_id(),
        programme_id=ctx.programme.id,
        user_id=auth.user_id,
        session_id=auth.id,
        channel=channel,
        status=PENDING,
        created_at=ctx.now,
        expires_at=ctx.now + CHALLENGE_TTL_MS,
    )
    ctx.db.add(row)
    await ctx.db.flush()
    return row.id


async def settle_challenge(ctx: Ctx, user_id: int, challenge_id: int, outcome: str) -> str:
    """Simulator: the device's answer (COMPLETED, DENIED) or its silence (EXPIRED).

    COMPLETED steps up the session the challenge was issued in. A challenge that is no longer
    pending is refused: `CHALLENGE_ALREADY_SETTLED`, or `CHALLENGE_EXPIRED` once its time is up.
    """
    row = await repo.challenge(ctx.db, ctx.programme.id, user_id, challenge_id)
    if row is None:
        raise NotFound("Challenge not found")
    if row.status != PENDING:
        raise Conflict("CHALLENGE_ALREADY_SETTLED")
    if row.expires_at <= ctx.now:
        raise Conflict("CHALLENGE_EXPIRED")
    row.status = outcome
    row.settled_at = ctx.now
    if outcome == COMPLETED:
        await repo.mark_stepped_up(ctx.db, ctx.programme.id, row.session_id, ctx.now)
    user = await repo.user(ctx.db, ctx.programme.id, user_id)
    if user is not None:
        status = {COMPLETED: "VERIFIED", DENIED: "DECLINED"}.get(outcome, "EXPIRED")
        await events.stepup(ctx, user, row.id, row.channel, status)
    await ctx.db.flush()
    return outcome


# Payments (D13) confirm with the same factors: the user's verified SMS factor, or an active
# push device.


async def registered_mobile(ctx: Ctx, auth: AuthSession) -> str:
    """The mobile of the user's active SMS factor; else 409 CHANNEL_NOT_REGISTERED."""
    return await _registered_mobile(ctx, auth)


async def require_push(ctx: Ctx, auth: AuthSession, channel: str) -> None:
    factor = await repo.factor(ctx.db, ctx.programme.id, auth.user_id, channel)
    if factor is None or factor.status != ACTIVE:
        raise Conflict("CHANNEL_NOT_REGISTERED")
