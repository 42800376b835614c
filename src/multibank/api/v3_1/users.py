"""3.1.0 authorised users: no `mobile` or `dateOfBirth`; e-mails of 6 to 255 characters."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query
from pydantic import AfterValidator, BaseModel

from multibank.api.deps import CallerIdempotent, LoggedIn, conflicts
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29 import users as latest
from multibank.kernel.vocabulary import Email, IdentityId, Wire
from multibank.users import service
from multibank.users.models import User
from multibank.users.schemas import Name, UserBase


def _length(value: str) -> str:
    if not 6 <= len(value) <= 255:
        raise ValueError("size must be between 6 and 255")
    return value


Email310 = Annotated[Email, AfterValidator(_length)]
router = UnitOfWorkRouter(tags=["Authorised Users"])


class UserCreate310(UserBase):
    email: Email310


class UserUpdate310(Wire):
    name: Name | None = None
    surname: Name | None = None
    email: Email310 | None = None


class User310(BaseModel):
    id: str
    identity: IdentityId
    name: str
    surname: str
    email: str
    active: bool


class Users310(BaseModel):
    users: list[User310]
    count: int
    responseCount: int


def user_body(user: User) -> dict[str, Any]:
    body = latest.user_body(user)
    return {k: v for k, v in body.items() if k not in ("mobile", "dateOfBirth")}


@router.get("/users", operation_id="usersGet", response_model=Users310)
async def users_get(
    session: LoggedIn,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    active: bool | None = None,
    email: Email | None = None,
) -> dict[str, Any]:
    total, page = await service.page(
        session.ctx, session.auth, offset, limit, active, str(email) if email else None
    )
    return {"users": [user_body(u) for u in page], "count": total, "responseCount": len(page)}


@router.post(
    "/users",
    operation_id="userCreate",
    response_model=User310,
    dependencies=[CallerIdempotent],
    responses=conflicts("EMAIL_NOT_UNIQUE"),
)
async def user_create(body: UserCreate310, session: LoggedIn) -> dict[str, Any]:
    return user_body(await service.create(session.ctx, session.auth, body))


@router.get("/users/{user_id}", operation_id="userGetById", response_model=User310)
async def user_get(user_id: latest.UserId, session: LoggedIn) -> dict[str, Any]:
    return user_body(await service.get(session.ctx, session.auth, user_id))


@router.patch(
    "/users/{user_id}",
    operation_id="userUpdate",
    response_model=User310,
    dependencies=[CallerIdempotent],
    responses=conflicts("EMAIL_NOT_UNIQUE"),
)
async def user_update(
    user_id: latest.UserId, body: UserUpdate310, session: LoggedIn
) -> dict[str, Any]:
    return user_body(await service.update(session.ctx, session.auth, user_id, body))
