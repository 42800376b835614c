"""Every query on users; each starts from the programme's own rows."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Select, bindparam, case, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.users.models import ROOT, USER, User


def of_programme(programme_id: int) -> Select[User]:
    return select(User).where(User.programme_id == programme_id)


def email_key(email: str) -> str:
    return email.strip().lower()


# Built once with bound parameters: they run on the request path (decisions 0014, 0019).
_GET = select(User).where(
    User.programme_id == bindparam("programme_id"), User.id == bindparam("user_id")
)
_BY_EMAIL = select(User).where(
    User.programme_id == bindparam("programme_id"), User.email_key == bindparam("email_key")
)
_USERS = User.__table__
# A login's read, before its hash: columns, not an ORM object.
_CREDENTIAL_BY_EMAIL = select(_USERS.c.id, _USERS.c.password_hash).where(
    _USERS.c.programme_id == bindparam("programme_id"),
    _USERS.c.email_key == bindparam("email_key"),
)


async def get(db: AsyncSession, programme_id: int, user_id: int) -> User | None:
    params = {"programme_id": programme_id, "user_id": user_id}
    return (await db.execute(_GET, params)).scalar_one_or_none()


async def by_email(db: AsyncSession, programme_id: int, email: str) -> User | None:
    params = {"programme_id": programme_id, "email_key": email_key(email)}
    return (await db.execute(_BY_EMAIL, params)).scalar_one_or_none()


async def credential_by_email(
    db: AsyncSession, programme_id: int, email: str
) -> tuple[int, str | None] | None:
    """The user's id and password hash, as a plain row: what checking a password reads."""
    params = {"programme_id": programme_id, "email_key": email_key(email)}
    row = (await db.execute(_CREDENTIAL_BY_EMAIL, params)).first()
    return None if row is None else (int(row.id), row.password_hash)


async def email_taken(
    db: AsyncSession, programme_id: int, email: str, except_user: int | None = None
) -> bool:
    stmt = of_programme(programme_id).where(User.email_key == email_key(email))
    if except_user is not None:
        stmt = stmt.where(User.id != except_user)
    return (await db.execute(stmt.limit(1))).first() is not None


# Built once with bound parameters: it runs on the request path (decision 0014).
_ROOT_OF = select(User).where(
    User.programme_id == bindparam("programme_id"),
    User.identity_id == bindparam("identity_id"),
    User.role == ROOT,
)


async def root_of(db: AsyncSession, programme_id: int, identity_id: int) -> User:
    params = {"programme_id": programme_id, "identity_id": identity_id}
    return (await db.execute(_ROOT_OF, params)).scalar_one()


async def authorised_user(
    db: AsyncSession, programme_id: int, identity_id: int, user_id: int
) -> User | None:
    stmt = of_programme(programme_id).where(
        User.identity_id == identity_id, User.role == USER, User.id == user_id
    )
    return (await db.execute(stmt)).scalar_one_or_none()


async def mobile_taken(
    db: AsyncSession,
    programme_id: int,
    identity_id: int,
    country_code: str,
    number: str,
    except_user: int | None = None,
) -> bool:
    stmt = of_programme(programme_id).where(
        User.identity_id == identity_id,
        User.mobile_country_code == country_code,
        User.mobile_number == number,
    )
    if except_user is not None:
        stmt = stmt.where(User.id != except_user)
    return (await db.execute(stmt.limit(1))).first() is not None


async def list_authorised(
    db: AsyncSession,
    programme_id: int,
    identity_id: int,
    *,
    offset: int,
    limit: int,
    active: bool | None,
    email: str | None,
) -> tuple[int, Sequence[User]]:
    stmt = of_programme(programme_id).where(User.identity_id == identity_id, User.role == USER)
    if active is not None:
        stmt = stmt.where(User.active == active)
    if email is not None:
        stmt = stmt.where(User.email_key == email_key(email))
    total = (await db.execute(select(func.count()).select_from(stmt.subquery()))).scalar_one()
    page = (await db.execute(stmt.order_by(User.id).offset(offset).limit(limit))).scalars().all()
    return int(total), page


async def by_kyc_reference(db: AsyncSession, reference: str) -> User | None:
    stmt = select(User).where(User.kyc_reference == reference)
    return (await db.execute(stmt)).scalar_one_or_none()


async def count_failed_login(db: AsyncSession, user_id: int, limit: int) -> bool:
    """Counts one failed login in one statement, so parallel failures each count (a
    read-modify-write lost counts under load); answers True for the one failure that reached
    `limit`, whose count starts again at 0."""
    stmt = (
        update(User)
        .where(User.id == user_id)
        .values(
            failed_logins=case((User.failed_logins + 1 >= limit, 0), else_=User.failed_logins + 1)
        )
        .returning(User.failed_logins)
        .execution_options(synchronize_session=False)
    )
    return (await db.execute(stmt)).scalar_one() == 0
