"""SQLite, the sandbox (issue 33 §6): SQLAlchemy's stock aiosqlite dialect, one writer whose
transactions take the write lock at BEGIN (BEGIN IMMEDIATE), WAL, and readers in autocommit
that read what was committed while a write is under way."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text

from multibank.kernel.db import Database


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'sandbox.db'}")
    async with database.engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (n INTEGER)"))
    try:
        yield database
    finally:
        await database.dispose()


async def _count(db: Database) -> int:
    async with db.read_sessionmaker() as session:
        return int((await session.execute(text("SELECT count(*) FROM t"))).scalar_one())


async def test_the_database_is_in_wal_mode(db: Database) -> None:
    async with db.read_engine.connect() as conn:
        mode = (await conn.execute(text("PRAGMA journal_mode"))).scalar_one()
    assert mode == "wal"


async def test_writes_queue_for_the_one_writer_and_readers_do_not_wait(db: Database) -> None:
    first = db.sessionmaker()
    await first.execute(text("INSERT INTO t VALUES (1)"))

    async def second_write() -> None:
        async with db.sessionmaker() as session:
            await session.execute(text("INSERT INTO t VALUES (2)"))
            await session.commit()

    waiting = asyncio.create_task(second_write())
    await asyncio.sleep(0.2)
    assert not waiting.done()  # queued for the writer while the first holds it
    # A reader reads what is committed (nothing yet), without waiting for the writer.
    async with asyncio.timeout(2):
        assert await _count(db) == 0
    await first.commit()
    await first.close()
    async with asyncio.timeout(10):
        await waiting
    assert await _count(db) == 2


async def test_a_write_transaction_takes_the_write_lock_at_its_begin(
    db: Database, tmp_path: Path
) -> None:
    """BEGIN IMMEDIATE: before its first write, a transaction holds the lock, so another
    process cannot write meanwhile (and two transactions never deadlock upgrading a read lock)."""
    async with db.sessionmaker() as session:
        await session.execute(text("SELECT count(*) FROM t"))  # reads only, so far
        other = sqlite3.connect(tmp_path / "sandbox.db", timeout=0, isolation_level=None)
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        finally:
            other.close()
        await session.rollback()


async def test_a_failed_write_changes_nothing(db: Database) -> None:
    with pytest.raises(RuntimeError):
        async with db.transaction() as session:
            await session.execute(text("INSERT INTO t VALUES (1)"))
            raise RuntimeError("refused half-way")
    assert await _count(db) == 0
    async with db.transaction() as session:  # and the writer is free again
        await session.execute(text("INSERT INTO t VALUES (1)"))
    assert await _count(db) == 1
