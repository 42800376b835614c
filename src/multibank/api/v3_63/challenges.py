"""Batch SCA challenges on the 3.63 line (v3.63.md §3, D36, D37): `POST /challenges/otp/{channel}`,
its `/verify`, and `POST /challenges/push/{channel}`: one challenge confirms several sends or
wire transfers of the caller's identity at once (`payments.batch_sca`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Response

from multibank.api.deps import CallerIdempotent, LoggedIn, conflicts
from multibank.api.limits import CallerCodeSendLimited, CallerCodeVerifyLimited
from multibank.api.openapi import not_found
from multibank.api.routing import UnitOfWorkRouter
from multibank.factors.schemas import SCAOtpChannel, SCAPushChannel
from multibank.payments import batch_sca
from multibank.payments.schemas import MultipleScaBody, MultipleScaVerifyBody, ScaChallengeIdRead

router = UnitOfWorkRouter(tags=["Challenges"])
ChallengeId = Annotated[str, Path(pattern=r"^[0-9]+$", max_length=19)]
START_CONFLICTS = ("STATE_INVALID", "CHANNEL_NOT_SUPPORTED", "CHANNEL_NOT_REGISTERED")
VERIFY_CONFLICTS = (
    *START_CONFLICTS,
    "VERIFICATION_CODE_EXPIRED",
    "VERIFICATION_CODE_INVALID",
    "CHALLENGE_LIMIT_EXCEEDED",
    "ONE_CHALLENGE_LIMIT_REMAINING",
)
# Only the identity's root user confirms a linked account's declaration (D37).
ROOT_ONLY: dict[int | str, dict[str, Any]] = {
    403: {
        "description": "INSUFFICIENT_PERMISSIONS: a linked account's declaration is confirmed "
        "by the identity's root user only; other 403s (a token of another programme) have no "
        "body",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "errorCode": {"type": "string", "enum": ["INSUFFICIENT_PERMISSIONS"]}
                    },
                }
            }
        },
    }
}
MISSING = not_found("an id that is not the caller's identity's resource of that type")


@router.post(
    "/challenges/otp/{channel}",
    operation_id="multipleSCAChallenge",
    response_model=ScaChallengeIdRead,
    dependencies=[*CallerCodeSendLimited, CallerIdempotent],
    responses={**conflicts(*START_CONFLICTS), **MISSING, **ROOT_ONLY},
)
async def challenge_otp(
    channel: SCAOtpChannel, body: MultipleScaBody, session: LoggedIn
) -> dict[str, str]:
    """One SMS code to the user's enrolled mobile for every resource named (their count and
    total are in the message). Each must await its challenge (a send `PENDING` or
    `PENDING_CHALLENGE`, a wire transfer `PENDING_CHALLENGE`) with none open on it, else 409
    `STATE_INVALID`; any id not the caller's of `resourceType` is 404. Nothing is made unless
    all are. The challenge waits 5 minutes for its code."""
    row = await batch_sca.start_otp(session.ctx, session.auth, body.resourceType, body.resourceIds)
    return {"scaChallengeId": str(row.id)}


@router.post(
    "/challenges/{scaChallengeId}/otp/{channel}/verify",
    operation_id="multipleSCAVerify",
    status_code=204,
    response_class=Response,
    dependencies=[*CallerCodeVerifyLimited, CallerIdempotent],
    responses={**conflicts(*VERIFY_CONFLICTS), **MISSING},
)
async def verify_otp(
    scaChallengeId: ChallengeId,
    channel: SCAOtpChannel,
    body: MultipleScaVerifyBody,
    session: LoggedIn,
) -> Response:
    """The challenge's SMS code, from the user who started it: every resource goes on (a send
    completes, a wire transfer is submitted, a scheduled one is `SCHEDULED`). Wrong codes count
    down to `ONE_CHALLENGE_LIMIT_REMAINING`, then `CHALLENGE_LIMIT_EXCEEDED` ends them (a send
    `REJECTED`, a wire transfer `FAILED`, their money given back). `resourceType` must be the
    challenge's, else 404."""
    await batch_sca.verify_otp(
        session.ctx, session.auth, scaChallengeId, body.resourceType, body.verificationCode
    )
    return Response(status_code=204)


@router.post(
    "/challenges/push/{channel}",
    operation_id="multipleSCAChallengePush",
    response_model=ScaChallengeIdRead,
    dependencies=[*CallerCodeSendLimited, CallerIdempotent],
    responses={
        **conflicts(*START_CONFLICTS, "CHALLENGE_LIMIT_EXCEEDED"),
        **MISSING,
        **ROOT_ONLY,
    },
)
async def challenge_push(
    channel: SCAPushChannel, body: MultipleScaBody, session: LoggedIn
) -> dict[str, str]:
    """A push to the user's enrolled device for every resource named, under the same rules as
    the SMS challenge. In the sandbox the simulator answers it:
    `POST /simulate/api/authy/challenge/{scaChallengeId}/accept` (or `reject`; `okay/…` for
    `BIOMETRIC`), or the factors' `…/challenges/{scaChallengeId}/verify_success`."""
    row = await batch_sca.start_push(
        session.ctx, session.auth, body.resourceType, body.resourceIds, channel.value
    )
    return {"scaChallengeId": str(row.id)}
