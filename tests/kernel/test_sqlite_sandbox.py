"""SQLite, the sandbox (issue 33 §6, issue 40 §3): SQLAlchemy's aiosqlite dialect over stdlib
sqlite3 connections run on the event loop's thread, one writer whose transactions take the write
lock at BEGIN (BEGIN IMMEDIATE), WAL, readers in autocommit that read what was committed while a
write is under way, and waits for another's lock that never stop the loop."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

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


async def test_statements_run_on_the_event_loops_thread(db: Database) -> None:
    """No thread hand-over per call (issue 40 §3): a function SQLite calls while it runs a
    statement runs on the thread of the loop that awaited it, on the writer and the readers."""
    ran_on: list[int] = []

    def where(n: int) -> int:
        ran_on.append(threading.get_ident())
        return n

    for engine in (db.engine, db.read_engine):
        async with engine.connect() as conn:
            raw = await conn.get_raw_connection()
            raw.driver_connection.connection.create_function("where_am_i", 1, where)
            await conn.execute(text("SELECT where_am_i(1)"))
    assert ran_on == [threading.get_ident()] * 2


async def test_a_lock_held_elsewhere_is_waited_for_without_stopping_the_loop(
    db: Database, tmp_path: Path
) -> None:
    """Another process (here: another connection of this one, as a second application instance
    on the same file would be) holds the write lock: a write waits for it, and meanwhile the
    loop goes on serving; once it is released the write goes through."""
    other = sqlite3.connect(tmp_path / "sandbox.db", timeout=0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO t VALUES (7)")

    async def write() -> None:
        async with db.transaction() as session:
            await session.execute(text("INSERT INTO t VALUES (8)"))

    writing = asyncio.create_task(write())
    ticks = 0
    started = time.monotonic()
    while time.monotonic() - started < 0.3:
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks >= 10, "the loop stopped while the write waited for the lock"
    assert not writing.done()
    async with asyncio.timeout(2):
        assert await _count(db) == 0  # a reader does not wait for either
    other.execute("COMMIT")
    other.close()
    async with asyncio.timeout(10):
        await writing
    assert await _count(db) == 2


async def test_a_lock_never_released_ends_in_database_is_locked(
    db: Database, tmp_path: Path
) -> None:
    """The wait is bounded: past the busy timeout the write fails as SQLite's own busy handler
    would have made it fail (a 503 at the API, api/errors.py), and changes nothing."""
    for engine in (db.engine, db.read_engine):
        await engine.dispose()
    db.engine.sync_engine.dialect.dbapi.busy_timeout_s = 0.2
    other = sqlite3.connect(tmp_path / "sandbox.db", timeout=0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(OperationalError, match="locked"):
            async with db.transaction() as session:
                await session.execute(text("INSERT INTO t VALUES (9)"))
        assert 0.2 <= time.monotonic() - started < 5
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert await _count(db) == 0
