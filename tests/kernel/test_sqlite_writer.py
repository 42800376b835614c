"""The SQLite writer (kernel/sqlite_inline.py, decision 0020): BEGIN IMMEDIATE and COMMIT run on
the event loop's thread when they cannot wait; when another connection holds the write lock the
writer waits for it in a thread, and the loop goes on serving meanwhile; the WAL is
checkpointed every so many commits, since the writer no longer checkpoints by itself."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from sqlalchemy import text

from multibank.kernel import sqlite_inline
from multibank.kernel.db import PAGE_SIZE, create_engine, create_read_engine


async def test_a_writer_waits_for_another_connections_lock_without_stalling_the_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w.db"
    engine = create_engine(f"sqlite:///{path}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (v INTEGER)"))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    async def write() -> float:
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO t VALUES (1)"))
        return time.monotonic()

    running = asyncio.create_task(ticker())
    writing = asyncio.create_task(write())
    await asyncio.sleep(0.3)
    assert not writing.done()  # it waits for the lock...
    assert ticks >= 10  # ...while the loop keeps running
    released = time.monotonic()
    other.execute("INSERT INTO t VALUES (2)")
    other.execute("COMMIT")
    assert await asyncio.wait_for(writing, 5) >= released
    running.cancel()
    async with engine.connect() as conn:
        values = (await conn.execute(text("SELECT v FROM t ORDER BY v"))).scalars().all()
    assert values == [1, 2]
    # The failed attempt left the connection waiting as long as configured for later writes.
    async with engine.connect() as conn:
        busy = (await conn.execute(text("PRAGMA busy_timeout"))).scalar_one()
    assert busy == 30_000
    other.close()
    await engine.dispose()


async def test_the_writer_checkpoints_its_wal(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    engine = create_engine(f"sqlite:///{path}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (v TEXT)"))
        assert (await conn.execute(text("PRAGMA wal_autocheckpoint"))).scalar_one() == 0
    reader = sqlite3.connect(path)
    size_before = 0
    for i in range(sqlite_inline.CHECKPOINT_EVERY * 2 + 5):
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO t VALUES (:v)"), {"v": "x" * 2000 + str(i)})
        if i == sqlite_inline.CHECKPOINT_EVERY // 2:
            # No checkpoint yet: the rows are in the WAL, not in the database file.
            size_before = path.stat().st_size
            assert size_before < 50 * 2000
    # Checkpoints (on a connection of their own, in a worker thread, while the writer went on
    # committing) copied the rows into the database file itself.
    checkpoints = sqlite_inline.checkpoints_of(str(path))
    assert checkpoints is not None
    await checkpoints.idle()
    assert path.stat().st_size > size_before + sqlite_inline.CHECKPOINT_EVERY * 2000
    assert reader.execute("SELECT count(*) FROM t").fetchone() == (
        sqlite_inline.CHECKPOINT_EVERY * 2 + 5,
    )
    reader.close()
    await engine.dispose()


async def test_statement_journals_and_temporary_tables_stay_in_memory(tmp_path: Path) -> None:
    """A multi-row INSERT inside a request's savepoint (a movement's postings) opens a statement
    journal; on a file it cost the statement 30 µs of system calls (decision 0023). Every
    connection, the writer's and the reads', keeps it in memory."""
    engine = create_engine(f"sqlite:///{tmp_path / 'm.db'}")
    reads = create_read_engine(f"sqlite:///{tmp_path / 'm.db'}")
    for each in (engine, reads):
        async with each.connect() as conn:
            assert (await conn.execute(text("PRAGMA temp_store"))).scalar_one() == 2  # MEMORY
    await reads.dispose()
    await engine.dispose()


async def test_prepared_statements_that_may_wait_keep_the_waiting_cursor(tmp_path: Path) -> None:
    """Decision 0029: a prepared statement gets the `sqlite3` cursor itself only when it cannot
    wait for another connection's lock (a SELECT, or anything while the writer holds the lock);
    a write outside the writer's transaction keeps the cursor that waits on a worker thread."""
    engine = create_engine(f"sqlite:///{tmp_path / 'c.db'}")
    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        inline = raw.dbapi_connection
        assert isinstance(inline, sqlite_inline.InlineConnection)
        await conn.rollback()  # the connect's own BEGIN IMMEDIATE: the lock is let go
        assert not inline.holds_write_lock()
        assert type(inline.direct_cursor(reads=True)) is sqlite3.Cursor
        assert isinstance(inline.direct_cursor(reads=False), sqlite_inline.InlineCursor)
        inline.execute("BEGIN IMMEDIATE")  # on the `sqlite3` connection under it
        assert inline.holds_write_lock()
        assert type(inline.direct_cursor(reads=False)) is sqlite3.Cursor
        inline.execute("ROLLBACK")
    await engine.dispose()


async def test_a_new_database_has_small_pages_and_an_existing_one_keeps_its_own(
    tmp_path: Path,
) -> None:
    """A new database is made of 2 KiB pages (decision 0033); one made before, of SQLite's
    default 4 KiB, is opened and written as it is."""
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    existing = sqlite3.connect(old, isolation_level=None)
    existing.execute("CREATE TABLE t (v INTEGER)")
    existing.close()
    for path, size in ((new, PAGE_SIZE), (old, 4096)):
        engine = create_engine(f"sqlite:///{path}")
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE IF NOT EXISTS t (v INTEGER)"))
            await conn.execute(text("INSERT INTO t VALUES (1)"))
        async with engine.connect() as conn:
            assert (await conn.execute(text("PRAGMA page_size"))).scalar_one() == size
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == 1
            assert (await conn.execute(text("PRAGMA journal_mode"))).scalar_one() == "wal"
        await engine.dispose()
