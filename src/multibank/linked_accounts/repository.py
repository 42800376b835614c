"""Every query on linked accounts and their verification runs; each starts from the owner's
own rows (or, for the simulator and deposits, from the programme's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Select, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.accounts.models import ManagedAccount
from multibank.linked_accounts.models import (
    PENDING_USER,
    PENDING_VERIFICATION,
    REJECTED,
    REMOVED,
    TRANSFER_INSTRUCTION,
    LinkedAccount,
    VerificationRun,
    VerificationStep,
)


async def get(
    db: AsyncSession,
    programme_id: int,
    identity_id: int | None,
    account_id: int,
    lock: bool = False,
) -> LinkedAccount | None:
    """The account, if it is the identity's (any identity's of the programme with None)."""
    stmt = select(LinkedAccount).where(
        LinkedAccount.programme_id == programme_id, LinkedAccount.id == account_id
    )
    if identity_id is not None:
        stmt = stmt.where(LinkedAccount.identity_id == identity_id)
    if lock:
        stmt = stmt.with_for_update()
    return (await db.execute(stmt.execution_options(populate_existing=True))).scalar_one_or_none()


async def count_kept(db: AsyncSession, programme_id: int, identity_id: int) -> int:
    """The identity's accounts not `REMOVED` (D45's limit counts them)."""
    stmt = select(func.count()).where(
        LinkedAccount.programme_id == programme_id,
        LinkedAccount.identity_id == identity_id,
        LinkedAccount.state != REMOVED,
    )
    return int((await db.execute(stmt)).scalar_one())


async def already_linked(db: AsyncSession, programme_id: int, identity_id: int, key: str) -> bool:
    """The identity links this reference already, in a state that still counts."""
    stmt = select(LinkedAccount.id).where(
        LinkedAccount.programme_id == programme_id,
        LinkedAccount.identity_id == identity_id,
        LinkedAccount.reference_key == key,
        LinkedAccount.state.not_in([REMOVED, REJECTED]),
    )
    return (await db.execute(stmt.limit(1))).first() is not None


async def is_managed_account(
    db: AsyncSession, iban: str | None, sort_code: str | None, account_number: str | None
) -> bool:
    """An IBAN or UK account number of one of this server's managed accounts (any programme)."""
    found = []
    if iban is not None:
        found.append(ManagedAccount.iban == iban)
    if sort_code is not None and account_number is not None:
        found.append(
            (ManagedAccount.sort_code == sort_code)
            & (ManagedAccount.account_number == account_number)
        )
    if not found:
        return False
    stmt = select(ManagedAccount.id).where(or_(*found)).limit(1)
    return (await db.execute(stmt)).first() is not None


async def iban_accounts(
    db: AsyncSession, programme_id: int, identity_id: int
) -> Sequence[ManagedAccount]:
    """The identity's `ACTIVE` managed accounts with an allocated IBAN, oldest first."""
    stmt = (
        select(ManagedAccount)
        .where(
            ManagedAccount.programme_id == programme_id,
            ManagedAccount.identity_id == identity_id,
            ManagedAccount.state == "ACTIVE",
            ManagedAccount.iban_state == "ALLOCATED",
        )
        .order_by(ManagedAccount.created_at, ManagedAccount.id)
    )
    return (await db.execute(stmt)).scalars().all()


@dataclass(frozen=True)
class Filters:
    profile_id: int | None = None
    friendly_name: str | None = None
    states: Sequence[str] = ()
    currency: str | None = None
    created_from: int | None = None
    created_to: int | None = None
    tag: str | None = None


def _filtered(programme_id: int, identity_id: int, f: Filters) -> Select[LinkedAccount]:
    stmt = select(LinkedAccount).where(
        LinkedAccount.programme_id == programme_id, LinkedAccount.identity_id == identity_id
    )
    if f.profile_id is not None:
        stmt = stmt.where(LinkedAccount.profile_id == f.profile_id)
    if f.friendly_name is not None:
        stmt = stmt.where(LinkedAccount.friendly_name == f.friendly_name)
    if f.states:
        stmt = stmt.where(LinkedAccount.state.in_(list(f.states)))
    if f.currency is not None:
        stmt = stmt.where(LinkedAccount.currency == f.currency)
    if f.created_from is not None:
        stmt = stmt.where(LinkedAccount.created_at >= f.created_from)
    if f.created_to is not None:
        stmt = stmt.where(LinkedAccount.created_at <= f.created_to)
    if f.tag is not None:
        stmt = stmt.where(LinkedAccount.tag == f.tag)
    return stmt


async def page(
    db: AsyncSession,
    programme_id: int,
    identity_id: int,
    filters: Filters,
    offset: int,
    limit: int,
) -> tuple[int, Sequence[LinkedAccount]]:
    """One page of the identity's accounts, newest first, and how many match in all."""
    stmt = _filtered(programme_id, identity_id, filters)
    total = (await db.execute(select(func.count()).select_from(stmt.subquery()))).scalar_one()
    ordered = stmt.order_by(LinkedAccount.created_at.desc(), LinkedAccount.id.desc())
    rows = (await db.execute(ordered.offset(offset).limit(limit))).scalars().all()
    return int(total), rows


async def of_identity(
    db: AsyncSession, programme_id: int, identity_id: int, limit: int
) -> Sequence[LinkedAccount]:
    """The identity's `limit` newest accounts, newest first, in every state (the portal's
    customer page), without `page`'s count."""
    stmt = (
        _filtered(programme_id, identity_id, Filters())
        .order_by(LinkedAccount.created_at.desc(), LinkedAccount.id.desc())
        .limit(limit)
    )
    return (await db.execute(stmt)).scalars().all()


async def runs(
    db: AsyncSession, account_id: int, states: Sequence[str], offset: int, limit: int
) -> tuple[int, Sequence[VerificationRun]]:
    """One page of the account's runs, newest first, and how many match in all."""
    stmt = select(VerificationRun).where(VerificationRun.linked_account_id == account_id)
    if states:
        stmt = stmt.where(VerificationRun.state.in_(list(states)))
    total = (await db.execute(select(func.count()).select_from(stmt.subquery()))).scalar_one()
    ordered = stmt.order_by(VerificationRun.created_at.desc(), VerificationRun.id.desc())
    rows = (await db.execute(ordered.offset(offset).limit(limit))).scalars().all()
    return int(total), rows


async def steps_of(db: AsyncSession, run_ids: Sequence[int]) -> Sequence[VerificationStep]:
    if not run_ids:
        return []
    stmt = select(VerificationStep).where(VerificationStep.run_id.in_(list(run_ids)))
    return (await db.execute(stmt.execution_options(populate_existing=True))).scalars().all()


async def latest_run(db: AsyncSession, account_id: int) -> VerificationRun | None:
    stmt = (
        select(VerificationRun)
        .where(VerificationRun.linked_account_id == account_id)
        .order_by(VerificationRun.created_at.desc(), VerificationRun.id.desc())
        .limit(1)
        .with_for_update()
    )
    return (await db.execute(stmt)).scalar_one_or_none()


async def awaiting_transfer(
    db: AsyncSession, programme_id: int, reference: str
) -> Sequence[tuple[LinkedAccount, VerificationStep]]:
    """The accounts still verifying whose transfer instruction has this reference and awaits
    its transfer, locked."""
    stmt = (
        select(LinkedAccount, VerificationStep)
        .join(VerificationRun, VerificationRun.linked_account_id == LinkedAccount.id)
        .join(VerificationStep, VerificationStep.run_id == VerificationRun.id)
        .where(
            LinkedAccount.programme_id == programme_id,
            LinkedAccount.state == PENDING_VERIFICATION,
            VerificationStep.reference == reference,
            VerificationStep.step == TRANSFER_INSTRUCTION,
            VerificationStep.status == PENDING_USER,
        )
        .order_by(LinkedAccount.id)
        .with_for_update()
    )
    return [(a, s) for a, s in (await db.execute(stmt)).all()]
