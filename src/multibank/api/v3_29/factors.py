"""Additional Factors tag (3.29.1 only): list factors, enrol an SMS OTP device, enrol and unlink
a push device (contract §5.3, docs/decisions/0007)."""

from __future__ import annotations

from fastapi import Response

from multibank.api.deps import CallerIdempotent, LoggedIn, StepUpRequired, conflicts
from multibank.api.limits import (
    CallerCodeSendLimited,
    CallerCodeVerifyLimited,
)
from multibank.api.routing import UnitOfWorkRouter
from multibank.factors import service
from multibank.factors.schemas import (
    FactorsResponse,
    LinkingCodeResponse,
    SCAFactor,
    SCAOtpChannel,
    SCAPushChannel,
    SCAVerifyRequest,
)

router = UnitOfWorkRouter(tags=["Additional Factors"])


@router.get(
    "/authentication_factors",
    operation_id="authFactorsGet",
    response_model=FactorsResponse,
    response_model_exclude_none=True,
)
async def auth_factors_get(session: LoggedIn) -> FactorsResponse:
    """The logged-in user's factors; `{}` (no `factors`) when there are none, as on the
    reference (D11: the official demo app reads `factors[0]` only when the list is there)."""
    views = await service.list_factors(session.ctx, session.auth)
    if not views:
        return FactorsResponse()
    return FactorsResponse(
        factors=[
            SCAFactor.model_validate({"type": v.type, "status": v.status, "channel": v.channel})
            for v in views
        ]
    )


@router.post(
    "/authentication_factors/otp/{channel}",
    operation_id="enrolDeviceUsingOtpStepOne",
    status_code=204,
    response_class=Response,
    dependencies=[*CallerCodeSendLimited, CallerIdempotent],
    responses=conflicts(
        "CHANNEL_ALREADY_REGISTERED", "MOBILE_NUMBER_NOT_AVAILABLE", "RETRY_IN_15SEC"
    ),
)
async def enrol_otp_start(channel: SCAOtpChannel, session: LoggedIn) -> Response:
    """Sends a one-time password to the user's mobile; the factor is PENDING_VERIFICATION until
    step 2. A new code can be asked for after 15 seconds."""
    await service.enrol_sms_start(session.ctx, session.auth)
    return Response(status_code=204)


@router.post(
    "/authentication_factors/otp/{channel}/verify",
    operation_id="enrolDeviceUsingOtpStepTwo",
    status_code=204,
    response_class=Response,
    dependencies=[*CallerCodeVerifyLimited, CallerIdempotent],
    responses=conflicts(
        "CHANNEL_ALREADY_REGISTERED", "VERIFICATION_CODE_EXPIRED", "VERIFICATION_CODE_INVALID"
    ),
)
async def enrol_otp_verify(
    channel: SCAOtpChannel, body: SCAVerifyRequest, session: LoggedIn
) -> Response:
    """Activates the factor with the code of step 1 and marks the user's mobile verified."""
    await service.enrol_sms_verify(session.ctx, session.auth, body.verificationCode)
    return Response(status_code=204)


@router.post(
    "/authentication_factors/push/{channel}",
    operation_id="enrolDeviceUsingPush",
    dependencies=[*CallerCodeSendLimited, CallerIdempotent],
    responses=conflicts("CHANNEL_ALREADY_REGISTERED"),
)
async def enrol_push(channel: SCAPushChannel, session: StepUpRequired) -> LinkingCodeResponse:
    """Enrols a push device; answers the code the device links with. In sandbox there is no
    device: the factor is ACTIVE at once. Needs a stepped-up session when the programme demands
    step-up (D11a): a user without a factor enrols SMS OTP first and steps up with it."""
    code = await service.enrol_push(session.ctx, session.auth, channel.value)
    return LinkingCodeResponse(linkingCode=code)


@router.delete(
    "/authentication_factors/push/{channel}",
    operation_id="unlinkDeviceUsingPush",
    status_code=204,
    response_class=Response,
    responses=conflicts("CHANNEL_NOT_REGISTERED"),
)
async def unlink_push(channel: SCAPushChannel, session: StepUpRequired) -> Response:
    """The factor becomes INACTIVE; challenges still pending on it expire."""
    await service.unlink_push(session.ctx, session.auth, channel.value)
    return Response(status_code=204)
