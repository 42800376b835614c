"""Card holds and their settlement on the ledger (D23, decision 0045), called as the simulator
calls them, in one rolled-back session: an authorisation moves the amount from the spending
account's available balance to its reserved book; a settlement takes the hold, pays the scheme
what was settled and charges the fee, never below a zero balance; a reversal gives back part or
all of a hold; a refund credits the card less its own fee, capped by what was settled. Balances
are (available, actual); the ledger verifies clean after each test."""

from __future__ import annotations

from sqlalchemy import select

from multibank.cards import money
from multibank.cards.authorisations import COMPLETED, PENDING_SETTLEMENT, REVERSED
from multibank.container import Container
from multibank.ledger.models import LedgerTransaction
from multibank.programmes.card_fees import REFUND, with_fee
from multibank.programmes.context import Ctx
from multibank.reconciliation import verify
from tests import domain_factories as make
from tests.cards.support import (
    FEE,
    attempt,
    authorisation,
    book,
    last_event,
    programme,
    scheme,
)
from tests.domain_factories import limit, rolled_back


async def _state(ctx: Ctx, transaction_id: int | None) -> str | None:
    return await ctx.db.scalar(
        select(LedgerTransaction.state)
        .where(LedgerTransaction.id == transaction_id)
        .execution_options(populate_existing=True)
    )


async def test_an_authorisation_moves_the_amount_to_the_reserved_book(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        card = await make.card(ctx, container, await make.customer(ctx), funds=1000)
        outcome, auth = await money.authorise(ctx, card, attempt(300))
        assert outcome.code == money.APPROVED and auth is not None
        assert outcome.authorisation_id == auth.id
        assert await make.balances(ctx, card.id) == (700, 1000)
        assert await book(ctx, card) == (300, 0)
        assert (auth.held_amount, auth.open_amount, auth.state) == (300, 300, PENDING_SETTLEMENT)
        assert auth.expires_at == ctx.now + money.AUTHORISATION_TTL_MS
        assert await _state(ctx, auth.id) == "PENDING"
        event = await last_event(ctx, card)
        assert (event["authorisationType"], event["approved"]) == ("AUTHORISED", True)
        assert event["transactionAmount"] == {"currency": "EUR", "amount": "-300"}
        assert event["availableBalance"]["amount"] == "700"
        assert await scheme(ctx) == (0, 0)
        assert await verify(db, ctx.programme.id) == []


async def test_a_settlement_pays_the_scheme_and_charges_the_fee(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        card = await make.card(ctx, container, await make.customer(ctx), funds=1000)
        _, auth = await money.authorise(ctx, card, attempt(300))
        revenue = await make.revenue(ctx)
        outcome = await money.settle(ctx, card, auth)
        assert outcome.code == money.CODE_COMPLETED and auth is not None
        assert await make.balances(ctx, card.id) == (1000 - 300 - FEE,) * 2
        assert await book(ctx, card) == (0, 0)
        assert await scheme(ctx) == (300, 300)
        assert await make.revenue(ctx) == (revenue[0] + FEE, revenue[1] + FEE)
        done = await authorisation(ctx, auth.id)
        assert (done.open_amount, done.settled_amount, done.fee_amount) == (0, 300, FEE)
        assert (done.state, done.settlement_id) == (COMPLETED, outcome.settlement_id)
        assert await _state(ctx, auth.id) == await _state(ctx, outcome.settlement_id) == COMPLETED
        event = await last_event(ctx, card)
        assert event["transactionAmount"]["amount"] == "-300"
        assert event["feeAmount"]["amount"] == str(FEE)
        assert event["availableBalance"]["amount"] == str(1000 - 300 - FEE)
        assert event["relatedAuthorisationId"] == str(auth.id)
        assert await verify(db, ctx.programme.id) == []


async def test_settling_another_amount_than_the_hold(container: Container) -> None:
    """Less than held releases the rest; more takes what the available balance covers, and
    beyond that is refused with nothing moved; the fee takes only what is left (D23)."""
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        owner = await make.customer(ctx)
        # (funds, held, settled) -> the card's balances after, or None: refused
        cases = {
            (1000, 300, 200): 1000 - 200 - FEE,
            (1000, 300, 500): 1000 - 500 - FEE,
            (400, 300, 400): 0,  # all the money: no fee is left to take
            (305, 300, 300): 0,  # the fee takes the 5 that is left
            (400, 300, 500): None,
        }
        for (funds, held, settled), left in cases.items():
            card = await make.card(ctx, container, owner, funds=funds)
            _, auth = await money.authorise(ctx, card, attempt(held))
            outcome = await money.settle(ctx, card, auth, settled)
            case = (funds, held, settled)
            if left is None:
                assert outcome.code == money.DENIED_NOT_ENOUGH_FUNDS, case
                assert await make.balances(ctx, card.id) == (funds - held, funds), case
                assert await book(ctx, card) == (held, 0), case
                assert (await authorisation(ctx, outcome.authorisation_id)).open_amount == held
                continue
            assert outcome.code == money.CODE_COMPLETED, case
            assert await make.balances(ctx, card.id) == (left, left), case
            assert await book(ctx, card) == (0, 0), case
            done = await authorisation(ctx, outcome.authorisation_id)
            assert (done.settled_amount, done.fee_amount) == (settled, funds - settled - left)
        card = await make.card(ctx, container, owner, funds=1000)
        _, auth = await money.authorise(ctx, card, attempt(300))
        for amount in (0, -1):
            refused = await money.settle(ctx, card, auth, amount)
            assert refused.code == money.DENIED_AMOUNT_NOT_POSITIVE
        assert await verify(db, ctx.programme.id) == []


async def test_a_reversal_gives_back_part_then_all_of_the_hold(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        card = await make.card(ctx, container, await make.customer(ctx), funds=1000)
        _, auth = await money.authorise(ctx, card, attempt(300))
        assert auth is not None
        part = await money.reverse(ctx, card, auth, 100)
        assert part.code == money.CODE_COMPLETED and part.reversal_id is not None
        assert (auth.open_amount, auth.state) == (200, PENDING_SETTLEMENT)
        assert await make.balances(ctx, card.id) == (800, 1000)
        assert await book(ctx, card) == (200, 0)
        event = await last_event(ctx, card)
        assert (event["authorisationType"], event["transactionAmount"]["amount"]) == (
            "ONLINE_REVERSE",
            "100",
        )
        assert event["relatedAuthorisationIds"] == [str(auth.id)]
        assert (await money.reverse(ctx, card, auth, 0)).code == money.DENIED_AMOUNT_NOT_POSITIVE
        rest = await money.reverse(ctx, card, auth, 500)  # at most what is still held
        assert rest.code == money.CODE_COMPLETED
        assert (auth.open_amount, auth.state) == (0, REVERSED)
        assert await _state(ctx, auth.id) == REVERSED
        assert await make.balances(ctx, card.id) == (1000, 1000)
        assert await book(ctx, card) == (0, 0)
        assert await verify(db, ctx.programme.id) == []


async def test_a_refund_is_capped_by_the_settlement_and_pays_its_own_fee(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        ctx.programme.card_fees = with_fee(ctx.programme, REFUND, "EUR", 5)
        owner = await make.customer(ctx)
        card = await make.card(ctx, container, owner, funds=1000)
        bought = await money.purchase(ctx, card, attempt(300))
        settled = await authorisation(ctx, bought.authorisation_id)
        revenue = await make.revenue(ctx)

        part = await money.refund(ctx, card, attempt(200), settled, bought.settlement_id)
        assert part.code == money.CODE_COMPLETED and part.refund_id is not None
        assert await make.balances(ctx, card.id) == (690 + 195,) * 2
        event = await last_event(ctx, card)
        assert (event["settlementType"], event["transactionAmount"]["amount"]) == (
            "PURCHASE_REFUND",
            "200",
        )
        assert event["relatedSettlementIds"] == [str(bought.settlement_id)]
        too_much = await money.refund(ctx, card, attempt(101), settled, bought.settlement_id)
        assert too_much.code == money.DENIED_NOT_ENOUGH_FUNDS
        rest = await money.refund(ctx, card, attempt(100), settled, bought.settlement_id)
        assert rest.code == money.CODE_COMPLETED
        assert await make.balances(ctx, card.id) == (885 + 95,) * 2
        assert (settled.refunded_amount, settled.fee_amount) == (300, FEE + 5 + 5)
        assert await make.revenue(ctx) == (revenue[0] + 10, revenue[1] + 10)

        # Without a settlement: a merchant credit, uncapped.
        credit = await money.refund(ctx, card, attempt(5000))
        assert (credit.code, credit.authorisation_id) == (money.CODE_COMPLETED, None)
        assert await make.balances(ctx, card.id) == (980 + 4995,) * 2
        assert await scheme(ctx) == (300 - 300 - 5000,) * 2

        # A fee above the refund takes the refund, never the balance below it.
        ctx.programme.card_fees = with_fee(ctx.programme, REFUND, "EUR", 50)
        empty = await make.card(ctx, container, owner)
        assert (await money.refund(ctx, empty, attempt(20))).code == money.CODE_COMPLETED
        assert await make.balances(ctx, empty.id) == (0, 0)
        for amount, code in ((0, money.DENIED_AMOUNT_NOT_POSITIVE), (5, money.DENIED_OTHER)):
            currency = "EUR" if amount <= 0 else "GBP"
            refused = await money.refund(ctx, card, attempt(amount, currency))
            assert refused.code == code
        assert await verify(db, ctx.programme.id) == []


async def test_a_debit_cards_steps_spend_from_its_parent_account(container: Container) -> None:
    """A debit card holds nothing: its hold and settlement move its parent account's money,
    and each event carries what each limit leaves to spend, the fee counted as spent (D22)."""
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        owner = await make.customer(ctx)
        parent = await make.account(ctx, owner, funds=5000)
        limits = [limit(1000, "DAILY"), limit(4000)]
        card = await make.card(ctx, container, owner, parent=parent, spendLimit=limits)
        _, auth = await money.authorise(ctx, card, attempt(300))
        assert await make.balances(ctx, parent.id) == (4700, 5000)
        event = await last_event(ctx, card)
        assert event["availableBalance"]["amount"] == "0"
        mode = event["details"]["debitModeDetails"]
        assert mode["parentManagedAccountId"] == str(parent.id)
        assert [(s["interval"], s["value"]["amount"]) for s in mode["availableToSpend"]] == [
            ("DAILY", 700),
            ("ALWAYS", 3700),
        ]
        await money.settle(ctx, card, auth)
        assert await make.balances(ctx, parent.id) == (4690, 4690)
        assert await money.spent(ctx, card) == {interval: 310 for interval in money.INTERVALS}
        assert [s["value"]["amount"] for s in await money.available_to_spend(ctx, card)] == [
            690,
            3690,
        ]
        assert await verify(db, ctx.programme.id) == []
