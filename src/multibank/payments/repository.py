"""Every query on payments; each starts from the owner's own rows of one kind.

The owner's reads (`get`, `page`) through the 3.29.1 interface never see a payment in a state it
lacks (`HIDDEN_FROM_3_29`): an `INVALID` record only keeps a refused create's idempotency-ref
taken (decisions.md D12a), and the 3.63 line's states are its own (D35). The 3.63 line's reads
see every state (`hidden=()`). The simulator and the operator read every payment (`by_id`, the
portal)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.payments.models import HIDDEN_FROM_3_29, Payment

_GET_ANY = select(Payment).where(
    Payment.programme_id == bindparam("programme_id"),
    Payment.identity_id == bindparam("identity_id"),
    Payment.kind == bindparam("kind"),
    Payment.id == bindparam("payment_id"),
)
# Built once each: the 3.29.1 reads (the hot ones) and the 3.63 line's.
_GETS = {
    HIDDEN_FROM_3_29: _GET_ANY.where(Payment.state.not_in(HIDDEN_FROM_3_29)),
    (): _GET_ANY,
}
_GETS_FOR_UPDATE = {hidden: stmt.with_for_update() for hidden, stmt in _GETS.items()}


async def get(
    db: AsyncSession,
    programme_id: int,
    identity_id: int,
    kind: str,
    payment_id: int,
    lock: bool = False,
    hidden: tuple[str, ...] = HIDDEN_FROM_3_29,
) -> Payment | None:
    """With `lock`, the row is held until commit (PostgreSQL): a payment's steps run in turn.
    `hidden`: the states the caller's interface does not show (`HIDDEN_FROM_3_29` or ())."""
    params = {
        "programme_id": programme_id,
        "identity_id": identity_id,
        "kind": kind,
        "payment_id": payment_id,
    }
    stmt = (_GETS_FOR_UPDATE if lock else _GETS)[hidden]
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
    # The 3.63 line's: when it was executed (`executed_at`, D40).
    executed_from: int | None = None
    executed_to: int | None = None


async def page(
    db: AsyncSession,
    programme_id: int,
    identity_id: int,
    kind: str,
    filters: Filters,
    offset: int,
    limit: int,
    hidden: tuple[str, ...] = HIDDEN_FROM_3_29,
) -> tuple[int, list[Payment]]:
    """Newest first; `count` is the number matching the filters over all pages (both leave
    out the states `hidden` from the caller's interface)."""
    f = filters
    stmt = select(Payment).where(
        Payment.programme_id == programme_id,
        Payment.identity_id == identity_id,
        Payment.kind == kind,
    )
    if hidden:
        stmt = stmt.where(Payment.state.not_in(hidden))
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
    if f.executed_from is not None:
        stmt = stmt.where(Payment.executed_at >= f.executed_from)
    if f.executed_to is not None:
        stmt = stmt.where(Payment.executed_at <= f.executed_to)
    total = (await db.execute(select(func.count()).select_from(stmt.subquery()))).scalar_one()
    ordered = stmt.order_by(Payment.created_at.desc(), Payment.id.desc())
    rows = (await db.execute(ordered.offset(offset).limit(limit))).scalars().all()
    return int(total), list(rows)


# A wire transfer to a linked account that has not ended (D39's "pending actions").
_NOT_ENDED = ("PENDING_CHALLENGE", "PENDING_CONFIRMATION", "SCHEDULED", "SUBMITTED", "APPROVED")


async def open_to_linked_account(db: AsyncSession, programme_id: int, linked_id: int) -> bool:
    stmt = select(func.count()).where(
        Payment.programme_id == programme_id,
        Payment.linked_account_id == linked_id,
        Payment.state.in_(_NOT_ENDED),
    )
    return int((await db.execute(stmt)).scalar_one()) > 0
