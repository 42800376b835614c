"""Consumers tag (3.29.1): sign-up, profile, root-user e-mail verification and KYC."""

from __future__ import annotations

from typing import Any

from fastapi import Body, Response

from multibank.api.answers import Answer
from multibank.api.deps import (
    AnonCtx,
    CallerIdempotent,
    ConsumerSession,
    Idempotent,
    conflicts,
)
from multibank.api.limits import CodeSendLimited, CodeVerifyLimited
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29.corporates import mobile
from multibank.identities import service
from multibank.identities.models import CONSUMER, Identity
from multibank.identities.repository import IdentityView, RootView
from multibank.identities.schemas import (
    ConsumerCreate,
    ConsumerRead,
    ConsumerUpdate,
    KycRead,
    KycStartRead,
    KycStartRequest,
    MobileKycRead,
)
from multibank.kernel.errors import Conflict
from multibank.kernel.vocabulary import EmailRequest, EmailVerifyRequest
from multibank.users.models import User

router = UnitOfWorkRouter(tags=["Consumers"])

# The hot read's answer, written from the dict below without validating it again (api/answers.py).
CONSUMER_ANSWER = Answer(ConsumerRead)
CREATE_CONFLICTS = (
    "PROFILE_NOT_FOUND",
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
    "CONSUMER_VERIFIED",
    "EMAIL_NOT_UNIQUE",
    "MOBILE_OR_COUNTRY_CODE_INVALID",
    "CURRENCY_UNSUPPORTED",
)
KYC_CONFLICTS = ("KYC_ALREADY_APPROVED", "KYC_PENDING_REVIEW", "KYC_REJECTED", "EMAIL_UNVERIFIED")
# Contract row 45: the mobile operation names a permanent rejection KYC_ALREADY_REJECTED.
MOBILE_KYC_CONFLICTS = (
    "KYC_ALREADY_APPROVED",
    "KYC_PENDING_REVIEW",
    "KYC_ALREADY_REJECTED",
    "EMAIL_UNVERIFIED",
)


def _kyc_level(body: KycStartRequest | None) -> str:
    """Interface 3.29.1: KYC_LEVEL_2 when omitted (so an omitted level never resumes a level-1
    session as if it had been asked for)."""
    return body.kycLevel.value if body and body.kycLevel else "KYC_LEVEL_2"


def consumer_body(identity: Identity | IdentityView, root: User | RootView) -> dict[str, Any]:
    return {
        "id": {"type": CONSUMER, "id": str(identity.id)},
        "profileId": str(identity.profile_id),
        "tag": identity.tag,
        "rootUser": {
            "id": {"type": CONSUMER, "id": str(root.id)},
            "name": root.name,
            "surname": root.surname,
            "email": root.email,
            "mobile": mobile(root),
            "occupation": root.occupation,
            "active": root.active,
            "emailVerified": root.email_verified,
            "mobileNumberVerified": root.mobile_verified,
            "dateOfBirth": root.date_of_birth,
            "address": root.address,
            "nationality": root.nationality,
            "placeOfBirth": root.place_of_birth,
        },
        "creationTimestamp": identity.created_at,
        "ipAddress": identity.ip_address,
        "acceptedTerms": identity.accepted_terms,
        "baseCurrency": identity.base_currency,
        "feeGroup": identity.fee_group,
        "sourceOfFunds": identity.source_of_funds,
        "sourceOfFundsOther": identity.source_of_funds_other,
    }


@router.post(
    "/consumers",
    operation_id="consumerCreate",
    response_model=ConsumerRead,
    response_model_exclude_none=True,
    dependencies=[Idempotent],
    responses=conflicts(*CREATE_CONFLICTS),
)
async def consumer_create(body: ConsumerCreate, ctx: AnonCtx) -> dict[str, Any]:
    """Signs a person up: the consumer and its root user (who sets a password next)."""
    return consumer_body(*await service.create_consumer(ctx, body))


@router.get(
    "/consumers",
    operation_id="consumerGet",
    response_model=ConsumerRead,
    response_model_exclude_none=True,
)
async def consumer_get(session: ConsumerSession) -> Response:
    return CONSUMER_ANSWER.response(
        consumer_body(*await service.view(session.ctx, session.identity_id, CONSUMER))
    )


@router.patch(
    "/consumers",
    operation_id="consumerUpdate",
    response_model=ConsumerRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses=conflicts(*UPDATE_CONFLICTS),
)
async def consumer_update(body: ConsumerUpdate, session: ConsumerSession) -> dict[str, Any]:
    """Changes only the fields sent; personal details are locked once KYC is approved."""
    await service.update_consumer(session.ctx, session.identity_id, body)
    return consumer_body(*await service.load(session.ctx, session.identity_id, CONSUMER))


@router.post(
    "/consumers/verification/email/send",
    operation_id="consumerRootUserEmailVerificationCodeSend",
    status_code=204,
    response_class=Response,
    dependencies=[CodeSendLimited, Idempotent],
    responses=conflicts("EMAIL_NOT_FOUND"),
)
async def consumer_email_send(body: EmailRequest, ctx: AnonCtx) -> Response:
    await service.send_email_code(ctx, str(body.email), CONSUMER)
    return Response(status_code=204)


@router.post(
    "/consumers/verification/email/verify",
    operation_id="consumerRootUserEmailVerify",
    status_code=204,
    response_class=Response,
    dependencies=[CodeVerifyLimited, Idempotent],
    responses=conflicts("VERIFICATION_CODE_INVALID"),
)
async def consumer_email_verify(body: EmailVerifyRequest, ctx: AnonCtx) -> Response:
    await service.verify_email(ctx, str(body.email), body.verificationCode, CONSUMER)
    return Response(status_code=204)


@router.post(
    "/consumers/kyc",
    operation_id="consumerKycStart",
    dependencies=[CallerIdempotent],
    responses=conflicts(*KYC_CONFLICTS),
)
async def consumer_kyc_start(
    session: ConsumerSession, body: KycStartRequest | None = Body(default=None)
) -> KycStartRead:
    """Starts KYC at `kycLevel` (KYC_LEVEL_2 when omitted); the reference opens the provider UI."""
    level = _kyc_level(body)
    reference = await service.start_due_diligence(session.ctx, session.identity_id, CONSUMER, level)
    identity, _ = await service.load(session.ctx, session.identity_id, CONSUMER)
    return KycStartRead.model_validate({"reference": reference, "kycLevel": identity.dd_level})


@router.get("/consumers/kyc", operation_id="consumerKycGet", response_model_exclude_none=True)
async def consumer_kyc_get(session: ConsumerSession) -> KycRead:
    identity, _ = await service.load(session.ctx, session.identity_id, CONSUMER)
    return KycRead.model_validate(
        {
            "fullDueDiligence": identity.dd_status,
            "kycLevel": identity.dd_level,
            "ongoingFullDueDiligence": identity.dd_ongoing_status,
        }
    )


@router.post(
    "/consumers/kyc_mobile_sumsub",
    operation_id="consumerKycStartSumsubMobile",
    dependencies=[CallerIdempotent],
    responses=conflicts(*MOBILE_KYC_CONFLICTS),
)
async def consumer_kyc_mobile(
    session: ConsumerSession, body: KycStartRequest | None = Body(default=None)
) -> MobileKycRead:
    """Starts KYC for a provider's mobile SDK; in sandbox the token is the page reference."""
    level = _kyc_level(body)
    try:
        reference = await service.start_due_diligence(
            session.ctx, session.identity_id, CONSUMER, level
        )
    except Conflict as exc:
        if exc.error_code == "KYC_REJECTED":
            raise Conflict("KYC_ALREADY_REJECTED") from None
        raise
    identity, _ = await service.load(session.ctx, session.identity_id, CONSUMER)
    return MobileKycRead.model_validate(
        {
            "verificationFlow": f"multibank-sandbox-{identity.dd_level}",
            "accessToken": reference,
            "identityType": CONSUMER,
            "externalUserId": str(identity.id),
            "kycProviderKey": "multibank-sandbox",
            "kycLevel": identity.dd_level,
        }
    )
