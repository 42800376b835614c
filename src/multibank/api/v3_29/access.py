"""Access tag: login and logout (the rest of the tag arrives with step-up and identities)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel

from multibank.access import service
from multibank.api.deps import (
    AnonCtx,
    AppContainer,
    CallerIdempotent,
    CurrentCaller,
    Db,
    Idempotent,
    Now,
)
from multibank.api.routing import UnitOfWorkRoute
from multibank.api.schemas import Email, IdentityId, SensitivePassword, TypeId, Wire
from multibank.kernel.tokens import end_session

router = APIRouter(tags=["Access"], route_class=UnitOfWorkRoute)


class LoginRequest(Wire):
    email: Email
    password: SensitivePassword


class LoginResponse(BaseModel):
    token: str
    tokenType: str
    identity: IdentityId
    credentials: TypeId


def login_body(token: str, result: service.LoginResult) -> dict[str, Any]:
    user = result.user
    return {
        "token": token,
        "tokenType": result.session.token_type,
        "identity": {"type": user.identity_type, "id": str(user.identity_id)},
        "credentials": {"type": user.role, "id": str(user.id)},
    }


async def do_login(body: LoginRequest, ctx: AnonCtx, container: AppContainer) -> dict[str, Any]:
    result = await service.login(ctx, container.hasher, str(body.email), body.password.value)
    return login_body(container.tokens().sign(result.session.id, ctx.programme.id), result)


@router.post(
    "/login_with_password",
    operation_id="loginWithPassword",
    dependencies=[Idempotent],
    responses={
        403: {"description": "E-mail or password incorrect"},
        423: {"description": "Locked"},
    },
)
async def login_with_password(
    body: LoginRequest, ctx: AnonCtx, container: AppContainer
) -> LoginResponse:
    """Logs a root or authorised user in; the token lasts 5 minutes from the last call."""
    return LoginResponse.model_validate(await do_login(body, ctx, container))


@router.post(
    "/logout",
    operation_id="logout",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
)
async def logout(caller: CurrentCaller, db: Db, clock: Now) -> Response:
    """Ends the session the bearer token names; the token answers 401 from now on."""
    await end_session(db, caller.session.id, clock.now_ms())
    return Response(status_code=204)
