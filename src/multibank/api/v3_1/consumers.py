"""3.1.0 consumers: KYC without levels, `fullDueDiligence` alone, Industry-only occupations, and
root-user mobile verification (contract §4.1)."""

from __future__ import annotations

from typing import Any

from fastapi import Response
from pydantic import BaseModel

from multibank.api.deps import CallerIdempotent, ConsumerSession, conflicts
from multibank.api.limits import (
    CallerCodeSendLimited,
    CallerCodeVerifyLimited,
)
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_1.corporates import MobileSend
from multibank.api.v3_29 import consumers as latest
from multibank.identities import service
from multibank.identities.models import CONSUMER
from multibank.identities.schemas import ConsumerRead, FeeGroup, Free
from multibank.kernel.vocabulary import (
    AddressWithNoRequiredFields,
    ConsumerSourceOfFunds,
    Currency,
    Date,
    Email,
    Industry,
    Mobile,
    PersonName310,
    ReferenceResponse,
    Tag,
    VerificationCodeRequest,
    Wire,
)

router = UnitOfWorkRouter(tags=["Consumers"])


class ConsumerUpdate310(Wire):
    tag: Tag | None = None
    name: PersonName310 | None = None
    surname: PersonName310 | None = None
    email: Email | None = None
    mobile: Mobile | None = None
    dateOfBirth: Date | None = None
    address: AddressWithNoRequiredFields | None = None
    feeGroup: FeeGroup | None = None
    baseCurrency: Currency | None = None
    occupation: Industry | None = None
    sourceOfFunds: ConsumerSourceOfFunds | None = None
    sourceOfFundsOther: Free | None = None


class Kyc310(BaseModel):
    fullDueDiligence: str


@router.patch(
    "/consumers",
    operation_id="consumerUpdate",
    response_model=ConsumerRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses=conflicts(*latest.UPDATE_CONFLICTS),
)
async def consumer_update(body: ConsumerUpdate310, session: ConsumerSession) -> dict[str, Any]:
    await service.update_consumer(session.ctx, session.identity_id, body)
    return latest.consumer_body(*await service.load(session.ctx, session.identity_id, CONSUMER))


@router.post(
    "/consumers/kyc",
    operation_id="consumerKycStart",
    dependencies=[CallerIdempotent],
    responses=conflicts(*latest.KYC_CONFLICTS),
)
async def consumer_kyc_start(session: ConsumerSession) -> ReferenceResponse:
    """Starts full due diligence; the reference opens the provider UI."""
    reference = await service.start_due_diligence(session.ctx, session.identity_id, CONSUMER, None)
    return ReferenceResponse(reference=reference)


@router.get("/consumers/kyc", operation_id="consumerKycGet")
async def consumer_kyc_get(session: ConsumerSession) -> Kyc310:
    identity, _ = await service.load(session.ctx, session.identity_id, CONSUMER)
    return Kyc310(fullDueDiligence=identity.dd_status)


@router.post(
    "/consumers/verification/mobile/send",
    operation_id="consumerRootUserMobileVerificationCodeSend",
    dependencies=[*CallerCodeSendLimited, CallerIdempotent],
    responses=conflicts("FREQUENCY_EXCEEDED", "ALREADY_VERIFIED"),
)
async def consumer_mobile_send(session: ConsumerSession) -> MobileSend:
    left, tries = await service.send_mobile_code(session.ctx, session.identity_id, CONSUMER)
    return MobileSend(timeLeftForRetry=left, retriesLeft=tries)


@router.post(
    "/consumers/verification/mobile/verify",
    operation_id="consumerRootUserMobileVerify",
    status_code=204,
    response_class=Response,
    dependencies=[*CallerCodeVerifyLimited, CallerIdempotent],
    responses=conflicts("VERIFICATION_CODE_INVALID"),
)
async def consumer_mobile_verify(
    body: VerificationCodeRequest, session: ConsumerSession
) -> Response:
    await service.verify_mobile(session.ctx, session.identity_id, CONSUMER, body.verificationCode)
    return Response(status_code=204)
