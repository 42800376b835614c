"""Authorised-user wire shapes of 3.29.1; 3.1.0 drops `mobile` and `dateOfBirth`."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

from multibank.kernel.vocabulary import (
    Date,
    Email,
    IdentityId,
    Mobile,
    Nonce,
    SensitivePassword,
    Wire,
)

Name = Annotated[str, StringConstraints(min_length=1, max_length=20)]


class UserBase(Wire):
    """What every version's create body has."""

    name: Name
    surname: Name
    email: Email


class UserCreate(UserBase):
    mobile: Mobile | None = None
    dateOfBirth: Date | None = None


class UserUpdate(Wire):
    name: Name | None = None
    surname: Name | None = None
    email: Email | None = None
    mobile: Mobile | None = None
    dateOfBirth: Date | None = None


class UserRead(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    identity: IdentityId
    name: str
    surname: str
    email: str
    mobile: Mobile | None = None
    active: bool
    dateOfBirth: Date | None = None


class UsersPage(BaseModel):
    users: list[UserRead]
    count: int
    responseCount: int


class InviteValidate(Wire):
    inviteCode: Nonce


class InviteConsume(Wire):
    inviteCode: Nonce
    password: SensitivePassword
