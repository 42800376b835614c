"""Corporates tag (3.29.1): sign-up, profile, root-user e-mail verification and KYB."""

from __future__ import annotations

from typing import Any

from fastapi import Response

from multibank.api.answers import Answer
from multibank.api.deps import (
    AnonCtx,
    CallerIdempotent,
    CorporateSession,
    Idempotent,
    conflicts,
)
from multibank.api.limits import CodeSendLimited, CodeVerifyLimited
from multibank.api.routing import UnitOfWorkRouter
from multibank.identities import service
from multibank.identities.models import CORPORATE, Identity
from multibank.identities.repository import IdentityView, RootView
from multibank.identities.schemas import (
    CorporateCreate,
    CorporateRead,
    CorporateUpdate,
    CreatedCorporateRead,
    KybRead,
)
from multibank.kernel.vocabulary import EmailRequest, EmailVerifyRequest, ReferenceResponse
from multibank.users.models import User

router = UnitOfWorkRouter(tags=["Corporates"])

# The hot read's answer, written from the dict below without validating it again (api/answers.py).
CORPORATE_ANSWER = Answer(CorporateRead)
CREATE_CONFLICTS = (
    "PROFILE_NOT_FOUND",
    "PROFILE_MISMATCH",
    "PROFILE_INACTIVE",
    "TERMS_NOT_ACCEPTED",
    "CURRENCY_UNSUPPORTED",
    "FEE_GROUP_INVALID",
    "COUNTRY_INVALID",
    "MOBILE_OR_COUNTRY_CODE_INVALID",
    "ROOT_EMAIL_NOT_UNIQUE",
)
UPDATE_CONFLICTS = (
    "FEE_GROUP_INVALID",
    "COUNTRY_INVALID",
    "EMAIL_NOT_UNIQUE",
    "ROOT_USER_ALREADY_VERIFIED",
    "MOBILE_OR_COUNTRY_CODE_INVALID",
    "CURRENCY_UNSUPPORTED",
)
KYB_CONFLICTS = (
    "KYB_ALREADY_APPROVED",
    "KYB_PERMANENTLY_REJECTED",
    "KYB_PENDING_REVIEW",
    "EMAIL_UNVERIFIED",
)


def mobile(user: User | RootView) -> dict[str, str]:
    return {"countryCode": user.mobile_country_code or "", "number": user.mobile_number or ""}


def corporate_body(
    identity: Identity | IdentityView, root: User | RootView, created: bool = False
) -> dict[str, Any]:
    company = {k: v for k, v in (identity.company or {}).items() if v is not None}
    root_user: dict[str, Any] = {
        "id": {"type": CORPORATE, "id": str(root.id)},
        "name": root.name,
        "surname": root.surname,
        "email": root.email,
        "mobile": mobile(root),
        "companyPosition": root.company_position,
        "active": root.active,
        "emailVerified": root.email_verified,
        "mobileNumberVerified": root.mobile_verified,
        "dateOfBirth": root.date_of_birth,
    }
    if created:
        root_user["passwordAlreadySet"] = root.password_hash is not None
    return {
        "id": {"type": CORPORATE, "id": str(identity.id)},
        "profileId": str(identity.profile_id),
        "tag": identity.tag,
        "rootUser": root_user,
        "company": company,
        "industry": identity.industry,
        "sourceOfFunds": identity.source_of_funds,
        "sourceOfFundsOther": identity.source_of_funds_other,
        "acceptedTerms": identity.accepted_terms,
        "ipAddress": identity.ip_address,
        "baseCurrency": identity.base_currency,
        "feeGroup": identity.fee_group,
        "creationTimestamp": identity.created_at,
    }


@router.post(
    "/corporates",
    operation_id="corporateCreate",
    response_model=CreatedCorporateRead,
    response_model_exclude_none=True,
    dependencies=[Idempotent],
    responses=conflicts(*CREATE_CONFLICTS),
)
async def corporate_create(body: CorporateCreate, ctx: AnonCtx) -> dict[str, Any]:
    """Signs a company up: the corporate and its root user (who sets a password next)."""
    identity, root = await service.create_corporate(ctx, body)
    return corporate_body(identity, root, created=True)


@router.get(
    "/corporates",
    operation_id="corporateGet",
    response_model=CorporateRead,
    response_model_exclude_none=True,
)
async def corporate_get(session: CorporateSession) -> Response:
    """The logged-in user's corporate."""
    return CORPORATE_ANSWER.response(
        corporate_body(*await service.view(session.ctx, session.identity_id, CORPORATE))
    )


@router.patch(
    "/corporates",
    operation_id="corporateUpdate",
    response_model=CorporateRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses=conflicts(*UPDATE_CONFLICTS),
)
async def corporate_update(body: CorporateUpdate, session: CorporateSession) -> dict[str, Any]:
    """Changes only the fields sent; the root user's are locked once KYB is approved."""
    await service.update_corporate(session.ctx, session.identity_id, body)
    return corporate_body(*await service.load(session.ctx, session.identity_id, CORPORATE))


@router.post(
    "/corporates/verification/email/send",
    operation_id="corporateRootUserEmailVerificationCodeSend",
    status_code=204,
    response_class=Response,
    dependencies=[CodeSendLimited, Idempotent],
    responses=conflicts("EMAIL_NOT_FOUND"),
)
async def corporate_email_send(body: EmailRequest, ctx: AnonCtx) -> Response:
    """Sends the root user a verification code (`123456` in sandbox)."""
    await service.send_email_code(ctx, str(body.email), CORPORATE)
    return Response(status_code=204)


@router.post(
    "/corporates/verification/email/verify",
    operation_id="corporateRootUserEmailVerify",
    status_code=204,
    response_class=Response,
    dependencies=[CodeVerifyLimited, Idempotent],
    responses=conflicts("VERIFICATION_CODE_INVALID"),
)
async def corporate_email_verify(body: EmailVerifyRequest, ctx: AnonCtx) -> Response:
    await service.verify_email(ctx, str(body.email), body.verificationCode, CORPORATE)
    return Response(status_code=204)


@router.post(
    "/corporates/kyb",
    operation_id="corporateKybStart",
    dependencies=[CallerIdempotent],
    responses=conflicts(*KYB_CONFLICTS),
)
async def corporate_kyb_start(session: CorporateSession) -> ReferenceResponse:
    """Starts KYB; the reference opens the provider's UI (the sandbox page `/kyc/{reference}`)."""
    reference = await service.start_due_diligence(session.ctx, session.identity_id, CORPORATE, None)
    return ReferenceResponse(reference=reference)


async def load_kyb(session: CorporateSession) -> Identity:
    identity, _ = await service.load(session.ctx, session.identity_id, CORPORATE)
    return identity


@router.get("/corporates/kyb", operation_id="corporateKybGet")
async def corporate_kyb_get(session: CorporateSession) -> KybRead:
    identity = await load_kyb(session)
    return KybRead.model_validate(
        {"kybStatus": identity.dd_status, "ongoingKybStatus": identity.dd_ongoing_status}
    )
