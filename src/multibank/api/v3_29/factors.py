"""Additional Factors tag (3.29.1 only): list factors, enrol an SMS OTP device, enrol and unlink
a push device (contract §5.3, docs/decisions/0007)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from multibank.api.deps import (
    STEP_UP_RESPONSES,
    CallerIdempotent,
    LoggedIn,
    Session,
    conflicts,
    require_step_up,
    step_up_pending,
)
from multibank.api.limits import CodeSendLimited, CodeVerifyLimited
from multibank.api.routing import UnitOfWorkRoute
from multibank.factors import service
from multibank.factors.schemas import (
    FactorsResponse,
    LinkingCodeResponse,
    SCAFactor,
    SCAOtpChannel,
    SCAPushChannel,
    SCAVerifyRequest,
)

router = APIRouter(tags=["Additional Factors"], route_class=UnitOfWorkRoute)


async def push_step_up(session: LoggedIn) -> Session:
    """Step-up guards push enrol and unlink (contract §2), but only once the user has an ACTIVE
    factor: with none there is nothing to step up with, and the first one must be enrollable."""
    if step_up_pending(session) and await service.has_active_factor(session.ctx, session.auth):
        require_step_up(session)
    return session


PushSession = Annotated[Session, Depends(push_step_up)]


@router.get("/authentication_factors", operation_id="authFactorsGet")
async def auth_factors_get(session: LoggedIn) -> FactorsResponse:
    """The logged-in user's factors; an empty list when none (D11)."""
    views = await service.list_factors(session.ctx, session.auth)
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
    dependencies=[CodeSendLimited, CallerIdempotent],
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
    dependencies=[CodeVerifyLimited, CallerIdempotent],
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
    dependencies=[CodeSendLimited, CallerIdempotent],
    responses={**conflicts("CHANNEL_ALREADY_REGISTERED"), **STEP_UP_RESPONSES},
)
async def enrol_push(channel: SCAPushChannel, session: PushSession) -> LinkingCodeResponse:
    """Enrols a push device; answers the code the device links with. In sandbox there is no
    device: the factor is ACTIVE at once. Needs a stepped-up session when the programme demands
    step-up and the user already has an active factor."""
    code = await service.enrol_push(session.ctx, session.auth, channel.value)
    return LinkingCodeResponse(linkingCode=code)


@router.delete(
    "/authentication_factors/push/{channel}",
    operation_id="unlinkDeviceUsingPush",
    status_code=204,
    response_class=Response,
    responses={**conflicts("CHANNEL_NOT_REGISTERED"), **STEP_UP_RESPONSES},
)
async def unlink_push(channel: SCAPushChannel, session: PushSession) -> Response:
    """The factor becomes INACTIVE; challenges still pending on it expire."""
    await service.unlink_push(session.ctx, session.auth, channel.value)
    return Response(status_code=204)
