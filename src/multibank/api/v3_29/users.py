"""Authorised users tag (3.29.1)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query, Response

from multibank.access import service as access
from multibank.api.deps import (
    AnonCtx,
    AppContainer,
    CallerIdempotent,
    Idempotent,
    LoggedIn,
    conflicts,
)
from multibank.api.limits import CallerCodeSendLimited, CodeSendLimited, CodeVerifyLimited
from multibank.api.routing import UnitOfWorkRouter
from multibank.identities import service as identities
from multibank.kernel.vocabulary import (
    Email,
    EmailRequest,
    EmailVerifyRequest,
    ReferenceResponse,
    TokenResponse,
)
from multibank.users import service
from multibank.users.models import User
from multibank.users.schemas import (
    InviteConsume,
    InviteValidate,
    UserCreate,
    UserRead,
    UsersPage,
    UserUpdate,
)

router = UnitOfWorkRouter(tags=["Authorised Users"])
UserId = Annotated[str, Path(pattern=r"^[0-9]+$")]
PASSWORD_CONFLICTS = (
    "PASSWORD_ALREADY_USED",
    "PASSWORD_TOO_SHORT",
    "PASSWORD_TOO_LONG",
    "PASSWORD_TOO_SIMPLE",
)


def user_body(user: User) -> dict[str, Any]:
    has_mobile = user.mobile_number is not None
    return {
        "id": str(user.id),
        "identity": {"type": user.identity_type, "id": str(user.identity_id)},
        "name": user.name,
        "surname": user.surname,
        "email": user.email,
        "mobile": (
            {"countryCode": user.mobile_country_code, "number": user.mobile_number}
            if has_mobile
            else None
        ),
        "active": user.active,
        "dateOfBirth": user.date_of_birth,
    }


@router.get(
    "/users", operation_id="usersGet", response_model=UsersPage, response_model_exclude_none=True
)
async def users_get(
    session: LoggedIn,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    active: bool | None = None,
    email: Email | None = None,
) -> dict[str, Any]:
    """The identity's authorised users (not its root user); pages of at most 100."""
    total, page = await service.page(
        session.ctx, session.auth, offset, limit, active, str(email) if email else None
    )
    return {"users": [user_body(u) for u in page], "count": total, "responseCount": len(page)}


@router.post(
    "/users",
    operation_id="userCreate",
    response_model=UserRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses=conflicts("EMAIL_NOT_UNIQUE", "MOBILE_NOT_UNIQUE", "MOBILE_OR_COUNTRY_CODE_INVALID"),
)
async def user_create(body: UserCreate, session: LoggedIn) -> dict[str, Any]:
    """Creates an active authorised user, who sets a password through an invite."""
    return user_body(await service.create(session.ctx, session.auth, body))


@router.get(
    "/users/{user_id}",
    operation_id="userGetById",
    response_model=UserRead,
    response_model_exclude_none=True,
)
async def user_get(user_id: UserId, session: LoggedIn) -> dict[str, Any]:
    return user_body(await service.get(session.ctx, session.auth, user_id))


@router.patch(
    "/users/{user_id}",
    operation_id="userUpdate",
    response_model=UserRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses=conflicts("EMAIL_NOT_UNIQUE", "MOBILE_NOT_UNIQUE", "MOBILE_OR_COUNTRY_CODE_INVALID"),
)
async def user_update(user_id: UserId, body: UserUpdate, session: LoggedIn) -> dict[str, Any]:
    """Changes only the fields sent."""
    return user_body(await service.update(session.ctx, session.auth, user_id, body))


@router.post(
    "/users/{user_id}/activate",
    operation_id="userActivate",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
)
async def user_activate(user_id: UserId, session: LoggedIn) -> Response:
    """Another active user of the identity re-activates a user."""
    await service.set_active(session.ctx, session.auth, user_id, True)
    return Response(status_code=204)


@router.post(
    "/users/{user_id}/deactivate",
    operation_id="userDeactivate",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
)
async def user_deactivate(user_id: UserId, session: LoggedIn) -> Response:
    """The user can no longer log in; their sessions end now."""
    await service.set_active(session.ctx, session.auth, user_id, False)
    return Response(status_code=204)


@router.post(
    "/users/{user_id}/invite",
    operation_id="userInviteSend",
    status_code=204,
    response_class=Response,
    dependencies=[*CallerCodeSendLimited, CallerIdempotent],
    responses=conflicts("INVITE_ALREADY_CONSUMED"),
)
async def user_invite_send(user_id: UserId, session: LoggedIn) -> Response:
    """E-mails an invite valid for one month (code `123456` in sandbox)."""
    await service.send_invite(session.ctx, session.auth, user_id)
    return Response(status_code=204)


@router.post(
    "/users/{user_id}/invite/validate",
    operation_id="userInviteValidate",
    status_code=204,
    response_class=Response,
    dependencies=[CodeVerifyLimited, Idempotent],
    responses=conflicts("INVITE_OR_INVITE_CODE_INVALID"),
)
async def user_invite_validate(user_id: UserId, body: InviteValidate, ctx: AnonCtx) -> Response:
    await service.validate_invite(ctx, user_id, body.inviteCode)
    return Response(status_code=204)


@router.post(
    "/users/{user_id}/invite/consume",
    operation_id="userInviteConsume",
    dependencies=[CodeVerifyLimited, Idempotent],
    responses={
        **conflicts("INVITE_OR_INVITE_CODE_INVALID", *PASSWORD_CONFLICTS),
        403: {"description": "The user is deactivated: it may not log in. No body."},
    },
)
async def user_invite_consume(
    user_id: UserId, body: InviteConsume, ctx: AnonCtx, container: AppContainer
) -> TokenResponse:
    """Sets the user's first password and logs the user in."""
    session = await access.consume_invite(
        ctx, container.hasher, user_id, body.inviteCode, body.password.value
    )
    return TokenResponse(token=container.tokens().sign(session.id, ctx.programme.id))


@router.post(
    "/users/verification/email/send",
    operation_id="authorisedUserEmailVerificationCodeSend",
    status_code=204,
    response_class=Response,
    dependencies=[CodeSendLimited, Idempotent],
    responses=conflicts("EMAIL_NOT_FOUND"),
)
async def user_email_send(body: EmailRequest, ctx: AnonCtx) -> Response:
    await service.send_email_code(ctx, str(body.email))
    return Response(status_code=204)


@router.post(
    "/users/verification/email/verify",
    operation_id="authorisedUserEmailVerify",
    status_code=204,
    response_class=Response,
    dependencies=[CodeVerifyLimited, Idempotent],
    responses=conflicts("VERIFICATION_CODE_INVALID"),
)
async def user_email_verify(body: EmailVerifyRequest, ctx: AnonCtx) -> Response:
    await identities.verify_email(ctx, str(body.email), body.verificationCode, None)
    return Response(status_code=204)


@router.post(
    "/users/kyc",
    operation_id="userKyc",
    dependencies=[CallerIdempotent],
    responses=conflicts(
        "EMAIL_NOT_VERIFIED",
        "KYC_ALREADY_APPROVED",
        "KYC_PENDING_REVIEW",
        "KYC_REJECTED",
        "KYB_IDENTITY_NOT_APPROVED",
    ),
)
async def user_kyc(session: LoggedIn) -> ReferenceResponse:
    """Starts KYC for the logged-in user; the reference opens the provider UI."""
    return ReferenceResponse(reference=await service.start_kyc(session.ctx, session.auth))
