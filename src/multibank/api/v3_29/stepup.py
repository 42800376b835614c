"""Access tag, step-up part (3.29.1 only): prove an enrolled factor to step the session up
(contract §5.1 stepup*, D7, docs/decisions/0007)."""

from __future__ import annotations

from fastapi import Response

from multibank.api.deps import CallerIdempotent, LoggedIn, conflicts
from multibank.api.limits import (
    CallerCodeSendLimited,
    CallerCodeVerifyLimited,
)
from multibank.api.routing import UnitOfWorkRouter
from multibank.factors import service
from multibank.factors.schemas import (
    ChallengeIdResponse,
    SCAOtpChannel,
    SCAPushChannel,
    SCAVerifyRequest,
)

router = UnitOfWorkRouter(tags=["Access"])


@router.post(
    "/stepup/challenges/otp/{channel}",
    operation_id="stepupSCAChallenge",
    status_code=204,
    response_class=Response,
    dependencies=[*CallerCodeSendLimited, CallerIdempotent],
    responses=conflicts("CHANNEL_NOT_REGISTERED", "RETRY_IN_15SEC"),
)
async def stepup_otp_issue(channel: SCAOtpChannel, session: LoggedIn) -> Response:
    """Sends a one-time password to the user's enrolled mobile; it steps up this session only.
    A new code can be asked for after 15 seconds."""
    await service.stepup_sms_start(session.ctx, session.auth)
    return Response(status_code=204)


@router.post(
    "/stepup/challenges/otp/{channel}/verify",
    operation_id="stepupSCAVerify",
    status_code=204,
    response_class=Response,
    dependencies=[*CallerCodeVerifyLimited, CallerIdempotent],
    responses=conflicts(
        "STATE_INVALID",
        "VERIFICATION_CODE_EXPIRED",
        "VERIFICATION_CODE_INVALID",
        "CHANNEL_NOT_REGISTERED",
    ),
)
async def stepup_otp_verify(
    channel: SCAOtpChannel, body: SCAVerifyRequest, session: LoggedIn
) -> Response:
    """Steps the session up for the rest of its life with the code sent in this session."""
    await service.stepup_sms_verify(session.ctx, session.auth, body.verificationCode)
    return Response(status_code=204)


@router.post(
    "/stepup/challenges/push/{channel}",
    operation_id="stepupSCAChallengePush",
    dependencies=[*CallerCodeSendLimited, CallerIdempotent],
    responses=conflicts("CHANNEL_NOT_REGISTERED", "CHALLENGE_LIMIT_EXCEEDED"),
)
async def stepup_push_issue(channel: SCAPushChannel, session: LoggedIn) -> ChallengeIdResponse:
    """Sends a push challenge to the enrolled device; the session is stepped up when the device
    approves it (in sandbox: the simulator's verify_success). One challenge in flight per
    session; it expires after 5 minutes."""
    challenge_id = await service.stepup_push_start(session.ctx, session.auth, channel.value)
    return ChallengeIdResponse(id=str(challenge_id))
