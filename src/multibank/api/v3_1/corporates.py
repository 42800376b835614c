"""3.1.0 corporates: industry and source of funds required at sign-up, `companyType` on update,
`kybStatus` alone, and root-user mobile verification (contract §4.1)."""

from __future__ import annotations

from typing import Any

from fastapi import Response
from pydantic import BaseModel

from multibank.api.deps import AnonCtx, CallerIdempotent, CorporateSession, Idempotent, conflicts
from multibank.api.limits import (
    CallerCodeSendLimited,
    CallerCodeVerifyLimited,
)
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29 import corporates as latest
from multibank.identities import service
from multibank.identities.models import CORPORATE
from multibank.identities.schemas import (
    CorporateCreate,
    CorporateRead,
    CreatedCorporateRead,
    FeeGroup,
    Free,
)
from multibank.kernel.vocabulary import (
    Address,
    CorporateSourceOfFunds,
    Currency,
    Email,
    Industry,
    Mobile,
    PersonName310,
    Tag,
    VerificationCodeRequest,
    Wire,
)
from multibank.kernel.wire import WireEnum

router = UnitOfWorkRouter(tags=["Corporates"])


class CorporateCreate310(CorporateCreate):
    industry: Industry
    sourceOfFunds: CorporateSourceOfFunds


class CompanyType310(WireEnum):
    SOLE_TRADER = "SOLE_TRADER"
    LLC = "LLC"


class CorporateUpdate310(Wire):
    tag: Tag | None = None
    name: PersonName310 | None = None
    surname: PersonName310 | None = None
    email: Email | None = None
    mobile: Mobile | None = None
    companyType: CompanyType310 | None = None
    industry: Industry | None = None
    sourceOfFunds: CorporateSourceOfFunds | None = None
    sourceOfFundsOther: Free | None = None
    companyBusinessAddress: Address | None = None
    feeGroup: FeeGroup | None = None
    baseCurrency: Currency | None = None


class Kyb310(BaseModel):
    kybStatus: str


class MobileSend(BaseModel):
    timeLeftForRetry: int
    retriesLeft: int


@router.post(
    "/corporates",
    operation_id="corporateCreate",
    response_model=CreatedCorporateRead,
    response_model_exclude_none=True,
    dependencies=[Idempotent],
    responses=conflicts(*latest.CREATE_CONFLICTS),
)
async def corporate_create(body: CorporateCreate310, ctx: AnonCtx) -> dict[str, Any]:
    identity, root = await service.create_corporate(ctx, body)
    return latest.corporate_body(identity, root, created=True)


@router.patch(
    "/corporates",
    operation_id="corporateUpdate",
    response_model=CorporateRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses=conflicts(*latest.UPDATE_CONFLICTS),
)
async def corporate_update(body: CorporateUpdate310, session: CorporateSession) -> dict[str, Any]:
    await service.update_corporate(session.ctx, session.identity_id, body)
    return latest.corporate_body(*await service.load(session.ctx, session.identity_id, CORPORATE))


@router.get("/corporates/kyb", operation_id="corporateKybGet")
async def corporate_kyb_get(session: CorporateSession) -> Kyb310:
    return Kyb310(kybStatus=(await latest.load_kyb(session)).dd_status)


@router.post(
    "/corporates/verification/mobile/send",
    operation_id="corporateRootUserMobileVerificationCodeSend",
    dependencies=[*CallerCodeSendLimited, CallerIdempotent],
    responses=conflicts("FREQUENCY_EXCEEDED", "ALREADY_VERIFIED"),
)
async def corporate_mobile_send(session: CorporateSession) -> MobileSend:
    """Sends the root user an SMS code (`123456` in sandbox); again after 15 seconds."""
    left, tries = await service.send_mobile_code(session.ctx, session.identity_id, CORPORATE)
    return MobileSend(timeLeftForRetry=left, retriesLeft=tries)


@router.post(
    "/corporates/verification/mobile/verify",
    operation_id="corporateRootUserMobileVerify",
    status_code=204,
    response_class=Response,
    dependencies=[*CallerCodeVerifyLimited, CallerIdempotent],
    responses=conflicts("VERIFICATION_CODE_INVALID"),
)
async def corporate_mobile_verify(
    body: VerificationCodeRequest, session: CorporateSession
) -> Response:
    await service.verify_mobile(session.ctx, session.identity_id, CORPORATE, body.verificationCode)
    return Response(status_code=204)
