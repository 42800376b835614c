"""Access tag: login, logout, identities and delegated access (step-up is in `stepup`)."""

from __future__ import annotations

from typing import Any, cast

from fastapi import Depends, Request, Response
from pydantic import BaseModel

from multibank.access import service
from multibank.api.deps import (
    AnonCtx,
    AppContainer,
    CallerIdempotent,
    CurrentCaller,
    CurrentProgramme,
    Db,
    Idempotent,
    LoggedIn,
    Now,
)
from multibank.api.limits import LoginLimited
from multibank.api.openapi import LOCKED
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.scope import scope_of
from multibank.kernel.tokens import end_session
from multibank.kernel.vocabulary import Email, IdentityId, SensitivePassword, TypeId, Wire

router = UnitOfWorkRouter(tags=["Access"])

# Login's answers beyond those of its dependencies, on both versions.
LOGIN_RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {"description": "E-mail or password incorrect (the same answer for either)"},
    409: {
        "description": "Password expired: `{token}` usable only for POST /passwords/update",
        "content": {
            "application/json": {
                "schema": {"type": "object", "properties": {"token": {"type": "string"}}}
            }
        },
    },
    **LOCKED,
}


class LoginRequest(Wire):
    email: Email
    password: SensitivePassword


class LoginResponse(BaseModel):
    token: str
    tokenType: str
    identity: IdentityId
    credentials: TypeId


def login_body(token: str, opened: service.Opened) -> dict[str, Any]:
    """The answer of a login, `LoginResponse`'s fields."""
    return {
        "token": token,
        "tokenType": opened.token_type,
        "identity": {"type": opened.identity_type, "id": str(opened.identity_id)},
        "credentials": {"type": opened.role, "id": str(opened.user_id)},
    }


_KNOWN = "access.known_credentials"


def known_credentials(container: AppContainer) -> service.KnownCredentials:
    """This process's `KnownCredentials` (decision 0025)."""
    known = container.caches.get(_KNOWN)
    if known is None:
        known = container.caches[_KNOWN] = service.KnownCredentials()
    return cast(service.KnownCredentials, known)


async def check_password(
    request: Request, body: LoginRequest, programme: CurrentProgramme, container: AppContainer
) -> None:
    """Checks the password before the request's transaction begins (issue 11): the hash then
    holds no connection, and on SQLite not the write lock, so logins use every core."""
    # Its one statement (if the hash is not remembered) takes a connection and gives it back
    # at once (a read session: autocommit).
    db = container.db.read_sessionmaker()
    try:
        scope_of(request).password_check = await service.check_password(
            db,
            container.hasher,
            known_credentials(container),
            programme.id,
            str(body.email),
            body.password.value,
        )
    finally:
        await db.close()


# Before `Idempotent`, whose record opens the transaction.
PasswordChecked = Depends(check_password)


async def do_login(
    request: Request, body: LoginRequest, ctx: AnonCtx, container: AppContainer
) -> dict[str, Any]:
    checked: service.PasswordCheck | None = scope_of(request).password_check
    # Only while the request holds no transaction: a ref's answer is stored in it (and on
    # SQLite it would hold the one writing connection the INSERT needs).
    if checked is not None and not ctx.db.in_transaction():
        known = known_credentials(container)
        done = await service.login_at_once(container.db, known, ctx.programme, checked, ctx.now)
        if done is not None:
            return login_body(container.tokens().sign(done.session_id, ctx.programme.id), done)
    try:
        result = await service.login(
            ctx, container.hasher, str(body.email), body.password.value, checked
        )
    except service.PasswordExpired as expired:
        expired.token = container.tokens().sign(expired.session.id, ctx.programme.id)
        raise
    opened = service.Opened.of(result)
    return login_body(container.tokens().sign(opened.session_id, ctx.programme.id), opened)


@router.post(
    "/login_with_password",
    operation_id="loginWithPassword",
    response_model=LoginResponse,
    dependencies=[LoginLimited, PasswordChecked, Idempotent],
    responses=LOGIN_RESPONSES,
)
async def login_with_password(
    request: Request, body: LoginRequest, ctx: AnonCtx, container: AppContainer
) -> dict[str, Any]:
    """Logs a root or authorised user in; the token lasts 5 minutes from the last call."""
    return await do_login(request, body, ctx, container)


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


class UserIdentity(BaseModel):
    id: IdentityId
    name: str


class AccessTokenRequest(Wire):
    identity: IdentityId


class AccessTokenResponse(BaseModel):
    token: str
    identity: IdentityId
    credentials: TypeId


@router.get("/identities", operation_id="userIdentities")
async def user_identities(session: LoggedIn) -> list[UserIdentity]:
    """The identities the logged-in user can act for."""
    found = await service.identities_of(session.ctx, session.auth)
    return [UserIdentity(id=IdentityId(type=t, id=str(i)), name=n) for t, i, n in found]


@router.post(
    "/access_token",
    operation_id="requestAccessToken",
    dependencies=[CallerIdempotent],
    responses={
        403: {"description": "Not an identity of this user"},
        423: {"description": "Locked"},
    },
)
async def request_access_token(
    body: AccessTokenRequest, session: LoggedIn, container: AppContainer
) -> AccessTokenResponse:
    """Delegated access: a token (tokenType ACCESS) bound to the identity asked for."""
    result = await service.access_token(
        session.ctx, session.auth, body.identity.type.value, body.identity.id
    )
    return AccessTokenResponse.model_validate(
        {
            "token": container.tokens().sign(result.session.id, session.ctx.programme.id),
            "identity": {"type": result.user.identity_type, "id": str(result.user.identity_id)},
            "credentials": {"type": result.user.role, "id": str(result.user.id)},
        }
    )
