"""The card pages' reads (issue 41 §3, decision 0070): the cards list's search, and what becomes
of a card's money, said in plain words."""

from __future__ import annotations

from sqlalchemy import ColumnElement, Select, func, or_, select
from sqlalchemy.orm import aliased

from multibank.cards.models import ManagedCard
from multibank.identities.models import Identity
from multibank.ledger.models import LedgerAccount
from multibank.portal.overview import amount
from multibank.portal.payment_detail import owner_name
from multibank.users.models import ROOT, User


def search(
    programme_id: int, identity: int | None, like: str | None, text: str = ""
) -> Select[ManagedCard, LedgerAccount, str]:
    """The programme's cards (one customer's when `identity` is given) with the money they
    spend and their owner's name, matching the search: `like` (a lower-cased LIKE pattern with
    `\\` as its escape) found in the card's name, its name on card or its owner's name, or
    `text` being the last digits of the number (up to four)."""
    who, root = aliased(Identity), aliased(User)
    owner = owner_name(who, root)
    stmt = (
        select(ManagedCard, LedgerAccount, owner.label("owner_name"))
        .outerjoin(
            LedgerAccount,
            LedgerAccount.id == func.coalesce(ManagedCard.parent_account_id, ManagedCard.id),
        )
        .outerjoin(who, who.id == ManagedCard.identity_id)
        .outerjoin(root, (root.identity_id == who.id) & (root.role == ROOT))
        .where(ManagedCard.programme_id == programme_id)
    )
    if identity is not None:
        stmt = stmt.where(ManagedCard.identity_id == identity)
    if like is not None:
        conditions: list[ColumnElement[bool]] = [
            func.lower(ManagedCard.friendly_name).like(like, escape="\\"),
            func.lower(ManagedCard.name_on_card).like(like, escape="\\"),
            func.lower(owner).like(like, escape="\\"),
        ]
        if text.isascii() and text.isdigit() and len(text) <= 4:
            conditions.append(ManagedCard.number_last_four.like(f"%{text}"))
        stmt = stmt.where(or_(*conditions))
    return stmt


def fate(card: ManagedCard, balance: LedgerAccount | None) -> str:
    """What becomes of the card's money, in plain words (decision 0070): where it is now for a
    destroyed card, and what its expiry will do for a live one."""
    prepaid = card.parent_account_id is None
    left = amount(balance.available if balance else 0, card.currency)
    if not prepaid:
        return (
            "A debit card holds no money: it spends its account's, which keeps its balance "
            "whatever becomes of the card. Holds the card opened stay on the account until "
            "they settle or expire."
        )
    if card.state != "DESTROYED":
        expiry = f"{card.expiry_mmyy[:2]}/{card.expiry_mmyy[2:]}"
        if card.renewal_type == "NO_RENEW":
            return (
                f"At the end of {expiry} (the programme's clock) the card expires: it is "
                "destroyed (EXPIRED) and its balance stays on it, where no purchase, transfer or "
                "send can use it any more, so move the money off the card before then."
            )
        return (
            f"At the end of {expiry} the card is renewed: same number, a new expiry and CVV; "
            "its money stays on it and can still be spent."
        )
    if card.destroyed_reason in ("LOST", "STOLEN") and card.replacement_id:
        return (
            f"Destroyed ({card.destroyed_reason}): its available balance moved to its "
            f"replacement card when that was made; {left} is left on this card."
        )
    return (
        f"Destroyed ({card.destroyed_reason}): its balance, {left}, stays on the card, where "
        "no purchase, transfer or send can use it any more (SOURCE_INSTRUMENT_DESTROYED). "
        "Authorisations still open settle or expire as before; an expired hold comes back "
        "to this balance."
    )
