"""3.1.0 login: the same, without `tokenType` (introduced with 3.29's multi-identity login)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from pydantic import BaseModel

from multibank.api.deps import AnonCtx, AppContainer, Idempotent
from multibank.api.limits import LoginLimited
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29.access import LOGIN_RESPONSES, LoginRequest, PasswordChecked, do_login
from multibank.api.v3_29.access import login_with_password as latest
from multibank.kernel.vocabulary import IdentityId, TypeId

router = UnitOfWorkRouter(tags=["Access"])


class LoginResponse(BaseModel):
    token: str
    identity: IdentityId
    credentials: TypeId


@router.post(
    "/login_with_password",
    operation_id="loginWithPassword",
    response_model=LoginResponse,
    dependencies=[LoginLimited, PasswordChecked, Idempotent],
    responses=LOGIN_RESPONSES,
    description=latest.__doc__,
)
async def login_with_password(
    request: Request, body: LoginRequest, ctx: AnonCtx, container: AppContainer
) -> dict[str, Any]:
    answer = await do_login(request, body, ctx, container)
    del answer["tokenType"]
    return answer
