"""Card purchases among the portal's payments (issue 41 §3, decision 0070): a card's
authorisations, settlements and merchant refunds listed, filtered, counted and paged with the
transfers, sends and wire transfers, read from the ledger transactions the card caused (its
`card_movements`), with no table of their own and nothing written.

`listing` is one UNION ALL of the two kinds of rows in the same columns, so the payments page's
filters, count and order apply to both at once in the database; `card_rows` then reads the
page's card rows with their card's and owner's names in one query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Subquery,
    case,
    cast,
    func,
    literal,
    select,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from multibank.cards.models import CardMovement, ManagedCard
from multibank.identities.models import Identity
from multibank.ledger.models import LedgerTransaction
from multibank.payments.models import Payment
from multibank.portal.payment_detail import Party, owner_name
from multibank.users.models import ROOT, User

PAYMENT, CARD = "payment", "card"
# The card steps listed as payments, by ledger transaction type, with the kind the list shows.
CARD_KINDS = {
    "AUTHORISATION": "CARD_AUTHORISATION",
    "SETTLEMENT": "CARD_SETTLEMENT",
    "MERCHANT_REFUND": "CARD_REFUND",
}
KIND_NAMES = {
    "CARD_AUTHORISATION": "Card authorisation",
    "CARD_SETTLEMENT": "Card settlement",
    "CARD_REFUND": "Card refund",
}
# An authorisation is PENDING while its hold is open, then COMPLETED (settled), REVERSED or
# EXPIRED; a settlement or a refund is COMPLETED.
CARD_STATES = ("PENDING", "COMPLETED", "REVERSED", "EXPIRED")


def _card_amount() -> ColumnElement[int]:
    # The merchant amount the step names (signed from the cardholder's side), as a positive
    # amount like every payment's; the fee is apart (`cardholderFee`).
    # (Cast to a 64-bit integer: a card amount may pass 2**31, PostgreSQL's INTEGER.)
    amount = LedgerTransaction.details[("transactionAmount", "amount")].as_string()
    return func.abs(cast(amount, BigInteger))


def card_steps(programme_id: int) -> Any:
    """The programme's card steps listed as payments, in `listing`'s columns."""
    kind = case(
        *((LedgerTransaction.type == t, literal(k)) for t, k in CARD_KINDS.items()),
        else_=LedgerTransaction.type,
    )
    return (
        select(
            literal(CARD).label("source"),
            LedgerTransaction.id.label("id"),
            kind.label("kind"),
            LedgerTransaction.state.label("state"),
            LedgerTransaction.created_at.label("created_at"),
            _card_amount().label("amount"),
            ManagedCard.currency.label("currency"),
        )
        .join(CardMovement, CardMovement.transaction_id == LedgerTransaction.id)
        .join(ManagedCard, ManagedCard.id == CardMovement.card_id)
        .where(
            CardMovement.programme_id == programme_id,
            LedgerTransaction.programme_id == programme_id,
            LedgerTransaction.type.in_(list(CARD_KINDS)),
        )
    )


def listing(programme_id: int) -> Subquery:
    """Every payment of the programme and every card step, in the same columns: source
    (`payment` or `card`), id, kind, state, created_at, amount (minor units), currency."""
    payments = select(
        literal(PAYMENT).label("source"),
        Payment.id.label("id"),
        Payment.kind.label("kind"),
        Payment.state.label("state"),
        Payment.created_at.label("created_at"),
        Payment.amount.label("amount"),
        Payment.currency.label("currency"),
    ).where(Payment.programme_id == programme_id)
    return union_all(payments, card_steps(programme_id)).subquery("listed")


@dataclass(frozen=True)
class CardStep:
    """A card step in the shape the payments page reads a payment in."""

    id: int
    kind: str
    state: str
    created_at: int
    amount: int
    fee: int
    currency: str
    merchant: str
    card_id: int
    beneficiary: None = None


async def card_rows(
    db: AsyncSession, base: str, programme_id: int, ids: list[int]
) -> dict[int, dict[str, Any]]:
    """The page's card steps (by ledger transaction id) as the payments page lists them: the
    card (by its name, with its owner's) on the side the money left, the merchant on the other;
    each links to its card's page, where its authorisation is listed."""
    if not ids:
        return {}
    who, root = aliased(Identity), aliased(User)
    stmt = (
        select(LedgerTransaction, ManagedCard, owner_name(who, root).label("owner_name"))
        .join(CardMovement, CardMovement.transaction_id == LedgerTransaction.id)
        .join(ManagedCard, ManagedCard.id == CardMovement.card_id)
        .outerjoin(who, who.id == ManagedCard.identity_id)
        .outerjoin(root, (root.identity_id == who.id) & (root.role == ROOT))
        .where(CardMovement.programme_id == programme_id, LedgerTransaction.id.in_(ids))
    )
    found: dict[int, dict[str, Any]] = {}
    for tx, card, owner in (await db.execute(stmt)).all():
        details = tx.details or {}
        amount = (details.get("transactionAmount") or {}).get("amount") or 0
        step = CardStep(
            id=tx.id,
            kind=CARD_KINDS.get(tx.type, tx.type),
            state=tx.state,
            created_at=tx.created_at,
            amount=abs(int(amount)),
            fee=int(details.get("cardholderFee") or 0),
            currency=card.currency,
            merchant=str(details.get("merchantName") or "merchant"),
            card_id=card.id,
        )
        party = Party(
            id=card.id,
            name=card.friendly_name,
            url=f"{base}/cards/{card.id}",
            owner_id=card.identity_id,
            owner_name=str(owner or ""),
            owner_url=None if card.identity_id is None else f"{base}/customers/{card.identity_id}",
        )
        refund = tx.type == "MERCHANT_REFUND"
        found[tx.id] = {
            "p": step,
            "card": True,
            "url": f"{base}/cards/{card.id}#tx-{tx.id}",
            "source": None if refund else party,
            "destination": party if refund else None,
            "merchant": step.merchant,
        }
    return found
