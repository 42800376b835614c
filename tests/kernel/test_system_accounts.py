"""System accounts (revenue, reserve) are found without a statement once known (issue 11); a
system account created by a transaction that then rolls back is never remembered."""

from __future__ import annotations

from sqlalchemy import event, select

from multibank.container import Container
from multibank.ledger import service as ledger
from multibank.ledger.models import REVENUE, LedgerAccount
from tests.conftest import ProgrammeFactory


async def test_a_rolled_back_system_account_is_not_remembered(
    container: Container, programme: ProgrammeFactory
) -> None:
    programme_id = int((await programme()).id)  # a new programme: no system account yet
    async with container.db.sessionmaker() as db:
        created = await ledger.system_account(db, programme_id, REVENUE, "EUR", 1)
        # Seen again in the same transaction: its own, still uncommitted.
        assert await ledger.system_account(db, programme_id, REVENUE, "EUR", 1) == created
        await db.rollback()
    async with container.db.sessionmaker() as db:
        again = await ledger.system_account(db, programme_id, REVENUE, "EUR", 1)
        assert again != created  # a new account, not the id of the one rolled back
        rows = (await db.execute(select(LedgerAccount.id).where(LedgerAccount.id == again))).all()
        assert len(rows) == 1
        await db.commit()


async def test_a_committed_system_account_is_found_without_a_statement(
    container: Container, programme: ProgrammeFactory
) -> None:
    programme_id = int((await programme()).id)
    async with container.db.sessionmaker() as db:
        created = await ledger.system_account(db, programme_id, REVENUE, "GBP", 1)
        await db.commit()
    statements: list[str] = []

    def record(*args: object) -> None:
        statements.append(str(args[2]))

    engine = container.db.engine.sync_engine
    async with container.db.sessionmaker() as db:
        first = await ledger.system_account(db, programme_id, REVENUE, "GBP", 1)  # read once
    event.listen(engine, "before_cursor_execute", record)
    try:
        async with container.db.sessionmaker() as db:
            assert await ledger.system_account(db, programme_id, REVENUE, "GBP", 1) == created
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert first == created
    assert statements == []
