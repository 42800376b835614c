"""Every query on identities; each starts from the programme's own rows."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Protocol, cast

from sqlalchemy import Select, bindparam, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.identities.models import Identity
from multibank.users.models import ROOT, User


def of_programme(programme_id: int) -> Select[Identity]:
    return select(Identity).where(Identity.programme_id == programme_id)


# Built once with bound parameters: they run on the request path (decision 0014).
_GET = select(Identity).where(
    Identity.programme_id == bindparam("programme_id"), Identity.id == bindparam("identity_id")
)
_GET_OF_KIND = _GET.where(Identity.type == bindparam("kind"))
# An identity of a kind with its root user: what reading a corporate or a consumer answers.
_WITH_ROOT = (
    select(Identity, User)
    .join(User, (User.identity_id == Identity.id) & (User.programme_id == Identity.programme_id))
    .where(
        Identity.programme_id == bindparam("programme_id"),
        Identity.id == bindparam("identity_id"),
        Identity.type == bindparam("kind"),
        User.role == ROOT,
    )
)


class IdentityView(Protocol):
    """What an answer about an identity reads of it."""

    @property
    def id(self) -> int: ...
    @property
    def profile_id(self) -> int: ...
    @property
    def tag(self) -> str | None: ...
    @property
    def ip_address(self) -> str: ...
    @property
    def accepted_terms(self) -> bool: ...
    @property
    def base_currency(self) -> str | None: ...
    @property
    def fee_group(self) -> str: ...
    @property
    def industry(self) -> str | None: ...
    @property
    def source_of_funds(self) -> str | None: ...
    @property
    def source_of_funds_other(self) -> str | None: ...
    @property
    def company(self) -> dict[str, Any] | None: ...
    @property
    def created_at(self) -> int: ...


class RootView(Protocol):
    """What an answer about an identity reads of its root user."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def surname(self) -> str: ...
    @property
    def email(self) -> str: ...
    @property
    def mobile_country_code(self) -> str | None: ...
    @property
    def mobile_number(self) -> str | None: ...
    @property
    def date_of_birth(self) -> dict[str, int] | None: ...
    @property
    def company_position(self) -> str | None: ...
    @property
    def occupation(self) -> str | None: ...
    @property
    def address(self) -> dict[str, Any] | None: ...
    @property
    def nationality(self) -> str | None: ...
    @property
    def place_of_birth(self) -> str | None: ...
    @property
    def active(self) -> bool: ...
    @property
    def email_verified(self) -> bool: ...
    @property
    def mobile_verified(self) -> bool: ...
    @property
    def password_hash(self) -> str | None: ...


def _attributes(model: type[Any]) -> list[tuple[str, Any]]:
    """(attribute, column) of each column a model maps."""
    return [(attr.key, attr.columns[0]) for attr in sa_inspect(model).column_attrs]


# Reads answer from plain rows, without ORM instances (decision 0019): the identity's columns
# and its root user's, labelled apart, in one Core statement (tables, not entities) built once.
_IDENTITY_ATTRS = _attributes(Identity)
_ROOT_ATTRS = _attributes(User)
_IDENTITY_KEYS = tuple(key for key, _ in _IDENTITY_ATTRS)
_ROOT_KEYS = tuple(key for key, _ in _ROOT_ATTRS)
_IDENTITIES = Identity.__table__
_USERS = User.__table__
_VIEW_WITH_ROOT = (
    select(
        *(column.label(f"i_{key}") for key, column in _IDENTITY_ATTRS),
        *(column.label(f"u_{key}") for key, column in _ROOT_ATTRS),
    )
    .join_from(
        _IDENTITIES,
        _USERS,
        (_USERS.c.identity_id == _IDENTITIES.c.id)
        & (_USERS.c.programme_id == _IDENTITIES.c.programme_id),
    )
    .where(
        _IDENTITIES.c.programme_id == bindparam("programme_id"),
        _IDENTITIES.c.id == bindparam("identity_id"),
        _IDENTITIES.c.type == bindparam("kind"),
        _USERS.c.role == ROOT,
    )
)


async def view_with_root(
    db: AsyncSession, programme_id: int, identity_id: int, kind: str
) -> tuple[IdentityView, RootView] | None:
    params = {"programme_id": programme_id, "identity_id": identity_id, "kind": kind}
    row = (await db.execute(_VIEW_WITH_ROOT, params)).first()
    if row is None:
        return None
    split = len(_IDENTITY_KEYS)
    identity = SimpleNamespace(**dict(zip(_IDENTITY_KEYS, row[:split], strict=True)))
    root = SimpleNamespace(**dict(zip(_ROOT_KEYS, row[split:], strict=True)))
    return cast(IdentityView, identity), cast(RootView, root)


async def with_root(
    db: AsyncSession, programme_id: int, identity_id: int, kind: str
) -> tuple[Identity, User] | None:
    params = {"programme_id": programme_id, "identity_id": identity_id, "kind": kind}
    row = (await db.execute(_WITH_ROOT, params)).one_or_none()
    return None if row is None else (row[0], row[1])


_HOLDERS = (
    select(Identity.id, Identity.type, Identity.company, User.name, User.surname)
    .join(User, (User.identity_id == Identity.id) & (User.programme_id == Identity.programme_id))
    .where(
        Identity.programme_id == bindparam("programme_id"),
        Identity.id.in_(bindparam("ids", expanding=True)),
        User.role == ROOT,
    )
)


async def holders(
    db: AsyncSession, programme_id: int, ids: list[int]
) -> dict[int, tuple[str, dict[str, Any] | None, str, str]]:
    """(type, company, root name, root surname) of each of the programme's identities in `ids`,
    in one statement: what names an identity to the other side of a payment."""
    rows = await db.execute(_HOLDERS, {"programme_id": programme_id, "ids": ids})
    return {int(r[0]): (str(r[1]), r[2], str(r[3]), str(r[4])) for r in rows}


async def get(
    db: AsyncSession, programme_id: int, identity_id: int, kind: str | None = None
) -> Identity | None:
    params = {"programme_id": programme_id, "identity_id": identity_id}
    if kind is None:
        return (await db.execute(_GET, params)).scalar_one_or_none()
    return (await db.execute(_GET_OF_KIND, {**params, "kind": kind})).scalar_one_or_none()


async def get_for_update(db: AsyncSession, programme_id: int, identity_id: int) -> Identity | None:
    stmt = of_programme(programme_id).where(Identity.id == identity_id).with_for_update()
    return (await db.execute(stmt)).scalar_one_or_none()


async def by_reference(db: AsyncSession, reference: str) -> Identity | None:
    """The sandbox provider page is addressed by reference alone (the reference is the secret)."""
    stmt = select(Identity).where(Identity.dd_reference == reference)
    return (await db.execute(stmt)).scalar_one_or_none()
