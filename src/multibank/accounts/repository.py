"""Every query on managed accounts; each starts from the owner's own rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Protocol, cast

from sqlalchemy import BigInteger, Select, bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.accounts.models import ManagedAccount
from multibank.kernel.db import dialect_name
from multibank.ledger.models import LedgerAccount

Row = tuple[ManagedAccount, LedgerAccount]


def of_owner(programme_id: int, identity_id: int) -> Select[ManagedAccount, LedgerAccount]:
    return (
        select(ManagedAccount, LedgerAccount)
        .join(LedgerAccount, LedgerAccount.id == ManagedAccount.id)
        .where(
            ManagedAccount.programme_id == programme_id, ManagedAccount.identity_id == identity_id
        )
    )


# Statements of the hot reads are built once, with bound parameters: building one per request
# (coercing each comparison) cost a read about as much as executing it (decision 0014).
_OWNED = (
    select(ManagedAccount, LedgerAccount)
    .join(LedgerAccount, LedgerAccount.id == ManagedAccount.id)
    .where(
        ManagedAccount.programme_id == bindparam("programme_id"),
        ManagedAccount.identity_id == bindparam("identity_id"),
    )
)
_GET = _OWNED.where(ManagedAccount.id == bindparam("account_id")).execution_options(
    populate_existing=True
)


async def get(db: AsyncSession, programme_id: int, identity_id: int, account_id: int) -> Row | None:
    params = {"programme_id": programme_id, "identity_id": identity_id, "account_id": account_id}
    row = (await db.execute(_GET, params)).one_or_none()
    return None if row is None else (row[0], row[1])


_IN_PROGRAMME = select(ManagedAccount).where(
    ManagedAccount.programme_id == bindparam("programme_id"),
    ManagedAccount.id == bindparam("account_id"),
)
_IN_PROGRAMME_FOR_UPDATE = _IN_PROGRAMME.with_for_update()


async def get_in_programme(
    db: AsyncSession, programme_id: int, account_id: int, for_update: bool = False
) -> ManagedAccount | None:
    stmt = _IN_PROGRAMME_FOR_UPDATE if for_update else _IN_PROGRAMME
    params = {"programme_id": programme_id, "account_id": account_id}
    return (await db.execute(stmt, params)).scalar_one_or_none()


async def by_iban(db: AsyncSession, programme_id: int, iban: str) -> ManagedAccount | None:
    stmt = select(ManagedAccount).where(
        ManagedAccount.programme_id == programme_id, ManagedAccount.iban == iban
    )
    return (await db.execute(stmt)).scalar_one_or_none()


@dataclass(frozen=True)
class Filters:
    profile_id: int | None = None
    friendly_name: str | None = None
    states: Sequence[str] = ()
    blocked_reasons: Sequence[str] = ()
    destroyed_reasons: Sequence[str] = ()
    currency: str | None = None
    created_from: int | None = None
    created_to: int | None = None
    tag: str | None = None

    def empty(self) -> bool:
        """No filter set: the page is the statement built once (`_VIEW_PAGE_BY_DIALECT`). The
        fields are compared as one tuple with the defaults' first (a page asks on every
        request); a sequence given as an empty list counts as none too."""
        values = _FIELD_VALUES(self)
        return values == _NO_FILTERS or all(
            value is None or (isinstance(value, (list, tuple)) and not value) for value in values
        )


_FIELD_VALUES = attrgetter(*Filters.__dataclass_fields__)
_NO_FILTERS = _FIELD_VALUES(Filters())


class AccountView(Protocol):
    """What an answer about an account reads: its own columns and its two balances."""

    @property
    def id(self) -> int: ...
    @property
    def profile_id(self) -> int: ...
    @property
    def tag(self) -> str | None: ...
    @property
    def friendly_name(self) -> str: ...
    @property
    def currency(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def blocked_reason(self) -> str | None: ...
    @property
    def destroyed_reason(self) -> str | None: ...
    @property
    def iban_state(self) -> str: ...
    @property
    def iban_requested_at(self) -> int | None: ...
    @property
    def created_at(self) -> int: ...
    @property
    def available(self) -> int: ...
    @property
    def actual(self) -> int: ...


# Reads answer from plain rows of the account's columns and balances: no ORM instances, no
# identity map (decision 0019). The statements are built once, with bound parameters.
_ACCOUNTS = ManagedAccount.__table__
_BALANCES = LedgerAccount.__table__
# The columns `AccountView` names, no more: a page fetches ten rows of them.
_VIEW = (
    select(
        *(
            _ACCOUNTS.c[name]
            for name in (
                "id",
                "profile_id",
                "tag",
                "friendly_name",
                "currency",
                "state",
                "blocked_reason",
                "destroyed_reason",
                "iban_state",
                "iban_requested_at",
                "created_at",
            )
        ),
        _BALANCES.c.available,
        _BALANCES.c.actual,
    )
    .join_from(_ACCOUNTS, _BALANCES, _BALANCES.c.id == _ACCOUNTS.c.id)
    .where(
        _ACCOUNTS.c.programme_id == bindparam("programme_id"),
        _ACCOUNTS.c.identity_id == bindparam("identity_id"),
    )
)
_VIEW_GET = _VIEW.where(_ACCOUNTS.c.id == bindparam("account_id"))
# A page carries the number of rows of the whole selection in each of its rows (a window count is
# taken before LIMIT and OFFSET): the page and its `count` in one statement.
_TOTAL = func.count().over().label("total")
_VIEW_PAGE = (
    _VIEW.add_columns(_TOTAL)
    .order_by(_ACCOUNTS.c.id)
    .offset(bindparam("offset"))
    .limit(bindparam("limit"))
)
_VIEW_COUNT = select(func.count()).select_from(_VIEW.subquery())
# On PostgreSQL the page's rows are chosen by their row number, not by LIMIT and OFFSET. With
# LIMIT $n OFFSET $m the planner costs its generic plan as if the offset skipped part of the
# rows and the limit read more: on tables never analysed (a sandbox, a small database) it never
# adopted it, and each execution planned the statement again, half of what a page cost the
# database (decision 0035). Numbered rows have one plan
# for every page, and the number is taken in the ordered scan the window count needs anyway.
_NUMBERED = _VIEW.add_columns(
    _TOTAL, func.row_number().over(order_by=_ACCOUNTS.c.id).label("n")
).subquery("numbered")
_VIEW_PAGE_NUMBERED = (
    select(*(column for column in _NUMBERED.c if column.key != "n"))
    .where(
        _NUMBERED.c.n > bindparam("offset", type_=BigInteger),
        _NUMBERED.c.n <= bindparam("end", type_=BigInteger),
    )
    .order_by(_NUMBERED.c.n)
)
# The unfiltered page, per dialect (decision 0035: numbered rows keep one plan on PostgreSQL).
_VIEW_PAGE_BY_DIALECT = {"postgresql": _VIEW_PAGE_NUMBERED, "sqlite": _VIEW_PAGE}


async def view(
    db: AsyncSession, programme_id: int, identity_id: int, account_id: int
) -> AccountView | None:
    params = {"programme_id": programme_id, "identity_id": identity_id, "account_id": account_id}
    row = (await db.execute(_VIEW_GET, params)).first()
    return cast(AccountView, row)


async def page(
    db: AsyncSession,
    programme_id: int,
    identity_id: int,
    filters: Filters,
    offset: int,
    limit: int,
) -> tuple[int, list[AccountView]]:
    f = filters
    owner = {"programme_id": programme_id, "identity_id": identity_id}
    rows: Sequence[Any]
    if f.empty():
        params = {**owner, "offset": offset, "limit": limit, "end": offset + limit}
        rows = (await db.execute(_VIEW_PAGE_BY_DIALECT[dialect_name(db)], params)).all()
        count = _VIEW_COUNT
    else:
        c = _ACCOUNTS.c
        stmt = _VIEW
        if f.profile_id is not None:
            stmt = stmt.where(c.profile_id == f.profile_id)
        if f.friendly_name is not None:
            stmt = stmt.where(c.friendly_name == f.friendly_name)
        if f.states:
            stmt = stmt.where(c.state.in_(list(f.states)))
        if f.blocked_reasons:
            stmt = stmt.where(c.blocked_reason.in_(list(f.blocked_reasons)))
        if f.destroyed_reasons:
            stmt = stmt.where(c.destroyed_reason.in_(list(f.destroyed_reasons)))
        if f.currency is not None:
            stmt = stmt.where(c.currency == f.currency)
        if f.created_from is not None:
            stmt = stmt.where(c.created_at >= f.created_from)
        if f.created_to is not None:
            stmt = stmt.where(c.created_at <= f.created_to)
        if f.tag is not None:
            stmt = stmt.where(c.tag == f.tag)
        page_stmt = stmt.add_columns(_TOTAL).order_by(c.id).offset(offset).limit(limit)
        rows = (await db.execute(page_stmt, owner)).all()
        count = select(func.count()).select_from(stmt.subquery())
    if rows:
        return int(rows[0].total), [cast(AccountView, r) for r in rows]
    if offset == 0:
        return 0, []
    # Past the last row: the page is empty and carries no count; ask for it.
    return int((await db.execute(count, owner)).scalar_one()), []
