"""Statement entries of one account, read from its postings (D5): one entry per posting that closes
no hold, joined to its transaction for the type, state and details. A hold's entry carries the
amounts of the posting that posted or voided it (decision 0043), so a payment keeps one entry
whose adjustments are its current ones (D12).

Filters and paging, all done by the database on `ix_postings_entries
(account_id, created_at, id) WHERE pending_id IS NULL`:

- `from_ms` / `to_ms` are **inclusive** bounds on the posting time (`created_at`, epoch ms, the
  programme's clock when the transaction was written): `from_ms <= created_at <= to_ms`.
  A range with `from_ms > to_ms` matches nothing.
- `fund_movements_only` keeps the entries whose amounts (with their closing's) are not zero,
  leaving out the zero-amount account events (create, block, unblock, remove) and released holds.
- Order is by `(created_at, id)`, newest first unless `ascending`; entries written at the same
  millisecond are ordered by posting id in the same direction, so pages never overlap or skip.
- The page is found first on the index alone (a deferred join: only the page's ids are selected
  with OFFSET/LIMIT), then just those rows are read with their transactions, so a deep offset
  costs an index walk rather than a row read per skipped entry.
- `count` is the number of entries matching the filters (all pages); it is taken from the page
  itself when the page proves it (a short page), otherwise by a COUNT on the same index range.

Balances after (issue 33): read in the statement's order, each entry's balances after are the
previous entry's plus its own adjustments, and the newest entry's are the account's balances.
An account's balance is the sum of its entries' adjustments, so an entry's balances after are
the account's balances minus the adjustments of the entries newer than it (newest first), or
the sum of the adjustments of the entries up to it (oldest first). Either sum runs from the end
of the statement the page is counted from, as OFFSET does: on the first page (no bound on that
side) it is over the page alone, whatever the account's length. The page, the balances and
that sum are read in one statement, one snapshot.

Cards (D23, D30): a prepaid card's statement is its own ledger account's (the card's id), money
movements only. A debit card holds no money: its statement is the entries of its parent
account whose transaction the card caused (a `card_movements` row, which the card slice selects:
`StatementQuery.transactions`), without balances after. A
card payment step (authorisation, settlement, reversal, expiry, refund) shows the merchant
fields of its transaction's details, on the card's statement and on a debit card's parent's
(there with `relatedCardId`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    exists,
    func,
    literal,
    or_,
    select,
    true,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from multibank.ledger.models import LedgerAccount, LedgerTransaction, Posting

MAX_PAGE = 100

# The posting that posted or voided an entry's hold, if any.
Closing = aliased(Posting, name="closing")
NET_AVAILABLE = Posting.available_amount + func.coalesce(Closing.available_amount, 0)
NET_ACTUAL = Posting.actual_amount + func.coalesce(Closing.actual_amount, 0)


@dataclass(frozen=True)
class StatementQuery:
    account_id: int
    from_ms: int | None = None
    to_ms: int | None = None
    fund_movements_only: bool = False
    ascending: bool = False
    offset: int = 0
    limit: int = MAX_PAGE
    # The card whose statement this is: a prepaid card's is its own account's (`account_id` is
    # the card's id), a debit card's its parent's, with `transactions`.
    card_id: int | None = None
    # Only the entries of these transactions (a select of their ids), and no balances after: a
    # debit card's statement, the transactions the card caused on its parent account
    # (`cards.repository.statement_query`). The ledger knows no card.
    transactions: Select[int] | None = field(default=None, compare=False)

    @property
    def by_card(self) -> bool:
        """Only the card's own transactions on its parent account (a debit card)."""
        return self.transactions is not None

    @property
    def page_size(self) -> int:
        """Limits above 100 are capped at 100, as on every list of the interface."""
        return max(1, min(self.limit, MAX_PAGE))


@dataclass(frozen=True)
class Entry:
    """One entry of the account: a posting with its transaction, and the closing of its hold
    folded in."""

    posting_id: int
    transaction_id: int
    type: str  # TransactionId.type: DEPOSIT, CHARGE_FEE, INSTRUMENT_CREATE, ...
    state: str  # the transaction's state
    currency: str
    available_amount: int  # signed: credits positive, debits negative; with the closing's
    actual_amount: int
    available_after: int
    actual_after: int
    timestamp: int  # epoch ms
    details: dict[str, Any] = field(default_factory=dict)
    # What the account paid on top of the movement (a payment's fee), included in the amounts;
    # zero once the entry moves nothing (a released hold paid no fee).
    fee: int = 0
    # The amount the entry names when it is not the posting's (a wire transfer shows the amount
    # sent, its fee apart; a card step the merchant amount); only while the entry moves money.
    shown_amount: int | None = None
    # False on a debit card's statement: the card holds no balance to show after an entry.
    has_balances: bool = True

    @property
    def amount(self) -> int:
        """The movement the entry stands for: the actual amount, or the available one for a
        movement that has not reached the actual balance yet."""
        return self.actual_amount or self.available_amount

    @property
    def transaction_amount(self) -> int:
        moved = self.amount
        return self.shown_amount if moved and self.shown_amount is not None else moved

    @property
    def entry_state(self) -> str:
        """`PENDING` while its amount is held, else `COMPLETED` (D12): what the interface's
        `entryState` and the portal say."""
        return "PENDING" if self.state == "PENDING" else "COMPLETED"


@dataclass(frozen=True)
class StatementPage:
    entries: list[Entry]
    count: int


def _voided() -> ColumnElement[bool]:
    """The entry's hold was voided: its closing undoes its amounts."""
    voiding = aliased(Posting, name="voiding")
    return exists(
        select(voiding.id).where(
            voiding.pending_id == Posting.id,
            Posting.available_amount + voiding.available_amount == 0,
            Posting.actual_amount + voiding.actual_amount == 0,
        )
    )


def _conditions(q: StatementQuery) -> list[ColumnElement[bool]]:
    out: list[ColumnElement[bool]] = [
        Posting.account_id == q.account_id,
        Posting.pending_id.is_(None),
    ]
    if q.from_ms is not None:
        out.append(Posting.created_at >= q.from_ms)
    if q.to_ms is not None:
        out.append(Posting.created_at <= q.to_ms)
    if q.fund_movements_only:
        out.append(or_(Posting.available_amount != 0, Posting.actual_amount != 0))
        out.append(~_voided())
    if q.transactions is not None:
        out.append(Posting.transaction_id.in_(q.transactions))
    return out


def _order(q: StatementQuery) -> tuple[Any, Any]:
    if q.ascending:
        return Posting.created_at.asc(), Posting.id.asc()
    return Posting.created_at.desc(), Posting.id.desc()


def page_ids(q: StatementQuery) -> Select[Any]:
    """The ids of the page's postings, in statement order, from the index."""
    return (
        select(Posting.id)
        .where(*_conditions(q))
        .order_by(*_order(q))
        .offset(q.offset)
        .limit(q.page_size)
    )


def _beyond(q: StatementQuery) -> Select[Any] | None:
    """The sums of the adjustments of the entries before the page in the statement's order
    (newer ones, newest first; older ones, oldest first), as one row; None when there is
    none but entries that move nothing (no offset, no bound on that side)."""
    parts: list[Select[int, int]] = []
    if q.by_card:  # no balances after on a debit card's statement
        return None
    bound = q.from_ms if q.ascending else q.to_ms
    if bound is not None:  # the entries outside the time range on the page's side
        outside = Posting.created_at < bound if q.ascending else Posting.created_at > bound
        parts.append(
            select(NET_AVAILABLE.label("a"), NET_ACTUAL.label("b"))
            .outerjoin(Closing, Closing.pending_id == Posting.id)
            .where(Posting.account_id == q.account_id, Posting.pending_id.is_(None), outside)
        )
    if q.offset:  # the entries of the pages before this one
        skipped = page_ids(q).offset(None).limit(q.offset).subquery("skipped")
        parts.append(
            select(NET_AVAILABLE.label("a"), NET_ACTUAL.label("b"))
            .join(skipped, skipped.c.id == Posting.id)
            .outerjoin(Closing, Closing.pending_id == Posting.id)
        )
    if not parts:
        return None
    combined = parts[0] if len(parts) == 1 else union_all(*parts)
    rows = combined.subquery("beyond_rows")
    return select(
        func.coalesce(func.sum(rows.c.a), 0).label("available"),
        func.coalesce(func.sum(rows.c.b), 0).label("actual"),
    )


async def statement(db: AsyncSession, q: StatementQuery) -> StatementPage:
    ids = page_ids(q).subquery("page")
    beyond_query = _beyond(q)
    beyond = (
        select(literal(0).label("available"), literal(0).label("actual"))
        if beyond_query is None
        else beyond_query
    ).subquery("beyond")
    stmt = (
        select(
            Posting.id,
            Posting.transaction_id,
            LedgerTransaction.type,
            LedgerTransaction.state,
            Posting.currency,
            NET_AVAILABLE,
            NET_ACTUAL,
            Posting.created_at,
            LedgerTransaction.details,
            Posting.account_id,
            LedgerAccount.available,
            LedgerAccount.actual,
            beyond.c.available,
            beyond.c.actual,
        )
        .join(ids, ids.c.id == Posting.id)
        .join(LedgerTransaction, LedgerTransaction.id == Posting.transaction_id)
        .join(LedgerAccount, LedgerAccount.id == Posting.account_id)
        .outerjoin(Closing, Closing.pending_id == Posting.id)
        .join(beyond, true())
        .order_by(*_order(q))
    )
    rows = (await db.execute(stmt)).all()
    entries = []
    available = actual = 0
    for i, r in enumerate(rows):
        moved_available, moved_actual = int(r[5]), int(r[6])
        if q.ascending:
            if i == 0:
                available, actual = int(r[12]), int(r[13])
            available, actual = available + moved_available, actual + moved_actual
        elif i == 0:
            available, actual = int(r[10]) - int(r[12]), int(r[11]) - int(r[13])
        details, fee, shown = entry_details(
            str(r[2]), str(r[3]), dict(r[8] or {}), int(r[9]), q.card_id
        )
        entries.append(
            Entry(
                posting_id=int(r[0]),
                transaction_id=int(r[1]),
                type=str(r[2]),
                state=str(r[3]),
                currency=str(r[4]),
                available_amount=moved_available,
                actual_amount=moved_actual,
                available_after=available,
                actual_after=actual,
                timestamp=int(r[7]),
                details=details,
                fee=fee if moved_available or moved_actual else 0,
                shown_amount=shown,
                has_balances=not q.by_card,
            )
        )
        if not q.ascending:  # the next entry is older: before this one's adjustments
            available, actual = available - moved_available, actual - moved_actual
    return StatementPage(entries, await _count(db, q, len(entries)))


# The card payment steps (D23): one ledger transaction each, named by the card's
# `card_movements` row; their details are the merchant's (cards.md §5.3).
CARD_STEPS = frozenset(
    {
        "AUTHORISATION",
        "SETTLEMENT",
        "AUTHORISATION_REVERSAL",
        "AUTHORISATION_EXPIRY",
        "MERCHANT_REFUND",
    }
)
# The details of a card step that its statement entry shows as they are.
CARD_FIELDS = (
    "merchantName",
    "merchantCategoryCode",
    "merchantId",
    "merchantTerminalCountry",
    "merchantTransactionType",
    "authorisationCode",
    "authorisationRelatedId",
    "settlementRelatedId",
    "forexPaddingCurrency",
    "forexPaddingAmount",
)
# An authorisation transaction's state → `additionalFields.authorisationState` (D23).
AUTHORISATION_STATES = {
    "PENDING": "PENDING_SETTLEMENT",
    "COMPLETED": "COMPLETED",
    "REVERSED": "REVERSED",
    "EXPIRED": "EXPIRED",
}


def entry_details(
    type_: str, state: str, details: dict[str, Any], account_id: int, card_id: int | None
) -> tuple[dict[str, Any], int, int | None]:
    """The entry's `additionalFields`, fee and shown amount as the statement's instrument sees
    them (`card_id`: the card whose statement it is, if any)."""
    if type_ in CARD_STEPS:
        return card_step_details(type_, state, details, account_id, card_id)
    return account_details(details, account_id)


def card_step_details(
    type_: str, state: str, details: dict[str, Any], account_id: int, card_id: int | None
) -> tuple[dict[str, Any], int, int | None]:
    """A card step's merchant fields; the amount it names is the merchant's
    (`transactionAmount`, signed from the cardholder's side) and its fee the step's
    `cardholderFee`. An authorisation says how it ended; on a debit card's parent account's
    own statement the step names its card (`relatedCardId`)."""
    fields: dict[str, Any] = {
        k: details[k] for k in CARD_FIELDS if details.get(k) is not None and details[k] != ""
    }
    amount = details.get("transactionAmount")
    shown = int(amount["amount"]) if isinstance(amount, dict) and "amount" in amount else None
    if type_ == "AUTHORISATION":
        fields["authorisationState"] = AUTHORISATION_STATES.get(state, state)
        if isinstance(amount, dict) and "forexPaddingCurrency" not in fields:
            # No currency conversion happens in the sandbox: no padding (cards.md §5.3).
            fields["forexPaddingCurrency"] = amount.get("currency")
            fields["forexPaddingAmount"] = "0"
    spender = details.get("cardId")
    if card_id is None and spender is not None and str(spender) != str(account_id):
        fields["relatedCardId"] = str(spender)
    return fields, int(details.get("cardholderFee") or 0), shown


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
    if q.from_ms is None and q.to_ms is None and not q.by_card:
        # Without time bounds the answer is a counter the ledger keeps on the account row.
        column = (
            LedgerAccount.movement_count
            if q.fund_movements_only
            else LedgerAccount.posting_count - LedgerAccount.closing_count
        )
        counted = select(column).where(LedgerAccount.id == q.account_id)
        return int((await db.execute(counted)).scalar_one())
    stmt = select(func.count()).select_from(Posting).where(*_conditions(q))
    return int((await db.execute(stmt)).scalar_one())
