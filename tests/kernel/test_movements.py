"""A ledger movement (decision 0024): on PostgreSQL every leg's guarded update, the transaction
and its postings go in one statement. Whatever the legs' order, a refused leg changes nothing,
names the account that lacked the funds, and each posting records the balance its own update
left."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, select

from multibank.container import Container
from multibank.kernel.ids import new_id
from multibank.ledger import service as ledger
from multibank.ledger.models import SETTLEMENT, LedgerAccount, LedgerTransaction, Posting
from tests.conftest import ProgrammeFactory

NOW = 1_700_000_000_000


async def _accounts(container: Container, programme_id: int, *funds: int) -> list[int]:
    """Accounts funded with the given amounts from the programme's settlement account (so the
    ledger still balances), in increasing id order."""
    ids = sorted(new_id() for _ in funds)
    async with container.db.sessionmaker() as db:
        for account_id in ids:
            await ledger.open_account(db, programme_id, "EUR", NOW, account_id)
        settlement = await ledger.system_account(db, programme_id, SETTLEMENT, "EUR", NOW)
        legs = [ledger.Leg(a, "EUR", f, f) for a, f in zip(ids, funds, strict=True) if f]
        legs.append(ledger.Leg(settlement, "EUR", -sum(funds), -sum(funds), guarded=False))
        await ledger.post(db, programme_id=programme_id, type_="DEPOSIT", legs=legs, now_ms=NOW)
        await db.commit()
    return ids


async def _balances(container: Container, ids: list[int]) -> list[tuple[int, int, int]]:
    async with container.db.sessionmaker() as db:
        rows = (
            await db.execute(
                select(
                    LedgerAccount.id,
                    LedgerAccount.available,
                    LedgerAccount.actual,
                    LedgerAccount.posting_count,
                ).where(LedgerAccount.id.in_(ids))
            )
        ).all()
    by_id = {r.id: (int(r.available), int(r.actual), int(r.posting_count)) for r in rows}
    return [by_id[i] for i in ids]


async def _post(container: Container, programme_id: int, legs: list[ledger.Leg]) -> int:
    async with container.db.sessionmaker() as db:
        movement = await ledger.post(
            db, programme_id=programme_id, type_="TRANSFER", legs=legs, now_ms=NOW
        )
        await db.commit()
    return movement.id


@pytest.mark.parametrize("refused", [0, 1, 2])
async def test_a_refused_leg_changes_nothing_and_names_its_account(
    container: Container, programme: ProgrammeFactory, refused: int
) -> None:
    """Three accounts debited 100 each into a fourth; the one at position `refused` (in id
    order, so before, between or after the others' updates) holds only 50."""
    programme_id = int((await programme()).id)
    funds = [500, 500, 500]
    funds[refused] = 50
    *debited, credited = await _accounts(container, programme_id, *funds, 0)
    before = await _balances(container, [*debited, credited])
    legs = [ledger.Leg(a, "EUR", -100, -100) for a in debited]
    legs.append(ledger.Leg(credited, "EUR", 300, 300, guarded=False))
    transaction_id = new_id()
    async with container.db.sessionmaker() as db:
        with pytest.raises(ledger.InsufficientFunds) as raised:
            await ledger.post(
                db,
                programme_id=programme_id,
                type_="TRANSFER",
                legs=list(reversed(legs)),  # given in any order
                now_ms=NOW,
                transaction_id=transaction_id,
            )
        await db.rollback()
    assert raised.value.account_id == debited[refused]
    assert await _balances(container, [*debited, credited]) == before
    async with container.db.sessionmaker() as db:
        written = await db.scalar(
            select(LedgerTransaction.id).where(LedgerTransaction.id == transaction_id)
        )
        postings = (
            await db.scalars(select(Posting.id).where(Posting.transaction_id == transaction_id))
        ).all()
    assert written is None
    assert postings == []


async def test_each_posting_records_the_balance_its_update_left(
    container: Container, programme: ProgrammeFactory
) -> None:
    programme_id = int((await programme()).id)
    low, middle, high = await _accounts(container, programme_id, 1000, 0, 70)
    legs = [
        ledger.Leg(high, "EUR", -70, -70),  # exactly what it holds
        ledger.Leg(low, "EUR", -30, -30),
        ledger.Leg(middle, "EUR", 100, 100, guarded=False),
    ]
    transaction_id = await _post(container, programme_id, legs)
    assert await _balances(container, [low, middle, high]) == [
        (970, 970, 2),
        (100, 100, 1),
        (0, 0, 2),
    ]
    async with container.db.sessionmaker() as db:
        rows = (
            await db.execute(
                select(
                    Posting.account_id,
                    Posting.available_amount,
                    Posting.actual_amount,
                    Posting.available_after,
                    Posting.actual_after,
                ).where(Posting.transaction_id == transaction_id)
            )
        ).all()
    assert sorted(tuple(r) for r in rows) == sorted(
        [(low, -30, -30, 970, 970), (middle, 100, 100, 100, 100), (high, -70, -70, 0, 0)]
    )
    # A second movement's postings start from the first one's balances.
    second = await _post(
        container,
        programme_id,
        [ledger.Leg(low, "EUR", -970, -970), ledger.Leg(high, "EUR", 970, 970, guarded=False)],
    )
    async with container.db.sessionmaker() as db:
        after = dict(
            (
                await db.execute(
                    select(Posting.account_id, Posting.available_after).where(
                        Posting.transaction_id == second
                    )
                )
            ).all()
        )
    assert after == {low: 0, high: 970}


async def _five(db: Any, programme_id: int, low: int, high: int, **options: Any) -> None:
    """5 EUR from `low` to `high`, in `db`'s transaction."""
    legs = [ledger.Leg(low, "EUR", -5, -5), ledger.Leg(high, "EUR", 5, 5)]
    await ledger.post(
        db, programme_id=programme_id, type_="TRANSFER", legs=legs, now_ms=NOW, **options
    )


async def test_a_movement_is_one_statement_on_postgresql(
    container: Container, programme: ProgrammeFactory
) -> None:
    if container.db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite's statements are in-process calls, not round trips")
    programme_id = int((await programme()).id)
    low, high = await _accounts(container, programme_id, 500, 0)
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    engine = container.db.engine.sync_engine
    async with container.db.sessionmaker() as db:
        await db.connection()  # the transaction's BEGIN, before counting
        event.listen(engine, "before_cursor_execute", record)
        try:
            await _five(db, programme_id, low, high)
        finally:
            event.remove(engine, "before_cursor_execute", record)
        await db.commit()
    assert len(statements) == 1, statements
    assert await _balances(container, [low, high]) == [(495, 495, 2), (5, 5, 1)]
