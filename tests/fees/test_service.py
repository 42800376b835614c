"""Fee charges (D4, D5) called as the route calls them, in one transaction that is rolled back:
the fee type's amount for the identity's fee group, in the account's currency, moves from the
account to the programme's revenue, or the charge is refused with the errorCode a client sees
and nothing moves.

The idempotency ref of `POST /fees/charge` is the HTTP layer's (kernel/idempotency.py), not
this service's: its replay is tested in tests/api/test_fees.py."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from multibank.accounts import service as accounts
from multibank.container import Container
from multibank.fees import service as fees
from multibank.identities.models import CONSUMER
from multibank.kernel.errors import Conflict
from multibank.ledger.models import LedgerTransaction
from multibank.ledger.statements import StatementQuery, statement
from multibank.programmes import service as programmes
from multibank.programmes.context import Ctx
from multibank.programmes.schemas import FeeTypeCreate
from multibank.reconciliation import verify
from tests import domain_factories as make
from tests.domain_factories import rolled_back

MA = "managed_accounts"


async def test_a_charge_moves_the_fee_from_the_account_to_revenue(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        own = await make.account(ctx, alice, funds=1000)
        charged = await fees.charge(ctx, alice.identity.id, "ADMIN_FEE", MA, str(own.id))
        # A new programme's ADMIN_FEE is 1.00 for the DEFAULT fee group.
        assert (charged.amount, charged.currency, charged.source_id, charged.fee_type) == (
            100,
            "EUR",
            own.id,
            "ADMIN_FEE",
        )
        assert charged.profile_id == own.profile_id
        assert await make.balances(ctx, own.id) == (900, 900)
        assert await make.revenue(ctx) == (100, 100)
        tx = await db.get(LedgerTransaction, charged.transaction.id)
        assert tx is not None
        assert (tx.type, tx.state) == ("CHARGE_FEE", "COMPLETED")
        assert tx.details["chargeFeeType"] == "ADMIN_FEE"
        page = await statement(db, StatementQuery(own.id, fund_movements_only=True))
        newest = page.entries[0]
        assert (newest.type, newest.amount, newest.transaction_id) == (
            "CHARGE_FEE",
            -100,
            charged.transaction.id,
        )
        assert (newest.available_after, newest.actual_after) == (900, 900)
        assert await verify(db, ctx.programme.id) == []


async def test_the_fee_is_the_identity_fee_group_s(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        premium = await make.customer(ctx, CONSUMER, fee_group="PREMIUM")
        own = await make.account(ctx, premium, "GBP", funds=1000)
        charged = await fees.charge(ctx, premium.identity.id, "ADMIN_FEE", MA, str(own.id))
        # ADMIN_FEE is 0.50 for PREMIUM.
        assert (charged.amount, charged.currency) == (50, "GBP")
        assert await make.balances(ctx, own.id) == (950, 950)
        assert await make.revenue(ctx, "GBP") == (50, 50)
        assert await make.revenue(ctx, "EUR") == (0, 0)


async def test_a_fee_type_without_the_identity_s_group_charges_the_default(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        await programmes.create_fee_type(
            db,
            container.clock,
            ctx.programme,
            FeeTypeCreate(name="CARD_REPLACEMENT", amounts={"DEFAULT": {"EUR": 30}}),
        )
        premium = await make.customer(ctx, fee_group="PREMIUM")
        own = await make.account(ctx, premium, funds=100)
        charged = await fees.charge(ctx, premium.identity.id, "CARD_REPLACEMENT", MA, str(own.id))
        assert charged.amount == 30
        assert await make.balances(ctx, own.id) == (70, 70)


async def test_a_charge_beyond_the_balance_is_refused_and_moves_nothing(
    container: Container,
) -> None:
    """Refused, the charge's transaction is rolled back (the route does so on any refusal):
    the committed account and the programme's revenue are as they were, no charge recorded."""
    async with container.db.transaction() as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        own = await make.account(ctx, alice, funds=99)
    async with rolled_back(container) as db:
        ctx = Ctx(db, ctx.programme, ctx.now)
        with pytest.raises(Conflict) as refused:
            await fees.charge(ctx, alice.identity.id, "ADMIN_FEE", MA, str(own.id))
        assert refused.value.error_code == "FUNDS_INSUFFICIENT"
        assert await make.balances(ctx, own.id) == (99, 99)
        assert await make.revenue(ctx) == (0, 0)
    async with container.db.sessionmaker() as db:
        ctx = Ctx(db, ctx.programme, ctx.now)
        assert await make.balances(ctx, own.id) == (99, 99)
        charges = await db.scalars(
            select(LedgerTransaction.id).where(
                LedgerTransaction.programme_id == ctx.programme.id,
                LedgerTransaction.type == "CHARGE_FEE",
            )
        )
        assert charges.all() == []
        assert await verify(db, ctx.programme.id) == []


async def test_a_charge_of_exactly_the_balance_empties_the_account(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        own = await make.account(ctx, alice, funds=100)
        await fees.charge(ctx, alice.identity.id, "ADMIN_FEE", MA, str(own.id))
        assert await make.balances(ctx, own.id) == (0, 0)


@pytest.mark.parametrize(
    ("case", "error_code"),
    [
        ("unknown fee type", "UNRESOLVED_FEE_TYPE"),
        ("unknown identity", "UNRESOLVED_FEE_TYPE"),
        ("a card", "UNRESOLVED_INSTRUMENT"),
        ("not an id", "UNRESOLVED_INSTRUMENT"),
        ("unknown account", "UNRESOLVED_INSTRUMENT"),
        ("another identity's account", "IDENTITY_NOT_OWNER_OF_INSTRUMENT"),
        ("a currency the fee type has no amount in", "UNRESOLVED_CURRENCY"),
        ("a blocked account", "UNRESOLVED_INSTRUMENT"),
    ],
)
async def test_a_charge_that_cannot_be_resolved_is_refused(
    container: Container, case: str, error_code: str
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        await programmes.create_fee_type(
            db,
            container.clock,
            ctx.programme,
            FeeTypeCreate(name="EUR_ONLY", amounts={"DEFAULT": {"EUR": 10}}),
        )
        alice, bob = await make.customer(ctx), await make.customer(ctx)
        own = await make.account(ctx, alice, funds=1000)
        identity_id, fee_type, source_type, source_id = alice.identity.id, "ADMIN_FEE", MA, own.id
        charged_account = own
        if case == "unknown fee type":
            fee_type = "NO_SUCH_FEE"
        elif case == "unknown identity":
            identity_id = 1
        elif case == "a card":
            source_type = "cards"
        elif case == "unknown account":
            source_id = 1
        elif case == "another identity's account":
            charged_account = await make.account(ctx, bob, funds=1000)
            source_id = charged_account.id
        elif case == "a currency the fee type has no amount in":
            charged_account = await make.account(ctx, alice, "GBP", funds=1000)
            fee_type, source_id = "EUR_ONLY", charged_account.id
        elif case == "a blocked account":
            await accounts.block(ctx, own, "USER")
        source = "card-1" if case == "not an id" else str(source_id)
        with pytest.raises(Conflict) as refused:
            await fees.charge(ctx, identity_id, fee_type, source_type, source)
        assert refused.value.error_code == error_code
        assert await make.balances(ctx, charged_account.id) == (1000, 1000)
        assert await make.revenue(ctx) == (0, 0)


async def test_two_charges_take_the_fee_twice(container: Container) -> None:
    """A charge is not idempotent by itself (the route's ref is): each call is a new one."""
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        own = await make.account(ctx, alice, funds=1000)
        first = await fees.charge(ctx, alice.identity.id, "ADMIN_FEE", MA, str(own.id))
        second = await fees.charge(ctx, alice.identity.id, "ADMIN_FEE", MA, str(own.id))
        assert first.transaction.id != second.transaction.id
        assert await make.balances(ctx, own.id) == (800, 800)
        assert await make.revenue(ctx) == (200, 200)


async def test_a_rolled_back_charge_leaves_the_committed_account_as_it_was(
    container: Container,
) -> None:
    """The account and its money are committed; the charge's transaction is rolled back."""
    async with container.db.transaction() as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        own = await make.account(ctx, alice, funds=1000)
    async with rolled_back(container) as db:
        ctx = Ctx(db, ctx.programme, ctx.now)
        await fees.charge(ctx, alice.identity.id, "ADMIN_FEE", MA, str(own.id))
        assert await make.balances(ctx, own.id) == (900, 900)
    async with container.db.sessionmaker() as db:
        ctx = Ctx(db, ctx.programme, ctx.now)
        assert await make.balances(ctx, own.id) == (1000, 1000)
        assert await make.revenue(ctx) == (0, 0)
        assert await verify(db, ctx.programme.id) == []
