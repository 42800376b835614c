"""A payment as the operator portal shows it (issue 35, decision 0056): its parties by name, its
state history, its ledger postings and the webhook events it caused, read from what the payments,
ledger and webhook tables already record (no table of its own).

The parties are read in the same query as the payments (`with_parties`): the source and
destination instruments (account or card) with their friendly names, and their owners' names
(the company's name, or the root user's name and surname), so a page of 50 payments is one query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from multibank.accounts.models import ManagedAccount
from multibank.cards.models import CardMovement, ManagedCard
from multibank.identities.models import Identity
from multibank.ledger import statements
from multibank.ledger.models import LedgerAccount, LedgerTransaction, Posting
from multibank.payments.models import OWT, RETURNED, SEND, TRANSFER, Payment
from multibank.users.models import ROOT, User
from multibank.webhooks.models import WebhookEvent

CARDS = "managed_cards"
# The webhook resource each kind's events name (payments/events.py `payment`).
RESOURCE = {TRANSFER: "transfers", SEND: "send", OWT: "outgoing_wire_transfers"}
KIND_NAMES = {TRANSFER: "Transfer", SEND: "Send", OWT: "Outgoing wire transfer"}
SYSTEM_NAMES = {"REVENUE": "Revenue", "SETTLEMENT": "Settlement", "RESERVED": "Reserved"}


@dataclass(frozen=True)
class Party:
    """A payment's source or destination instrument and its owner, with their portal pages."""

    id: int
    name: str
    url: str
    owner_id: int | None
    owner_name: str
    owner_url: str | None


def owner_name(identity: Any, root: Any) -> ColumnElement[str]:
    # The name the customers page shows: the company's, or the root user's "name surname".
    person: ColumnElement[str] = root.name + " " + root.surname
    return func.coalesce(identity.company["name"].as_string(), person)


def with_parties(
    *conditions: ColumnElement[bool],
) -> Select[Payment, str, int, str, str, int, str]:
    """Payments (with `conditions`) with their parties' names, in one query."""
    src_acc, dst_acc = aliased(ManagedAccount), aliased(ManagedAccount)
    src_card, dst_card = aliased(ManagedCard), aliased(ManagedCard)
    src_who, dst_who = aliased(Identity), aliased(Identity)
    src_root, dst_root = aliased(User), aliased(User)
    src_owner = func.coalesce(src_acc.identity_id, src_card.identity_id)
    dst_owner = func.coalesce(dst_acc.identity_id, dst_card.identity_id)
    return (
        select(
            Payment,
            func.coalesce(src_acc.friendly_name, src_card.friendly_name).label("src_name"),
            src_owner.label("src_owner"),
            owner_name(src_who, src_root).label("src_owner_name"),
            func.coalesce(dst_acc.friendly_name, dst_card.friendly_name).label("dst_name"),
            dst_owner.label("dst_owner"),
            owner_name(dst_who, dst_root).label("dst_owner_name"),
        )
        .outerjoin(src_acc, and_(Payment.source_type != CARDS, src_acc.id == Payment.source_id))
        .outerjoin(src_card, and_(Payment.source_type == CARDS, src_card.id == Payment.source_id))
        .outerjoin(
            dst_acc,
            and_(Payment.destination_type != CARDS, dst_acc.id == Payment.destination_id),
        )
        .outerjoin(
            dst_card,
            and_(Payment.destination_type == CARDS, dst_card.id == Payment.destination_id),
        )
        .outerjoin(src_who, src_who.id == src_owner)
        .outerjoin(src_root, and_(src_root.identity_id == src_who.id, src_root.role == ROOT))
        .outerjoin(dst_who, dst_who.id == dst_owner)
        .outerjoin(dst_root, and_(dst_root.identity_id == dst_who.id, dst_root.role == ROOT))
        .where(*conditions)
    )


def _party(
    base: str, kind: str | None, instrument: int | None, name: Any, owner: Any, owner_name: Any
) -> Party | None:
    if instrument is None:
        return None
    page = "cards" if kind == CARDS else "accounts"
    return Party(
        id=instrument,
        name=str(name) if name is not None else str(instrument),
        url=f"{base}/{page}/{instrument}",
        owner_id=int(owner) if owner is not None else None,
        owner_name=str(owner_name) if owner_name is not None else "",
        owner_url=f"{base}/customers/{owner}" if owner is not None else None,
    )


def listed(base: str, row: Any) -> dict[str, Any]:
    """A row of `with_parties` as the pages use it: the payment and its two parties."""
    p: Payment = row[0]
    return {
        "p": p,
        "source": _party(
            base, p.source_type, p.source_id, row.src_name, row.src_owner, row.src_owner_name
        ),
        "destination": _party(
            base,
            p.destination_type,
            p.destination_id,
            row.dst_name,
            row.dst_owner,
            row.dst_owner_name,
        ),
    }


# Ledger postings


@dataclass(frozen=True)
class Line:
    """One posting, with its account's name and the transaction's running sums."""

    posting: Posting
    account_name: str
    account_url: str | None
    entry: str  # hold, settles a hold, releases a hold, movement
    running_available: int
    running_actual: int


@dataclass(frozen=True)
class Movement:
    transaction: LedgerTransaction
    lines: list[Line]

    @property
    def balanced(self) -> bool:
        return not self.lines or (
            self.lines[-1].running_available == 0 and self.lines[-1].running_actual == 0
        )


async def _return_ids(db: AsyncSession, p: Payment) -> list[int]:
    """The ledger transactions of a returned wire transfer's return: posted on its source at
    the moment it became RETURNED, naming it as their related transaction."""
    if p.kind != OWT or p.state != RETURNED:
        return []
    stmt = (
        select(LedgerTransaction)
        .join(Posting, Posting.transaction_id == LedgerTransaction.id)
        .where(
            Posting.account_id == p.source_id,
            Posting.created_at == p.updated_at,
            LedgerTransaction.type == OWT,
            LedgerTransaction.id != p.id,
        )
    )
    found = []
    for tx in (await db.execute(stmt)).scalars():
        fields = ((tx.details or {}).get("byAccount") or {}).get(str(p.source_id)) or {}
        if (fields.get("fields") or {}).get("relatedTransactionId") == str(p.id):
            found.append(tx.id)
    return found


def _entry(posting: Posting, closings: set[int]) -> str:
    if posting.pending_id is not None:
        return "closes a hold"
    if posting.id in closings:
        return "hold (closed)"
    if posting.actual_amount == 0 and posting.available_amount != 0:
        return "hold"
    return "movement"


async def movements(db: AsyncSession, base: str, p: Payment) -> list[Movement]:
    """The ledger transactions of the payment (its own, and a return's), each posting with its
    account's name and the running sums of the transaction, which end at zero."""
    ids = [p.transaction_id or p.id, *await _return_ids(db, p)]
    txs = (
        await db.execute(
            select(LedgerTransaction)
            .where(LedgerTransaction.id.in_(ids), LedgerTransaction.programme_id == p.programme_id)
            .order_by(LedgerTransaction.created_at, LedgerTransaction.id)
        )
    ).scalars()
    found = list(txs)
    if not found:
        return []
    rows = (
        await db.execute(
            select(
                Posting,
                LedgerAccount.kind,
                LedgerAccount.currency,
                ManagedAccount.friendly_name,
                ManagedCard.friendly_name,
            )
            .join(LedgerAccount, LedgerAccount.id == Posting.account_id)
            .outerjoin(ManagedAccount, ManagedAccount.id == Posting.account_id)
            # A prepaid card's money is the ledger account with the card's id: named as the card.
            .outerjoin(ManagedCard, ManagedCard.id == Posting.account_id)
            .where(Posting.transaction_id.in_([t.id for t in found]))
            .order_by(Posting.created_at, Posting.id)
        )
    ).all()
    closings = {r[0].pending_id for r in rows if r[0].pending_id is not None}
    by_tx: dict[int, list[Line]] = {t.id: [] for t in found}
    sums: dict[int, tuple[int, int]] = {}
    for posting, kind, currency, friendly, card_name in rows:
        available, actual = sums.get(posting.transaction_id, (0, 0))
        available += posting.available_amount
        actual += posting.actual_amount
        sums[posting.transaction_id] = (available, actual)
        if friendly is not None:
            name, url = str(friendly), f"{base}/accounts/{posting.account_id}"
        elif card_name is not None:
            name, url = f"{card_name} (card)", f"{base}/cards/{posting.account_id}"
        else:
            label = SYSTEM_NAMES.get(kind, str(kind).replace("_", " ").lower())
            name, url = f"{label} {currency}", None
        by_tx[posting.transaction_id].append(
            Line(posting, name, url, _entry(posting, closings), available, actual)
        )
    return [Movement(t, by_tx[t.id]) for t in found]


async def events(db: AsyncSession, p: Payment) -> list[WebhookEvent]:
    resource = f"{RESOURCE[p.kind]}:{p.id}"
    stmt = (
        select(WebhookEvent)
        .where(WebhookEvent.programme_id == p.programme_id, WebhookEvent.resource == resource)
        .order_by(WebhookEvent.id)
    )
    return list((await db.execute(stmt)).scalars())


# State history, derived


@dataclass(frozen=True)
class Step:
    at: int
    what: str
    source: str  # where the step is recorded
    event_id: int | None = None


def history(p: Payment, moved: list[Movement], sent: list[WebhookEvent]) -> list[Step]:
    """What happened to the payment and when, from what is recorded: its creation, its SCA, its
    ledger movements (a hold, its settlement or release, a return) and the webhook events that
    reported each state (written only when the programme has a webhook URL), and its state now."""
    steps = [Step(p.created_at, "Created", "payment")]
    if p.sca_at is not None:
        steps.append(Step(p.sca_at, "Strong customer authentication passed", "payment"))
    for m in moved:
        # A hold's postings, then what closed it: two steps even within one millisecond.
        groups: dict[tuple[int, bool], list[Line]] = {}
        for line in m.lines:
            holding = line.entry.startswith("hold")
            groups.setdefault((line.posting.created_at, not holding), []).append(line)
        for (at, _), lines in sorted(groups.items()):
            steps.append(Step(at, _ledger_step(p, m.transaction, lines), "ledger"))
    for e in sent:
        state = e.event_type.rpartition(".")[2]
        steps.append(Step(e.created_at, f"Reported {state}", "webhook event", e.id))
    now = f"Now {p.state}" + (f" ({p.failure})" if p.failure else "")
    steps.append(Step(p.updated_at, now, "payment"))
    order = {"payment": 0, "ledger": 1, "webhook event": 2}
    keyed = sorted(
        enumerate(steps),
        key=lambda s: (s[1].at, s[1].what.startswith("Now"), order[s[1].source], s[0]),
    )
    return [step for _, step in keyed]


def _ledger_step(p: Payment, tx: LedgerTransaction, lines: list[Line]) -> str:
    closes = any(line.posting.pending_id is not None for line in lines)
    opens = [line for line in lines if line.posting.pending_id is None]
    if tx.id != (p.transaction_id or p.id):
        return "Returned: the money came back to the source account"
    if closes and not opens:
        return f"Hold released ({tx.state})"
    if closes:
        return "Money moved: the hold was settled"
    if all(line.entry.startswith("hold") for line in lines):
        return "Amount and fee held on the source account"
    return "Money moved"


# Names and links of other pages


async def statement_links(
    db: AsyncSession, base: str, programme_id: int, entries: list[statements.Entry]
) -> dict[int, str]:
    """Where each statement entry's payment is shown, by ledger transaction id: a transfer's,
    send's or wire transfer's own page; a card step's authorisation on its card's page."""
    ids = [e.transaction_id for e in entries]
    if not ids:
        return {}
    links: dict[int, str] = {}
    paid = select(Payment.id, Payment.transaction_id).where(
        Payment.programme_id == programme_id,
        or_(Payment.id.in_(ids), Payment.transaction_id.in_(ids)),
    )
    for payment_id, tx_id in (await db.execute(paid)).all():
        links[tx_id or payment_id] = f"{base}/payments/{payment_id}"
    stepped = select(CardMovement.transaction_id, CardMovement.card_id).where(
        CardMovement.programme_id == programme_id, CardMovement.transaction_id.in_(ids)
    )
    for tx_id, card_id in (await db.execute(stepped)).all():
        links.setdefault(tx_id, f"{base}/cards/{card_id}#tx-{tx_id}")
    return links


async def instrument_names(
    db: AsyncSession, programme_id: int, ids: set[int]
) -> dict[int, tuple[str, str]]:
    """(name, page) of each customer's account or card among ledger account `ids`; the
    programme's own books (revenue, settlement) have neither and are left out."""
    if not ids:
        return {}
    base = f"/portal/programmes/{programme_id}"
    named: dict[int, tuple[str, str]] = {}
    accounts_q = select(ManagedAccount.id, ManagedAccount.friendly_name).where(
        ManagedAccount.programme_id == programme_id, ManagedAccount.id.in_(list(ids))
    )
    for i, name in (await db.execute(accounts_q)).all():
        named[i] = (name, f"{base}/accounts/{i}")
    cards_q = select(ManagedCard.id, ManagedCard.friendly_name).where(
        ManagedCard.programme_id == programme_id, ManagedCard.id.in_(list(ids))
    )
    for i, name in (await db.execute(cards_q)).all():
        named[i] = (f"{name} (card)", f"{base}/cards/{i}")
    return named
