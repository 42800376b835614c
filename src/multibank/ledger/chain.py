"""Each account's chain of postings, checked (`ledger verify`, decision 0043): in ledger order
(`seq`, the account's posting count its own update left), every posting's balances after are
the previous posting's plus its own amounts, the first one's are its own amounts, and no place
is missing. A closing posting names a pending posting of its own account that closes none.

Postings written before migration 0017 have no place (their holds were rewritten in place):
an account's chain is checked from its first posting written after it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from multibank.ledger.models import Posting


@dataclass(frozen=True)
class Break:
    """The first posting of an account whose balances after do not follow its chain."""

    account_id: int
    posting_id: int
    seq: int
    available_after: int
    actual_after: int
    # What the chain makes them: the previous posting's balances after plus its own amounts.
    expected_available: int
    expected_actual: int

    def describe(self) -> str:
        return (
            f"account {self.account_id}: posting {self.posting_id} (place {self.seq}) has"
            f" balances after {self.available_after}/{self.actual_after}, its chain makes them"
            f" {self.expected_available}/{self.expected_actual}"
        )


def _broken(programme_id: int | None) -> Select[Any]:
    by, order = Posting.account_id, Posting.seq
    placed = select(
        Posting.account_id,
        Posting.id,
        Posting.seq,
        Posting.available_amount,
        Posting.actual_amount,
        Posting.available_after,
        Posting.actual_after,
        func.lag(Posting.seq).over(partition_by=by, order_by=order).label("previous_seq"),
        func.lag(Posting.available_after)
        .over(partition_by=by, order_by=order)
        .label("previous_available"),
        func.lag(Posting.actual_after)
        .over(partition_by=by, order_by=order)
        .label("previous_actual"),
    ).where(Posting.seq.is_not(None))
    if programme_id is not None:
        placed = placed.where(Posting.programme_id == programme_id)
    p = placed.subquery("placed")
    # Before the first place, the balances are zero; before a later one, the previous place's
    # (none: written before migration 0017, not checked).
    expected_available = func.coalesce(p.c.previous_available, 0) + p.c.available_amount
    expected_actual = func.coalesce(p.c.previous_actual, 0) + p.c.actual_amount
    first = and_(p.c.previous_seq.is_(None), p.c.seq == 1)
    later = p.c.previous_seq.is_not(None)
    return (
        select(
            p.c.account_id,
            p.c.id,
            p.c.seq,
            p.c.available_after,
            p.c.actual_after,
            expected_available,
            expected_actual,
        )
        .where(
            or_(first, later),
            or_(
                p.c.available_after != expected_available,
                p.c.actual_after != expected_actual,
                and_(later, p.c.previous_seq != p.c.seq - 1),
            ),
        )
        .order_by(p.c.account_id, p.c.seq)
    )


async def breaks(db: AsyncSession, programme_id: int | None = None) -> list[Break]:
    """The first break of each account's chain, by account id."""
    out: dict[int, Break] = {}
    for row in (await db.execute(_broken(programme_id))).all():
        account_id = int(row[0])
        if account_id not in out:
            out[account_id] = Break(*(int(value) for value in row))
    return list(out.values())


async def stray_closings(db: AsyncSession, programme_id: int | None = None) -> list[int]:
    """Closing postings that name no pending posting of their own account (or a closing one)."""
    pending = aliased(Posting, name="pending")
    stmt = (
        select(Posting.id)
        .outerjoin(pending, pending.id == Posting.pending_id)
        .where(
            Posting.pending_id.is_not(None),
            or_(
                pending.id.is_(None),
                pending.account_id != Posting.account_id,
                pending.pending_id.is_not(None),
            ),
        )
        .order_by(Posting.id)
    )
    if programme_id is not None:
        stmt = stmt.where(Posting.programme_id == programme_id)
    return [int(posting_id) for posting_id in (await db.execute(stmt)).scalars()]
