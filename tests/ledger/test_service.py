"""The ledger service (D5) called as the payment and fee services call it, in one transaction
that is rolled back: movements balance per currency, a guarded debit never takes a customer
below zero, a hold is settled or released, system accounts are one per programme, kind and
currency, statements follow the movements, and `ledger verify` finds the ledger whole."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from multibank.container import Container
from multibank.kernel.ids import new_id
from multibank.ledger import service as ledger
from multibank.ledger.models import (
    RESERVED,
    REVENUE,
    SETTLEMENT,
    LedgerAccount,
    LedgerTransaction,
    Posting,
)
from multibank.ledger.statements import StatementQuery, statement
from multibank.programmes.context import Ctx
from multibank.programmes.models import Programme
from multibank.reconciliation import verify
from tests import domain_factories as make
from tests.domain_factories import rolled_back


async def _transaction(ctx: Ctx, transaction_id: int) -> LedgerTransaction | None:
    return await ctx.db.scalar(
        select(LedgerTransaction).where(LedgerTransaction.id == transaction_id)
    )


async def test_a_movement_moves_money_between_accounts_and_sums_to_zero(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        paying = await make.account(ctx, alice, funds=1000)
        paid = await make.account(ctx, alice)
        movement = await ledger.post(
            db,
            programme_id=ctx.programme.id,
            type_="TRANSFER",
            legs=[
                ledger.Leg(paying.id, "EUR", -300, -300),
                ledger.Leg(paid.id, "EUR", 300, 300),
            ],
            now_ms=ctx.now,
            details={"note": "rent"},
        )
        assert (movement.type, movement.state, movement.programme_id) == (
            "TRANSFER",
            "COMPLETED",
            ctx.programme.id,
        )
        assert await make.balances(ctx, paying.id) == (700, 700)
        assert await make.balances(ctx, paid.id) == (300, 300)
        written = await _transaction(ctx, movement.id)
        assert written is not None
        assert (written.state, written.details) == ("COMPLETED", {"note": "rent"})
        sums = (
            await db.execute(
                select(func.sum(Posting.available_amount), func.sum(Posting.actual_amount)).where(
                    Posting.transaction_id == movement.id
                )
            )
        ).one()
        assert tuple(sums) == (0, 0)


async def test_legs_that_do_not_balance_per_currency_are_refused_and_write_nothing(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        eur = await make.account(ctx, alice, funds=500)
        gbp = await make.account(ctx, alice, "GBP", funds=500)
        unbalanced = [
            # Sums to zero over both currencies, but not in each: money would change currency.
            [ledger.Leg(eur.id, "EUR", -100, -100), ledger.Leg(gbp.id, "GBP", 100, 100)],
            # Available balances sum to zero, actual ones do not.
            [ledger.Leg(eur.id, "EUR", -100, -100), ledger.Leg(gbp.id, "EUR", 100, 0)],
            [ledger.Leg(eur.id, "EUR", -100, -100)],
        ]
        for legs in unbalanced:
            transaction_id = new_id()
            with pytest.raises(ledger.Unbalanced):
                await ledger.post(
                    db,
                    programme_id=ctx.programme.id,
                    type_="TRANSFER",
                    legs=legs,
                    now_ms=ctx.now,
                    transaction_id=transaction_id,
                )
            assert await _transaction(ctx, transaction_id) is None
        assert await make.balances(ctx, eur.id) == (500, 500)
        assert await make.balances(ctx, gbp.id) == (500, 500)


async def test_a_guarded_debit_beyond_the_balance_is_refused_naming_the_account(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        rich = await make.account(ctx, alice, funds=1000)
        poor = await make.account(ctx, alice, funds=100)
        paid = await make.account(ctx, alice)
        transaction_id = new_id()
        # The caller rolls back what a refused movement began (here to a savepoint, keeping the
        # accounts made before it).
        with pytest.raises(ledger.InsufficientFunds) as refused:
            async with db.begin_nested():
                await ledger.post(
                    db,
                    programme_id=ctx.programme.id,
                    type_="TRANSFER",
                    legs=[
                        ledger.Leg(rich.id, "EUR", -100, -100),
                        ledger.Leg(poor.id, "EUR", -101, -101),
                        ledger.Leg(paid.id, "EUR", 201, 201),
                    ],
                    now_ms=ctx.now,
                    transaction_id=transaction_id,
                )
        assert refused.value.account_id == poor.id
        assert await make.balances(ctx, rich.id) == (1000, 1000)
        assert await make.balances(ctx, poor.id) == (100, 100)
        assert await make.balances(ctx, paid.id) == (0, 0)
        assert await _transaction(ctx, transaction_id) is None
        # Exactly what the account holds may be taken.
        await ledger.post(
            db,
            programme_id=ctx.programme.id,
            type_="TRANSFER",
            legs=[ledger.Leg(poor.id, "EUR", -100, -100), ledger.Leg(paid.id, "EUR", 100, 100)],
            now_ms=ctx.now,
        )
        assert await make.balances(ctx, poor.id) == (0, 0)


async def test_a_customer_account_never_goes_below_zero_even_unguarded(
    container: Container,
) -> None:
    """System accounts may be negative (settlement mirrors money that came in from outside);
    the database itself refuses a negative customer balance, whatever the caller's legs say."""
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        own = await make.account(ctx, alice, funds=50)
        assert await make.balances(ctx, await make.settlement(ctx)) == (-50, -50)
        with pytest.raises(IntegrityError):
            async with db.begin_nested():
                await ledger.post(
                    db,
                    programme_id=ctx.programme.id,
                    type_="ADJUSTMENT",
                    legs=[
                        ledger.Leg(own.id, "EUR", -80, -80, guarded=False),
                        ledger.Leg(await make.settlement(ctx), "EUR", 80, 80, guarded=False),
                    ],
                    now_ms=ctx.now,
                )
        assert await make.balances(ctx, own.id) == (50, 50)


async def test_a_leg_in_another_currency_than_its_account_moves_nothing(
    container: Container,
) -> None:
    """A leg names its account's currency: a GBP leg on a EUR account is refused."""
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        eur = await make.account(ctx, alice, funds=500)
        gbp_settlement = await make.settlement(ctx, "GBP")
        with pytest.raises(ledger.InsufficientFunds):
            async with db.begin_nested():
                await ledger.post(
                    db,
                    programme_id=ctx.programme.id,
                    type_="TRANSFER",
                    legs=[
                        ledger.Leg(eur.id, "GBP", -100, -100),
                        ledger.Leg(gbp_settlement, "GBP", 100, 100, guarded=False),
                    ],
                    now_ms=ctx.now,
                )
        assert await make.balances(ctx, eur.id) == (500, 500)
        assert await make.balances(ctx, gbp_settlement) == (0, 0)


async def test_system_accounts_are_one_per_programme_kind_and_currency(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        other = await make.new_programme(db, container)
        pid, now = ctx.programme.id, ctx.now
        settlement = await ledger.system_account(db, pid, SETTLEMENT, "EUR", now)
        assert await ledger.system_account(db, pid, SETTLEMENT, "EUR", now) == settlement
        found = {
            settlement,
            await ledger.system_account(db, pid, SETTLEMENT, "GBP", now),
            await ledger.system_account(db, pid, REVENUE, "EUR", now),
            await ledger.system_account(db, pid, RESERVED, "EUR", now),
            await ledger.system_account(db, other.programme.id, SETTLEMENT, "EUR", now),
        }
        assert len(found) == 5
        kinds = dict(
            (
                await db.execute(
                    select(LedgerAccount.id, LedgerAccount.kind).where(LedgerAccount.id.in_(found))
                )
            ).all()
        )
        assert kinds[settlement] == SETTLEMENT
        # Revenue is spread over shards; the programme's revenue is their sum.
        shards = {
            await ledger.system_account(db, pid, REVENUE, "EUR", now, shard=s)
            for s in range(ledger.REVENUE_SHARDS)
        }
        assert len(shards) == ledger.REVENUE_SHARDS
        for amount, shard in zip((10, 20, 30), sorted(shards), strict=False):
            await ledger.post(
                db,
                programme_id=pid,
                type_="ADJUSTMENT",
                legs=[
                    ledger.Leg(shard, "EUR", amount, amount, guarded=False),
                    ledger.Leg(settlement, "EUR", -amount, -amount, guarded=False),
                ],
                now_ms=now,
            )
        assert await ledger.revenue_balance(db, pid, "EUR") == (60, 60)
        assert await ledger.revenue_balance(db, other.programme.id, "EUR") == (0, 0)


async def test_a_keyed_account_is_one_per_key_of_its_callers(container: Container) -> None:
    """`keyed_account`: a system account under a key its caller makes (the cards' reserved books
    are one per spending account), made once and found again, of the kind and currency asked."""
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        pid, now = ctx.programme.id, ctx.now
        first = await ledger.keyed_account(db, pid, "CARD_RESERVED", "EUR", f"{pid}:test:1", now)
        assert await ledger.keyed_account(
            db, pid, "CARD_RESERVED", "EUR", f"{pid}:test:1", now
        ) == (first)
        second = await ledger.keyed_account(db, pid, "CARD_RESERVED", "GBP", f"{pid}:test:2", now)
        assert second != first
        made = (
            await db.execute(
                select(LedgerAccount.kind, LedgerAccount.currency, LedgerAccount.system_key)
                .where(LedgerAccount.id.in_((first, second)))
                .order_by(LedgerAccount.system_key)
            )
        ).all()
        assert [tuple(row) for row in made] == [
            ("CARD_RESERVED", "EUR", f"{pid}:test:1"),
            ("CARD_RESERVED", "GBP", f"{pid}:test:2"),
        ]
        assert await make.balances(ctx, first) == (0, 0)


async def test_a_hold_lowers_the_available_balance_then_settles_to_its_credits(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice, bob = await make.customer(ctx), await make.customer(ctx)
        paying = await make.account(ctx, alice, funds=1000)
        paid = await make.account(ctx, bob)
        pid = ctx.programme.id
        transaction_id = new_id()
        held = await ledger.reserve(
            db,
            programme_id=pid,
            type_="SEND",
            account_id=paying.id,
            currency="EUR",
            total=250,
            now_ms=ctx.now,
            details={},
            transaction_id=transaction_id,
        )
        assert (held.id, held.state) == (transaction_id, "PENDING")
        assert await make.balances(ctx, paying.id) == (750, 1000)
        # More than what is still available cannot be held or moved.
        with pytest.raises(ledger.InsufficientFunds):
            async with db.begin_nested():
                await ledger.reserve(
                    db,
                    programme_id=pid,
                    type_="SEND",
                    account_id=paying.id,
                    currency="EUR",
                    total=751,
                    now_ms=ctx.now,
                    details={},
                    transaction_id=new_id(),
                )
        with pytest.raises(ledger.Unbalanced):
            await ledger.settle(
                db,
                programme_id=pid,
                transaction_id=transaction_id,
                account_id=paying.id,
                currency="EUR",
                total=250,
                credits=[ledger.Leg(paid.id, "EUR", 200, 200)],
                now_ms=ctx.now,
            )
        revenue = await ledger.system_account(
            db, pid, REVENUE, "EUR", ctx.now, shard=ledger.revenue_shard(paying.id)
        )
        await ledger.settle(
            db,
            programme_id=pid,
            transaction_id=transaction_id,
            account_id=paying.id,
            currency="EUR",
            total=250,
            credits=[
                ledger.Leg(paid.id, "EUR", 200, 200, guarded=False),
                ledger.Leg(revenue, "EUR", 50, 50, guarded=False),
            ],
            now_ms=ctx.now,
        )
        assert await make.balances(ctx, paying.id) == (750, 750)
        assert await make.balances(ctx, paid.id) == (200, 200)
        assert await make.revenue(ctx) == (50, 50)
        written = await _transaction(ctx, transaction_id)
        assert written is not None and written.state == "COMPLETED"
        reserved = await db.scalar(
            select(func.coalesce(func.sum(LedgerAccount.available), 0)).where(
                LedgerAccount.programme_id == pid, LedgerAccount.kind == RESERVED
            )
        )
        assert reserved == 0
        assert await verify(db, pid) == []


async def test_a_released_hold_gives_the_available_balance_back(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        paying = await make.account(ctx, alice, funds=1000)
        pid = ctx.programme.id
        transaction_id = new_id()
        await ledger.reserve(
            db,
            programme_id=pid,
            type_="OUTGOING_WIRE_TRANSFER",
            account_id=paying.id,
            currency="EUR",
            total=400,
            now_ms=ctx.now,
            details={},
            transaction_id=transaction_id,
        )
        assert await make.balances(ctx, paying.id) == (600, 1000)
        await ledger.release(
            db,
            programme_id=pid,
            transaction_id=transaction_id,
            account_id=paying.id,
            currency="EUR",
            total=400,
            now_ms=ctx.now,
            state="REJECTED",
        )
        assert await make.balances(ctx, paying.id) == (1000, 1000)
        written = await _transaction(ctx, transaction_id)
        assert written is not None and written.state == "REJECTED"
        held = await ledger.system_account(
            db, pid, RESERVED, "EUR", ctx.now, shard=ledger.reserved_shard(paying.id)
        )
        assert await make.balances(ctx, held) == (0, 0)
        # What was held is spendable again, all of it.
        await ledger.post(
            db,
            programme_id=pid,
            type_="CHARGE_FEE",
            legs=[
                ledger.Leg(paying.id, "EUR", -1000, -1000),
                ledger.Leg(await make.settlement(ctx), "EUR", 1000, 1000, guarded=False),
            ],
            now_ms=ctx.now,
        )
        assert await make.balances(ctx, paying.id) == (0, 0)
        assert await verify(db, pid) == []


async def test_an_external_id_names_one_movement_per_programme(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        other = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        own = await make.account(ctx, alice)

        async def deposit(c: Ctx, account_id: int, external_id: int) -> ledger.Movement:
            return await ledger.post(
                db,
                programme_id=c.programme.id,
                type_="DEPOSIT",
                legs=[
                    ledger.Leg(account_id, "EUR", 10, 10),
                    ledger.Leg(await make.settlement(c), "EUR", -10, -10, guarded=False),
                ],
                now_ms=c.now,
                external_id=external_id,
            )

        assert not await ledger.external_id_used(db, ctx.programme.id, 42)
        first = await deposit(ctx, own.id, 42)
        assert first.external_id == 42
        assert await ledger.external_id_used(db, ctx.programme.id, 42)
        assert not await ledger.external_id_used(db, other.programme.id, 42)
        with pytest.raises(IntegrityError):
            async with db.begin_nested():
                await deposit(ctx, own.id, 42)
        assert await make.balances(ctx, own.id) == (10, 10)
        # Another programme's movement may carry the same id.
        theirs = await make.account(other, await make.customer(other))
        await deposit(other, theirs.id, 42)
        assert await make.balances(other, theirs.id) == (10, 10)


async def test_the_statement_follows_the_movements_of_the_account(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        own = await make.account(ctx, alice)
        other = await make.account(ctx, alice)
        pid = ctx.programme.id
        await make.deposit(make.later(ctx, 1), own.id, "EUR", 1000)
        sent = await ledger.post(
            db,
            programme_id=pid,
            type_="TRANSFER",
            legs=[ledger.Leg(own.id, "EUR", -300, -300), ledger.Leg(other.id, "EUR", 300, 300)],
            now_ms=ctx.now + 2,
        )
        await make.deposit(make.later(ctx, 3), own.id, "EUR", 50)

        page = await statement(db, StatementQuery(own.id))
        # Newest first: the account's creation (a zero-amount event), then each movement.
        assert [e.type for e in page.entries] == [
            "DEPOSIT",
            "TRANSFER",
            "DEPOSIT",
            "INSTRUMENT_CREATE",
        ]
        assert page.count == 4
        assert [e.amount for e in page.entries] == [50, -300, 1000, 0]
        assert [(e.available_after, e.actual_after) for e in page.entries] == [
            (750, 750),
            (700, 700),
            (1000, 1000),
            (0, 0),
        ]
        assert page.entries[1].transaction_id == sent.id
        assert all(e.state == "COMPLETED" and e.currency == "EUR" for e in page.entries)
        # Read in their order, each entry's balances follow from the one before and its own
        # amounts, and the newest entry's are the account's.
        oldest_first = list(reversed(page.entries))
        for before, entry in itertools.pairwise(oldest_first):
            assert entry.available_after == before.available_after + entry.available_amount
            assert entry.actual_after == before.actual_after + entry.actual_amount
        assert (page.entries[0].available_after, page.entries[0].actual_after) == (
            await make.balances(ctx, own.id)
        )
        # The other side sees its own posting of the same transfer.
        theirs = await statement(db, StatementQuery(other.id, fund_movements_only=True))
        assert [(e.transaction_id, e.amount) for e in theirs.entries] == [(sent.id, 300)]


async def test_statement_filters_order_and_pages(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        own = await make.account(ctx, alice)
        start = ctx.now + 1000
        for i in range(5):
            await make.deposit(make.later(ctx, 1000 + i * 10), own.id, "EUR", i + 1)
        moved = StatementQuery(own.id, fund_movements_only=True)
        page = await statement(db, moved)
        assert [e.amount for e in page.entries] == [5, 4, 3, 2, 1]
        assert page.count == 5
        ascending = await statement(
            db, StatementQuery(own.id, fund_movements_only=True, ascending=True)
        )
        assert [e.amount for e in ascending.entries] == [1, 2, 3, 4, 5]
        # Pages of two, newest first: no entry twice, none skipped; count is every page's.
        seen = []
        for offset in (0, 2, 4):
            part = await statement(
                db, StatementQuery(own.id, fund_movements_only=True, offset=offset, limit=2)
            )
            assert part.count == 5
            seen += [e.amount for e in part.entries]
        assert seen == [5, 4, 3, 2, 1]
        # Inclusive time bounds.
        ranged = await statement(
            db,
            StatementQuery(own.id, from_ms=start + 10, to_ms=start + 30, fund_movements_only=True),
        )
        assert [e.amount for e in ranged.entries] == [4, 3, 2]
        assert ranged.count == 3
        assert (
            await statement(db, StatementQuery(own.id, from_ms=start + 1, to_ms=start))
        ).count == 0
        # Without the filter the account's creation event is an entry too.
        assert (await statement(db, StatementQuery(own.id))).count == 6


async def test_verify_finds_the_ledger_whole_after_movements_and_names_a_break(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice, bob = await make.customer(ctx), await make.customer(ctx)
        a = await make.account(ctx, alice, funds=1000)
        b = await make.account(ctx, bob, "GBP", funds=500)
        c = await make.account(ctx, bob, funds=0)
        pid = ctx.programme.id
        await ledger.post(
            db,
            programme_id=pid,
            type_="SEND",
            legs=[ledger.Leg(a.id, "EUR", -100, -100), ledger.Leg(c.id, "EUR", 100, 100)],
            now_ms=ctx.now,
        )
        tx = new_id()
        await ledger.reserve(
            db,
            programme_id=pid,
            type_="SEND",
            account_id=a.id,
            currency="EUR",
            total=10,
            now_ms=ctx.now,
            details={},
            transaction_id=tx,
        )
        await ledger.release(
            db,
            programme_id=pid,
            transaction_id=tx,
            account_id=a.id,
            currency="EUR",
            total=10,
            now_ms=ctx.now,
            state="REJECTED",
        )
        assert await make.balances(ctx, b.id) == (500, 500)
        assert await verify(db, pid) == []
        # A balance changed behind the ledger's back is found, and named.
        await db.execute(
            update(LedgerAccount).where(LedgerAccount.id == c.id).values(available=99, actual=99)
        )
        found = await verify(db, pid)
        assert [v.what for v in found] == [
            "currency does not sum to zero",
            "balance differs from its postings",
        ]
        assert str(c.id) in found[1].detail


async def test_nothing_a_rolled_back_transaction_did_remains(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        own = await make.account(ctx, alice, funds=1000)
        pid, account_id = ctx.programme.id, own.id
        assert await make.balances(ctx, own.id) == (1000, 1000)
    async with container.db.sessionmaker() as db:
        assert await db.get(Programme, pid) is None
        for table in (LedgerAccount, LedgerTransaction, Posting):
            rows = await db.scalar(
                select(func.count()).select_from(table).where(table.programme_id == pid)
            )
            assert rows == 0, table.__tablename__
        assert await db.get(LedgerAccount, account_id) is None


async def _chain(ctx: Ctx, account_id: int) -> list[tuple[int, int, int, int, int]]:
    """The account's postings in chain order: place, amounts, balances after."""
    rows = await ctx.db.execute(
        select(
            Posting.seq,
            Posting.available_amount,
            Posting.actual_amount,
            Posting.available_after,
            Posting.actual_after,
        )
        .where(Posting.account_id == account_id)
        .order_by(Posting.seq)
    )
    return [tuple(row) for row in rows.all()]  # type: ignore[misc]


async def test_movements_posted_together_are_the_movements_posted_one_after_the_other(
    container: Container,
) -> None:
    """`post_all` (one statement on PostgreSQL, decision 0060) writes what `post` writes for
    each movement in turn: balances, each posting's place and balances after, a whole chain."""
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        paying = await make.account(ctx, alice, funds=1000)
        book = await make.settlement(ctx)
        paid = await make.account(ctx, alice)
        first, second = new_id(), new_id()
        posted = await ledger.post_all(
            db,
            programme_id=ctx.programme.id,
            movements=[
                ledger.NewMovement(
                    "HOLD",
                    [
                        ledger.Leg(paying.id, "EUR", -300, 0),
                        ledger.Leg(book, "EUR", 300, 0, guarded=False),
                    ],
                    first,
                    details={"step": 1},
                ),
                ledger.NewMovement(
                    "SETTLE",
                    [
                        ledger.Leg(book, "EUR", -300, 0, guarded=False),
                        ledger.Leg(paying.id, "EUR", -20, -320),
                        ledger.Leg(paid.id, "EUR", 320, 320),
                    ],
                    second,
                    state="PENDING",
                ),
            ],
            now_ms=ctx.now,
        )
        assert [(m.id, m.type, m.state, m.details) for m in posted] == [
            (first, "HOLD", "COMPLETED", {"step": 1}),
            (second, "SETTLE", "PENDING", {}),
        ]
        assert await make.balances(ctx, paying.id) == (680, 680)
        assert await make.balances(ctx, paid.id) == (320, 320)
        # After the funding: the hold, then the settlement, in the next two places.
        chain = await _chain(ctx, paying.id)
        assert [row[0] for row in chain] == list(range(1, len(chain) + 1))
        assert [row[1:] for row in chain[-2:]] == [(-300, 0, 700, 1000), (-20, -320, 680, 680)]
        assert (await _chain(ctx, paid.id))[-1][1:] == (320, 320, 320, 320)
        assert [row[1:] for row in (await _chain(ctx, book))[-2:]] == [
            (300, 0, -700, -1000),
            (-300, 0, -1000, -1000),
        ]
        assert await verify(db, ctx.programme.id) == []


async def test_movements_posted_together_guard_each_debit_at_its_place(
    container: Container,
) -> None:
    """A debit beyond the balance is refused though a later credit of the same call would
    cover it: each guard is the balance at the debit's own place, as posting one after the
    other would find it; nothing is left once the caller rolls back."""
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        poor = await make.account(ctx, alice, funds=100)
        other = await make.account(ctx, alice, funds=500)
        first, second = new_id(), new_id()
        with pytest.raises(ledger.InsufficientFunds) as refused:
            async with db.begin_nested():
                await ledger.post_all(
                    db,
                    programme_id=ctx.programme.id,
                    movements=[
                        ledger.NewMovement(
                            "TRANSFER",
                            [
                                ledger.Leg(poor.id, "EUR", -150, -150),
                                ledger.Leg(other.id, "EUR", 150, 150),
                            ],
                            first,
                        ),
                        ledger.NewMovement(
                            "TRANSFER",
                            [
                                ledger.Leg(other.id, "EUR", -100, -100),
                                ledger.Leg(poor.id, "EUR", 100, 100),
                            ],
                            second,
                        ),
                    ],
                    now_ms=ctx.now,
                )
        assert refused.value.account_id == poor.id
        assert await make.balances(ctx, poor.id) == (100, 100)
        assert await make.balances(ctx, other.id) == (500, 500)
        assert await _transaction(ctx, first) is None
        assert await _transaction(ctx, second) is None
        assert await verify(db, ctx.programme.id) == []
