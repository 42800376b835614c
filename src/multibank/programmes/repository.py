"""Every query on programmes, keys, profiles and fee types."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.programmes.models import ARCHIVED, ApiKey, FeeType, Profile, Programme


async def get_programme(session: AsyncSession, programme_id: int) -> Programme | None:
    """The programme, unless archived by a reset (decision 0051): then none, as everywhere."""
    programme = await session.get(Programme, programme_id)
    return None if programme is None or programme.mode == ARCHIVED else programme


async def get_programme_by_name(session: AsyncSession, name: str) -> Programme | None:
    stmt = select(Programme).where(Programme.name == name, Programme.mode != ARCHIVED)
    return (await session.execute(stmt)).scalar_one_or_none()


async def list_programmes(session: AsyncSession) -> Sequence[Programme]:
    stmt = select(Programme).where(Programme.mode != ARCHIVED).order_by(Programme.id)
    return (await session.execute(stmt)).scalars().all()


async def page_of_programmes(
    session: AsyncSession, offset: int, limit: int
) -> tuple[int, list[tuple[Programme, list[str]]]]:
    """How many programmes are not archived, and the page at `offset` of them, newest first,
    each with the currencies its profiles offer (two statements whatever the page holds)."""
    listed = select(Programme).where(Programme.mode != ARCHIVED)
    count = (
        await session.execute(select(func.count()).select_from(listed.subquery()))
    ).scalar_one()
    page = (
        (await session.execute(listed.order_by(Programme.id.desc()).offset(offset).limit(limit)))
        .scalars()
        .all()
    )
    currencies: dict[int, set[str]] = {p.id: set() for p in page}
    held = select(Profile.programme_id, Profile.currencies).where(
        Profile.programme_id.in_(list(currencies))
    )
    for programme_id, offered in (await session.execute(held)).all():
        currencies[programme_id].update(offered)
    return int(count), [(p, sorted(currencies[p.id])) for p in page]


async def programme_for_key_hash(session: AsyncSession, key_hash: str) -> Programme | None:
    stmt = (
        select(Programme)
        .join(ApiKey, ApiKey.programme_id == Programme.id)
        .where(ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None))
    )
    return (await session.execute(stmt)).scalar_one_or_none()


async def list_api_keys(session: AsyncSession, programme_id: int) -> Sequence[ApiKey]:
    stmt = select(ApiKey).where(ApiKey.programme_id == programme_id).order_by(ApiKey.id)
    return (await session.execute(stmt)).scalars().all()


async def get_api_key(session: AsyncSession, programme_id: int, key_id: int) -> ApiKey | None:
    stmt = select(ApiKey).where(ApiKey.programme_id == programme_id, ApiKey.id == key_id)
    return (await session.execute(stmt)).scalar_one_or_none()


async def list_profiles(session: AsyncSession, programme_id: int) -> Sequence[Profile]:
    stmt = select(Profile).where(Profile.programme_id == programme_id).order_by(Profile.id)
    return (await session.execute(stmt)).scalars().all()


# Built once: every payment runs it.
_PROFILE = select(Profile).where(
    Profile.programme_id == bindparam("programme_id"), Profile.id == bindparam("profile_id")
)


async def get_profile(session: AsyncSession, programme_id: int, profile_id: int) -> Profile | None:
    params = {"programme_id": programme_id, "profile_id": profile_id}
    return (await session.execute(_PROFILE, params)).scalar_one_or_none()


async def list_fee_types(session: AsyncSession, programme_id: int) -> Sequence[FeeType]:
    stmt = select(FeeType).where(FeeType.programme_id == programme_id).order_by(FeeType.name)
    return (await session.execute(stmt)).scalars().all()


# Built once with bound parameters: every fee charge runs it (decision 0014).
_FEE_TYPE = select(FeeType).where(
    FeeType.programme_id == bindparam("programme_id"), FeeType.name == bindparam("name")
)


async def get_fee_type(session: AsyncSession, programme_id: int, name: str) -> FeeType | None:
    params = {"programme_id": programme_id, "name": name}
    return (await session.execute(_FEE_TYPE, params)).scalar_one_or_none()
