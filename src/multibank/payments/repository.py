"""Every query on payments; each starts from the owner's own rows of one kind.

The owner's reads (`get`, `page`) never see an `INVALID` payment: such a record only keeps a
refused create's idempotency-ref taken, and `INVALID` is no state of the 3.29.1 interface
(decisions.md D12a). The simulator and the operator read every payment (`by_id`, the portal)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.payments.models import INVALID, Payment

# What the owner sees of its payments (D12a).
VISIBLE = Payment.state != INVALID

_GET = select(Payment).where(
    Payment.programme_id == bindparam("programme_id"),
    Payment.identity_id == bindparam("identity_id"),
    Payment.kind == bindparam("kind"),
    Payment.id == bindparam("payment_id"),
    VISIBLE,
)
_GET_FOR_UPDATE = _GET.with_for_update()


async def get(
    db: AsyncSession,
    programme_id: int,
    identity_id: int,
    kind: str,
    payment_id: int,
    lock: bool = False,
) -> Payment | None:
    """With `lock`, the row is held until commit (PostgreSQL): a payment's steps run in turn."""
    params = {
        "programme_id": programme_id,
        "identity_id": identity_id,
        "kind": kind,
        "payment_id": payment_id,
    }
    stmt = _GET_FOR_UPDATE if lock else _GET
    return (await db.execute(stmt, params)).scalar_one_or_none()


_BY_ID = select(Payment).where(
    Payment.programme_id == bindparam("programme_id"), Payment.id == bindparam("payment_id")
)


async def by_id(
    db: AsyncSession, programme_id: int, payment_id: int, lock: bool = False
) -> Payment | None:
    """Any payment of the programme (the simulator and the background steps act on them)."""
    stmt = _BY_ID.with_for_update() if lock else _BY_ID
    params = {"programme_id": programme_id, "payment_id": payment_id}
    return (await db.execute(stmt, params)).scalar_one_or_none()


@dataclass(frozen=True)
class Filters:
    profile_id: int | None = None
    # (type, id): payments from or to this instrument; (type, None): from or to one of that
    # type.
    instrument: tuple[str, int | None] | None = None
    # (type, id or None): payments from this instrument (or one of that type).
    source: tuple[str, int | None] | None = None
    states: Sequence[str] = ()
    created_from: int | None = None
    created_to: int | None = None
    tag: str | None = None


async def page(
    db: AsyncSession,
    programme_id: int,
    identity_id: int,
    kind: str,
    filters: Filters,
    offset: int,
    limit: int,
) -> tuple[int, list[Payment]]:
    """Newest first; `count` is the number matching the filters over all pages (both leave
    out what the owner does not see)."""
    f = filters
    stmt = select(Payment).where(
        Payment.programme_id == programme_id,
        Payment.identity_id == identity_id,
        Payment.kind == kind,
        VISIBLE,
    )
    if f.profile_id is not None:
        stmt = stmt.where(Payment.profile_id == f.profile_id)
    if f.instrument is not None:
        kind_, id_ = f.instrument
        if id_ is None:
            stmt = stmt.where(or_(Payment.source_type == kind_, Payment.destination_type == kind_))
        else:
            stmt = stmt.where(
                or_(
                    (Payment.source_type == kind_) & (Payment.source_id == id_),
                    (Payment.destination_type == kind_) & (Payment.destination_id == id_),
                )
            )
    if f.source is not None:
        stmt = stmt.where(Payment.source_type == f.source[0])
        if f.source[1] is not None:
            stmt = stmt.where(Payment.source_id == f.source[1])
    if f.states:
        stmt = stmt.where(Payment.state.in_(list(f.states)))
    if f.created_from is not None:
        stmt = stmt.where(Payment.created_at >= f.created_from)
    if f.created_to is not None:
        stmt = stmt.where(Payment.created_at <= f.created_to)
    if f.tag is not None:
        stmt = stmt.where(Payment.tag == f.tag)
    total = (await db.execute(select(func.count()).select_from(stmt.subquery()))).scalar_one()
    ordered = stmt.order_by(Payment.created_at.desc(), Payment.id.desc())
    rows = (await db.execute(ordered.offset(offset).limit(limit))).scalars().all()
    return int(total), list(rows)
