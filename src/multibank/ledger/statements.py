"""Statement entries of one account, read from its postings (D5): one entry per posting, joined to
its transaction for the type, state and details.

Filters and paging, all done by the database on `ix_postings_account_time
(account_id, created_at, id)`:

- `from_ms` / `to_ms` are **inclusive** bounds on the posting time (`created_at`, epoch ms, the
  programme's clock when the transaction was written): `from_ms <= created_at <= to_ms`.
  A range with `from_ms > to_ms` matches nothing.
- `fund_movements_only` keeps postings with a non-zero available or actual amount, leaving out
  the zero-amount account events (create, block, unblock, remove).
- Order is by `(created_at, id)`, newest first unless `ascending`; entries written at the same
  millisecond are ordered by posting id in the same direction, so pages never overlap or skip.
- The page is found first on the index alone (a deferred join: only the page's ids are selected
  with OFFSET/LIMIT), then just those rows are read with their transactions, so a deep offset
  costs an index walk rather than a row read per skipped entry.
- `count` is the number of entries matching the filters (all pages); it is taken from the page
  itself when the page proves it (a short page), otherwise by a COUNT on the same index range.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Select, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.ledger.models import LedgerAccount, LedgerTransaction, Posting

MAX_PAGE = 100


@dataclass(frozen=True)
class StatementQuery:
    account_id: int
    from_ms: int | None = None
    to_ms: int | None = None
    fund_movements_only: bool = False
    ascending: bool = False
    offset: int = 0
    limit: int = MAX_PAGE

    @property
    def page_size(self) -> int:
        """Limits above 100 are capped at 100, as on every list of the interface."""
        return max(1, min(self.limit, MAX_PAGE))


@dataclass(frozen=True)
class Entry:
    """One posting on the account, with its transaction."""

    posting_id: int
    transaction_id: int
    type: str  # TransactionId.type: DEPOSIT, CHARGE_FEE, INSTRUMENT_CREATE, ...
    state: str  # the transaction's state
    currency: str
    available_amount: int  # signed: credits positive, debits negative
    actual_amount: int
    available_after: int
    actual_after: int
    timestamp: int  # epoch ms
    details: dict[str, Any] = field(default_factory=dict)
    # What the account paid on top of the movement (a payment's fee), included in the amounts.
    fee: int = 0
    # The amount the entry names when it is not the posting's (a wire transfer shows the amount
    # sent, its fee apart); only while the posting moves money.
    shown_amount: int | None = None

    @property
    def amount(self) -> int:
        """The movement the entry stands for: the actual amount, or the available one for a
        movement that has not reached the actual balance yet."""
        return self.actual_amount or self.available_amount

    @property
    def transaction_amount(self) -> int:
        moved = self.amount
        return self.shown_amount if moved and self.shown_amount is not None else moved


@dataclass(frozen=True)
class StatementPage:
    entries: list[Entry]
    count: int


def _conditions(q: StatementQuery) -> list[ColumnElement[bool]]:
    out: list[ColumnElement[bool]] = [Posting.account_id == q.account_id]
    if q.from_ms is not None:
        out.append(Posting.created_at >= q.from_ms)
    if q.to_ms is not None:
        out.append(Posting.created_at <= q.to_ms)
    if q.fund_movements_only:
        out.append(or_(Posting.available_amount != 0, Posting.actual_amount != 0))
    return out


def page_ids(q: StatementQuery) -> Select[int]:
    """The ids of the page's postings, in statement order, from the index."""
    order = (
        (Posting.created_at.asc(), Posting.id.asc())
        if q.ascending
        else (Posting.created_at.desc(), Posting.id.desc())
    )
    return (
        select(Posting.id)
        .where(*_conditions(q))
        .order_by(*order)
        .offset(q.offset)
        .limit(q.page_size)
    )


async def statement(db: AsyncSession, q: StatementQuery) -> StatementPage:
    ids = page_ids(q).subquery("page")
    order = (
        (Posting.created_at.asc(), Posting.id.asc())
        if q.ascending
        else (Posting.created_at.desc(), Posting.id.desc())
    )
    stmt = (
        select(
            Posting.id,
            Posting.transaction_id,
            LedgerTransaction.type,
            LedgerTransaction.state,
            Posting.currency,
            Posting.available_amount,
            Posting.actual_amount,
            Posting.available_after,
            Posting.actual_after,
            Posting.created_at,
            LedgerTransaction.details,
            Posting.account_id,
        )
        .join(ids, ids.c.id == Posting.id)
        .join(LedgerTransaction, LedgerTransaction.id == Posting.transaction_id)
        .order_by(*order)
    )
    entries = []
    for r in (await db.execute(stmt)).all():
        details, fee, shown = account_details(dict(r[10] or {}), int(r[11]))
        entries.append(
            Entry(
                posting_id=int(r[0]),
                transaction_id=int(r[1]),
                type=str(r[2]),
                state=str(r[3]),
                currency=str(r[4]),
                available_amount=int(r[5]),
                actual_amount=int(r[6]),
                available_after=int(r[7]),
                actual_after=int(r[8]),
                timestamp=int(r[9]),
                details=details,
                fee=fee,
                shown_amount=shown,
            )
        )
    return StatementPage(entries, await _count(db, q, len(entries)))


def account_details(
    details: dict[str, Any], account_id: int
) -> tuple[dict[str, Any], int, int | None]:
    """A transaction's details as one of its accounts sees them, with that account's fee.

    A payment's transaction keeps each side's own details under `byAccount` (the source sees
    the destination, and pays the fee; the destination sees the source); other transactions
    show the same details on every account."""
    by_account = details.get("byAccount")
    if not isinstance(by_account, dict):
        return details, 0, None
    own = by_account.get(str(account_id)) or {}
    shown = own.get("transactionAmount")
    fields = dict(own.get("fields") or {})
    if not _RENAMED.isdisjoint(fields):
        fields = _renamed(fields)
    return fields, int(own.get("fee") or 0), None if shown is None else int(shown)


# A wire transfer's fields as they were written before they took the interface's names
# (contract.md, StatementEntry; issue 32): older ledger rows still hold them, and are shown
# under the names newer rows are written with. `type` (the scheme) has no name there. Only a
# payment's own fields (`byAccount`) are renamed: a deposit's `reference` is another field.
_LEGACY_NAMES = {
    "beneficiaryIban": "beneficiaryAccount",
    "beneficiaryAccountNumber": "beneficiaryAccount",
    "beneficiaryBankIdentifierCode": "beneficiaryBankCode",
    "beneficiarySortCode": "beneficiaryBankCode",
    "reference": "description",
    "type": None,
    "returnedTransferId": "relatedTransactionId",  # a return's entry names the wire transfer
}
_RENAMED = frozenset(_LEGACY_NAMES)


def _renamed(fields: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in fields.items():
        name = _LEGACY_NAMES.get(key, key)
        if name is not None:
            out[name] = value
    if "returnedTransferId" in fields:
        out["relatedTransactionIdType"] = "OUTGOING_WIRE_TRANSFER"
    return out


async def _count(db: AsyncSession, q: StatementQuery, on_page: int) -> int:
    if on_page and on_page < q.page_size:  # a short page is the last one
        return q.offset + on_page
    if not on_page and q.offset == 0:
        return 0
    if q.from_ms is None and q.to_ms is None:
        # Without time bounds the answer is a counter the ledger keeps on the account row.
        column = (
            LedgerAccount.movement_count if q.fund_movements_only else LedgerAccount.posting_count
        )
        counted = select(column).where(LedgerAccount.id == q.account_id)
        return int((await db.execute(counted)).scalar_one())
    stmt = select(func.count()).select_from(Posting).where(*_conditions(q))
    return int((await db.execute(stmt)).scalar_one())
