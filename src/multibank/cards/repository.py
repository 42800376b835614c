"""Every query on managed cards; each starts from the owner's own rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Select, and_, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.cards.models import CardMovement, ManagedCard
from multibank.ledger.models import LedgerAccount

# A card and its ledger account (None for a debit card, which holds no money).
Row = tuple[ManagedCard, LedgerAccount | None]


def of_owner(programme_id: int, identity_id: int) -> Select[ManagedCard, LedgerAccount]:
    return (
        select(ManagedCard, LedgerAccount)
        .outerjoin(LedgerAccount, LedgerAccount.id == ManagedCard.id)
        .where(ManagedCard.programme_id == programme_id, ManagedCard.identity_id == identity_id)
    )


async def get(
    db: AsyncSession, programme_id: int, identity_id: int, card_id: int, for_update: bool = False
) -> Row | None:
    stmt = of_owner(programme_id, identity_id).where(ManagedCard.id == card_id)
    if for_update:
        stmt = stmt.with_for_update(of=ManagedCard)
    row = (await db.execute(stmt.execution_options(populate_existing=True))).one_or_none()
    return None if row is None else (row[0], row[1])


async def get_in_programme(
    db: AsyncSession, programme_id: int, card_id: int, for_update: bool = False
) -> ManagedCard | None:
    """Any identity's card of the programme (a send's destination is another identity's)."""
    stmt = select(ManagedCard).where(
        ManagedCard.programme_id == programme_id, ManagedCard.id == card_id
    )
    if for_update:
        stmt = stmt.with_for_update()
    return (await db.execute(stmt.execution_options(populate_existing=True))).scalar_one_or_none()


async def number_taken(db: AsyncSession, programme_id: int, number_hash: str) -> bool:
    stmt = select(
        exists().where(
            ManagedCard.programme_id == programme_id, ManagedCard.number_hash == number_hash
        )
    )
    return bool((await db.execute(stmt)).scalar())


async def card_versions(
    db: AsyncSession, programme_id: int, identity_id: int, other_than: int
) -> list[tuple[int, int]]:
    """(id, version) of the identity's cards but one: what their CVV tokens are made of."""
    stmt = select(ManagedCard.id, ManagedCard.version).where(
        ManagedCard.programme_id == programme_id,
        ManagedCard.identity_id == identity_id,
        ManagedCard.id != other_than,
    )
    return [(row[0], row[1]) for row in await db.execute(stmt)]


async def has_linked_cards(db: AsyncSession, programme_id: int, account_id: int) -> bool:
    """Whether the account is the parent of a debit card that is not destroyed."""
    stmt = select(
        exists().where(
            ManagedCard.programme_id == programme_id,
            ManagedCard.parent_account_id == account_id,
            ManagedCard.state != "DESTROYED",
        )
    )
    return bool((await db.execute(stmt)).scalar())


def statement_transactions(card: ManagedCard) -> Select[int] | None:
    """What the card's statement keeps of its account's entries (`StatementQuery.transactions`,
    D23, D30): for a debit card, the transactions it caused on its parent account (its
    `card_movements`); None for a prepaid card, whose statement is its own account's."""
    if card.parent_account_id is None:
        return None
    return select(CardMovement.transaction_id).where(
        CardMovement.card_id == card.id, CardMovement.account_id == card.parent_account_id
    )


@dataclass(frozen=True)
class Filters:
    profile_id: int | None = None
    friendly_name: str | None = None
    states: Sequence[str] = ()
    blocked_reasons: Sequence[str] = ()
    destroyed_reasons: Sequence[str] = ()
    currency: str | None = None
    type: str | None = None
    external_handle: str | None = None
    first_six: str | None = None
    last_four: str | None = None
    created_from: int | None = None
    created_to: int | None = None
    mode: str | None = None
    tag: str | None = None
    parent_account_id: int | None = None
    manufacturing_states: Sequence[str] = ()


def _state_clause(f: Filters) -> list[object]:
    """The reason filters apply only within their own state (cards.md §3.2): `state=BLOCKED&
    state=DESTROYED&state.blockedReason=LOST` lists every destroyed card and the lost ones."""
    c = ManagedCard
    if not f.states:
        return []
    alternatives = []
    for state in f.states:
        if state == "BLOCKED" and f.blocked_reasons:
            alternatives.append(
                and_(c.state == state, c.blocked_reason.in_(list(f.blocked_reasons)))
            )
        elif state == "DESTROYED" and f.destroyed_reasons:
            alternatives.append(
                and_(c.state == state, c.destroyed_reason.in_(list(f.destroyed_reasons)))
            )
        else:
            alternatives.append(c.state == state)
    return [or_(*alternatives)]


async def page(
    db: AsyncSession,
    programme_id: int,
    identity_id: int,
    f: Filters,
    offset: int,
    limit: int,
) -> tuple[int, list[Row]]:
    """Newest first (D30), with the number of every match."""
    c = ManagedCard
    conditions: list[object] = _state_clause(f)
    for column, value in (
        (c.profile_id, f.profile_id),
        (c.friendly_name, f.friendly_name),
        (c.currency, f.currency),
        (c.type, f.type),
        (c.external_handle, f.external_handle),
        (c.number_first_six, f.first_six),
        (c.number_last_four, f.last_four),
        (c.mode, f.mode),
        (c.tag, f.tag),
        (c.parent_account_id, f.parent_account_id),
    ):
        if value is not None:
            conditions.append(column == value)
    if f.created_from is not None:
        conditions.append(c.created_at >= f.created_from)
    if f.created_to is not None:
        conditions.append(c.created_at <= f.created_to)
    if f.manufacturing_states:
        conditions.append(c.manufacturing_state.in_(list(f.manufacturing_states)))
    stmt = of_owner(programme_id, identity_id).where(*conditions)  # type: ignore[arg-type]
    total = (await db.execute(select(func.count()).select_from(stmt.subquery()))).scalar_one()
    rows = (
        await db.execute(
            stmt.order_by(c.created_at.desc(), c.id.desc()).offset(offset).limit(limit)
        )
    ).all()
    return int(total), [(row[0], row[1]) for row in rows]
