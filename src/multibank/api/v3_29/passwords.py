"""Passwords tag: create and validate (update and lost-password arrive with the access issue)."""

from __future__ import annotations

from typing import Any

from fastapi import Path, Response
from pydantic import BaseModel

from multibank.access import service
from multibank.api.deps import (
    AnonCtx,
    AppContainer,
    CallerIdempotent,
    CurrentProgramme,
    Idempotent,
    LoggedIn,
    conflicts,
)
from multibank.api.limits import CallerCodeVerifyLimited, CodeSendLimited, CodeVerifyLimited
from multibank.api.routing import UnitOfWorkRouter
from multibank.kernel.vocabulary import (
    Email,
    IdentityId,
    Nonce,
    PasswordValidateRequest,
    SensitivePassword,
    TokenResponse,
    Wire,
)
from multibank.users.models import User

router = UnitOfWorkRouter(tags=["Passwords"])
COMPLEXITY = ("PASSWORD_TOO_SHORT", "PASSWORD_TOO_LONG", "PASSWORD_TOO_SIMPLE")


class PasswordInfo(BaseModel):
    identityId: IdentityId
    expiryDate: int


class PasswordCreateResponse(BaseModel):
    passwordInfo: PasswordInfo
    token: str


def password_info(user: User) -> dict[str, Any]:
    return {
        "identityId": {"type": user.identity_type, "id": str(user.identity_id)},
        "expiryDate": user.password_expires_at,
    }


@router.post(
    "/passwords/{user_id}/create",
    operation_id="passwordCreate",
    dependencies=[Idempotent],
    responses={
        404: {"description": "No such user in this programme"},
        **conflicts(
            "PASSWORD_ALREADY_CREATED",
            "PASSWORD_PROFILE_NOT_CONFIGURED_FOR_CREDENTIAL_TYPE",
            "PASSWORD_ALREADY_USED",
            *COMPLEXITY,
        ),
    },
)
async def password_create(
    body: PasswordValidateRequest,
    ctx: AnonCtx,
    container: AppContainer,
    user_id: str = Path(pattern=r"^[0-9]+$"),
) -> PasswordCreateResponse:
    """Sets a root user's first password and logs the user in."""
    result = await service.create_password(ctx, container.hasher, user_id, body.password.value)
    token = container.tokens().sign(result.session.id, ctx.programme.id)
    return PasswordCreateResponse.model_validate(
        {"passwordInfo": password_info(result.user), "token": token}
    )


@router.post(
    "/passwords/validate",
    operation_id="passwordValidate",
    status_code=204,
    response_class=Response,
    dependencies=[Idempotent],
    responses=conflicts(*COMPLEXITY),
)
async def password_validate(body: PasswordValidateRequest, _: CurrentProgramme) -> Response:
    """Checks a password against the complexity rules without storing it."""
    service.check_complexity(body.password.value)
    return Response(status_code=204)


class PasswordUpdateRequest(Wire):
    oldPassword: SensitivePassword
    newPassword: SensitivePassword


class LostPasswordStart(Wire):
    email: Email


class LostPasswordResume(Wire):
    nonce: Nonce
    email: Email
    newPassword: SensitivePassword


@router.post(
    "/passwords/update",
    operation_id="passwordUpdate",
    dependencies=[*CallerCodeVerifyLimited, CallerIdempotent],
    responses=conflicts("PASSWORD_INCORRECT", "PASSWORD_ALREADY_USED", *COMPLEXITY),
)
async def password_update(
    body: PasswordUpdateRequest, session: LoggedIn, container: AppContainer
) -> PasswordCreateResponse:
    """Changes the logged-in user's password (also with the temporary token of an expired one);
    answers a fresh token."""
    result = await service.update_password(
        session.ctx, container.hasher, session.auth, body.oldPassword.value, body.newPassword.value
    )
    token = container.tokens().sign(result.session.id, session.ctx.programme.id)
    return PasswordCreateResponse.model_validate(
        {"passwordInfo": password_info(result.user), "token": token}
    )


@router.post(
    "/passwords/lost_password/start",
    operation_id="lostPasswordInitiate",
    status_code=204,
    response_class=Response,
    dependencies=[CodeSendLimited, Idempotent],
    responses=conflicts("ACCOUNT_NOT_FOUND"),
)
async def lost_password_start(body: LostPasswordStart, ctx: AnonCtx) -> Response:
    """E-mails an active user a link to reset the password (nonce `123456` in sandbox). An
    e-mail with no active user: 409 ACCOUNT_NOT_FOUND in sandbox programmes; in live ones the
    answer is 204 whether or not the address has an account."""
    await service.start_lost_password(ctx, str(body.email))
    return Response(status_code=204)


@router.post(
    "/passwords/lost_password/resume",
    operation_id="lostPasswordResume",
    dependencies=[CodeVerifyLimited, Idempotent],
    responses=conflicts("INVALID_NONCE_OR_EMAIL", "PASSWORD_ALREADY_USED", *COMPLEXITY),
)
async def lost_password_resume(
    body: LostPasswordResume, ctx: AnonCtx, container: AppContainer
) -> TokenResponse:
    """Sets the new password, ends the user's other sessions and logs the user in."""
    result = await service.resume_lost_password(
        ctx, container.hasher, str(body.email), body.nonce, body.newPassword.value
    )
    return TokenResponse(token=container.tokens().sign(result.session.id, ctx.programme.id))
