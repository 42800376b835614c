"""The simulator's purchase is an authorisation and its full settlement in one transaction
(D23), written in fewer statements than `authorise` then `settle` (decision 0060). Here the two
are run on two cards made alike, in one rolled-back session, and what each leaves behind is
compared, ids aside: the answer, the ledger movements (type, state, details, each posting by the
kind of its account, the card's own accounts' balances after), the balances, the authorisation's
row, the card movements and the webhook events (path, type, payload). Declines are compared the
same way: they must refuse with the same code and event, and move nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import select

from multibank.cards import money
from multibank.cards.authorisations import CardAuthorisation
from multibank.cards.models import CardMovement, ManagedCard
from multibank.container import Container
from multibank.ledger.models import LedgerAccount, LedgerTransaction, Posting
from multibank.programmes.card_fees import ATM_WITHDRAWAL, with_fee
from multibank.programmes.context import Ctx
from multibank.reconciliation import verify
from tests import domain_factories as make
from tests.cards.support import attempt, events, programme, scheme
from tests.domain_factories import limit, rolled_back

# Values that differ between two cards made alike (ids, drawn codes): each is named by the order
# it first appears in, so two traces are equal when their ids stand in the same places.
ID_KEYS = {
    "transactionId",
    "authCode",
    "authorisationCode",
    "relatedAuthorisationId",
    "relatedAuthorisationIds",
    "relatedSettlementId",
    "relatedSettlementIds",
    "parentManagedAccountId",
    "cardId",
    "authorisationId",
    "authorisationRelatedId",
    "settlementRelatedId",
    "id",
    "authorisation_id",
    "settlement_id",
    "auth_code",
    "transaction",
}
NO_ID = (None, "0")


@dataclass
class Names:
    """Stand-ins for the ids of one trace, in the order they appear."""

    seen: dict[str, str] = field(default_factory=dict)

    def of(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.of(item) for item in value]
        if value in NO_ID:
            return value
        return self.seen.setdefault(str(value), f"<id {len(self.seen)}>")

    def strip(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: self.of(v) if k in ID_KEYS else self.strip(v) for k, v in sorted(value.items())
            }
        if isinstance(value, list):
            return [self.strip(item) for item in value]
        return value


async def _postings(ctx: Ctx, transaction_id: int, own: dict[int, str]) -> list[Any]:
    """A movement's postings by the kind of their account; the balances after only on the
    card's own accounts (the system accounts are shared by both cards of a test)."""
    stmt = (
        select(Posting, LedgerAccount.kind)
        .join(LedgerAccount, LedgerAccount.id == Posting.account_id)
        .where(Posting.transaction_id == transaction_id)
    )
    out = []
    for posting, kind in (await ctx.db.execute(stmt)).all():
        role = own.get(posting.account_id, kind)
        after = (
            (posting.available_after, posting.actual_after, posting.seq, posting.pending_id)
            if posting.account_id in own
            else None
        )
        out.append((role, posting.currency, posting.available_amount, posting.actual_amount, after))
    return sorted(out, key=repr)


async def _own_accounts(ctx: Ctx, card: ManagedCard) -> dict[int, str]:
    spending = money.spending_account(card)
    reserved = await money.reserved_book(ctx, spending, card.currency)
    return {spending: "spending account", reserved: "reserved book"}


async def _account_rows(ctx: Ctx, own: dict[int, str]) -> dict[str, Any]:
    rows = (
        await ctx.db.execute(
            select(LedgerAccount)
            .where(LedgerAccount.id.in_(own))
            .execution_options(populate_existing=True)
        )
    ).scalars()
    return {
        own[a.id]: (a.available, a.actual, a.posting_count, a.closing_count, a.movement_count)
        for a in rows
    }


async def trace(ctx: Ctx, card: ManagedCard, outcome: money.Outcome) -> dict[str, Any]:
    """Everything a card step left behind, ids named by where they appear."""
    names = Names()
    own = await _own_accounts(ctx, card)
    movements = (
        await ctx.db.execute(
            select(CardMovement)
            .where(CardMovement.card_id == card.id)
            .order_by(CardMovement.transaction_id)
        )
    ).scalars()
    ledger = []
    for movement in movements:
        moved = await ctx.db.scalar(
            select(LedgerTransaction)
            .where(LedgerTransaction.id == movement.transaction_id)
            .execution_options(populate_existing=True)
        )
        assert moved is not None
        ledger.append(
            {
                "transaction": names.of(moved.id),
                "card movement": (movement.kind, own.get(movement.account_id)),
                "type": moved.type,
                "state": moved.state,
                "details": names.strip(moved.details),
                "postings": await _postings(ctx, moved.id, own),
            }
        )
    authorisations = (
        await ctx.db.execute(
            select(CardAuthorisation)
            .where(CardAuthorisation.card_id == card.id)
            .order_by(CardAuthorisation.id)
            .execution_options(populate_existing=True)
        )
    ).scalars()
    return {
        "outcome": names.strip(vars(outcome)),
        "ledger": ledger,
        "accounts": await _account_rows(ctx, own),
        "authorisations": [
            {
                "id": names.of(a.id),
                "accounts": (own.get(a.account_id), own.get(a.reserved_account_id)),
                "amounts": (
                    a.held_amount,
                    a.open_amount,
                    a.settled_amount,
                    a.fee_amount,
                    a.refunded_amount,
                ),
                "state": a.state,
                "auth_code": names.of(a.auth_code),
                "merchant": names.strip(a.merchant),
                "settlement_id": names.of(a.settlement_id),
                "expires in": a.expires_at - ctx.now,
                "created_at": a.created_at,
            }
            for a in authorisations
        ],
        "events": [(path, kind, names.strip(body)) for path, kind, body in await events(ctx, card)],
    }


async def _two_cards(ctx: Ctx, container: Container, case: dict[str, Any]) -> list[ManagedCard]:
    owner = await make.customer(ctx)
    made = []
    for _ in range(2):
        if case.get("debit"):
            parent = await make.account(ctx, owner, funds=case["funds"])
            made.append(await make.card(ctx, container, owner, parent=parent, **case["rules"]))
        else:
            made.append(await make.card(ctx, container, owner, funds=case["funds"]))
    return made


async def _totals(ctx: Ctx) -> tuple[Any, ...]:
    return (await make.revenue(ctx), await scheme(ctx))


def _delta(after: tuple[Any, ...], before: tuple[Any, ...]) -> list[tuple[int, int]]:
    return [(a[0] - b[0], a[1] - b[1]) for a, b in zip(after, before, strict=True)]


CASES: dict[str, dict[str, Any]] = {
    "prepaid": {"funds": 1000, "amount": 300},
    # The fee is what is left after the amount: never below a zero balance (D23).
    "prepaid, fee capped by the balance": {"funds": 305, "amount": 300},
    "prepaid, exactly the balance": {"funds": 300, "amount": 300},
    "debit within its limits": {
        "debit": True,
        "funds": 5000,
        "amount": 700,
        "rules": {"spendLimit": [limit(1000, "DAILY"), limit(4000, "MONTHLY"), limit(9000)]},
    },
    "ATM withdrawal with its own fee": {
        "funds": 1000,
        "amount": 200,
        "fee": (ATM_WITHDRAWAL, 7),
        "attempt": {"atm": True, "merchant_category_code": "1234"},
    },
    "cardholder not present, another country, merchant data": {
        "funds": 1000,
        "amount": 120,
        "attempt": {
            "country_alpha3": "ITA",
            "cardholder_present": "NOT_PRESENT",
            "extra_merchant": {"merchantCity": "Rome"},
        },
    },
    "declined: not enough funds": {"funds": 100, "amount": 300},
    "declined: over a debit card's limit": {
        "debit": True,
        "funds": 5000,
        "amount": 700,
        "rules": {"spendLimit": [limit(600, "WEEKLY")]},
    },
    "declined: a debit card's funds": {
        "debit": True,
        "funds": 500,
        "amount": 700,
        "rules": {"spendLimit": [limit(1000)]},
    },
    "declined: a spend rule": {
        "debit": True,
        "funds": 5000,
        "amount": 700,
        "rules": {"spendLimit": [limit(1000)], "blockedMerchantCategories": ["5399"]},
    },
    "declined: another currency": {"funds": 1000, "amount": 300, "currency": "GBP"},
}


@pytest.mark.parametrize("name", list(CASES))
async def test_a_purchase_leaves_what_authorise_then_settle_leave(
    container: Container, name: str
) -> None:
    case = CASES[name]
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        if "fee" in case:
            kind, amount = case["fee"]
            ctx.programme.card_fees = with_fee(ctx.programme, kind, "EUR", amount)
        bought, stepped = await _two_cards(ctx, container, {"rules": {}, **case})
        tried = attempt(case["amount"], case.get("currency", "EUR"), **case.get("attempt", {}))

        before = await _totals(ctx)
        outcome = await money.purchase(ctx, bought, tried)
        middle = await _totals(ctx)
        held, authorisation = await money.authorise(ctx, stepped, tried)
        if authorisation is None:
            settled = held
        else:
            settled = await money.settle(ctx, stepped, authorisation)
            settled.code = held.code  # the purchase answers as its authorisation does
        after = await _totals(ctx)

        assert await trace(ctx, bought, outcome) == await trace(ctx, stepped, settled)
        assert _delta(middle, before) == _delta(after, middle)
        approved = not name.startswith("declined")
        assert (outcome.code == money.APPROVED) is approved, outcome
        assert len(await events(ctx, bought)) == (2 if approved else 1)
        assert await verify(db, ctx.programme.id) == []


async def test_the_comparison_tells_steps_apart(container: Container) -> None:
    """The trace above is not blind: a purchase is not an authorisation alone, nor a purchase
    of another amount, and ids in other places make another trace."""
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        first, second = await _two_cards(ctx, container, {"funds": 1000})
        bought = await money.purchase(ctx, first, attempt(300))
        held, _ = await money.authorise(ctx, second, attempt(300))
        assert await trace(ctx, first, bought) != await trace(ctx, second, held)

        third, fourth = await _two_cards(ctx, container, {"funds": 1000})
        other = await money.purchase(ctx, third, attempt(301))
        assert await trace(ctx, first, bought) != await trace(ctx, third, other)

        same = await money.purchase(ctx, fourth, attempt(300))
        assert await trace(ctx, first, bought) == await trace(ctx, fourth, same)
    # Ids are set aside by where they stand: a settlement naming another authorisation than
    # the one before it differs (the ledger is append-only, so this one is built by hand).
    right = [{"transactionId": "7"}, {"relatedAuthorisationIds": ["7"], "transactionId": "8"}]
    wrong = [{"transactionId": "7"}, {"relatedAuthorisationIds": ["8"], "transactionId": "8"}]
    assert Names().strip(right) != Names().strip(wrong)
    assert Names().strip(right) == Names().strip(
        [{"transactionId": "1"}, {"relatedAuthorisationIds": ["1"], "transactionId": "2"}]
    )
