"""Every query on identities; each starts from the programme's own rows."""

from __future__ import annotations

from sqlalchemy import Select, bindparam, select
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


async def with_root(
    db: AsyncSession, programme_id: int, identity_id: int, kind: str
) -> tuple[Identity, User] | None:
    params = {"programme_id": programme_id, "identity_id": identity_id, "kind": kind}
    row = (await db.execute(_WITH_ROOT, params)).one_or_none()
    return None if row is None else (row[0], row[1])


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
