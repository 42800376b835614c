"""Reads of an identity's beneficiaries beside the service's (the portal's customer page)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.accounts.models import ManagedAccount
from multibank.beneficiaries.models import Beneficiary
from multibank.cards.models import ManagedCard


async def of_identity(
    db: AsyncSession, programme_id: int, identity_id: int, limit: int
) -> list[tuple[Beneficiary, bool]]:
    """The identity's `limit` newest beneficiaries, newest first, each with whether its
    instrument is an account or card of the programme (False for bank details, and for an
    instrument that names none: an INVALID beneficiary's can). One query: the instrument is
    found by outer joins, not looked up row by row."""
    account = (
        (Beneficiary.instrument_type == "managed_accounts")
        & (ManagedAccount.id == Beneficiary.instrument_id)
        & (ManagedAccount.programme_id == Beneficiary.programme_id)
    )
    card = (
        (Beneficiary.instrument_type == "managed_cards")
        & (ManagedCard.id == Beneficiary.instrument_id)
        & (ManagedCard.programme_id == Beneficiary.programme_id)
    )
    stmt = (
        select(Beneficiary, ManagedAccount.id, ManagedCard.id)
        .outerjoin(ManagedAccount, account)
        .outerjoin(ManagedCard, card)
        .where(Beneficiary.programme_id == programme_id, Beneficiary.identity_id == identity_id)
        .order_by(Beneficiary.created_at.desc(), Beneficiary.id.desc())
        .limit(limit)
    )
    rows = (await db.execute(stmt)).all()
    return [(b, a is not None or c is not None) for b, a, c in rows]
