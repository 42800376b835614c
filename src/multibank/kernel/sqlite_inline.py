"""SQLite without a thread hop per statement: the driver of both engines (decision 0014).

aiosqlite runs every call on a thread of its own and hands the result back to the event loop:
each statement costs several thread switches and GIL hand-offs, about as much CPU as the rest
of a read, and a fee charge's dozen statements cost more than its work. Only a statement that
may wait for a lock needs a thread; the others take microseconds and run inline, on the event
loop's thread, through the standard `sqlite3` module:

- under WAL a `SELECT` never waits (the writer does not block readers): inline;
- inside a transaction begun with `BEGIN IMMEDIATE` the connection already holds the write
  lock, and under WAL its `INSERT`s and `UPDATE`s wait for nobody: inline;
- what takes the write lock may wait for another connection (of this process, across an
  `await`, or of another process, up to `busy_timeout`). `BEGIN IMMEDIATE` is first tried
  inline without waiting (`busy_timeout` 0 for that one statement); only when the lock is taken
  does it go to a worker thread, which waits as before. An autocommit write (a read's session
  renewal) always goes to a thread.
- the writer's `COMMIT` (and `ROLLBACK`) run inline: under WAL with `synchronous=NORMAL` a
  commit appends its pages to the WAL and syncs nothing. What can take long is a checkpoint,
  so the writer never checkpoints on its own (`wal_autocheckpoint=0`): every
  `CHECKPOINT_EVERY`th commit starts a passive checkpoint on a connection of its own, in a
  worker thread, while the writer goes on (`Checkpoints`).

A thread hop costs the loop 130-150 µs of CPU inside a transaction; BEGIN and COMMIT inline
take a write request's transaction from ≈ 500 µs to ≈ 200 µs (decision 0020).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from typing import Any

from sqlalchemy import pool
from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import URL
from sqlalchemy.util.concurrency import await_

from multibank.kernel.db import BUSY_TIMEOUT_MS

READ_ONLY_VERBS = ("SELECT", "WITH", "PRAGMA", "EXPLAIN", "VALUES")
# The writer's WAL is checkpointed after this many commits: a commit writes a few pages, so the
# WAL stays within a few thousand pages, as with SQLite's own default of 1000 pages.
CHECKPOINT_EVERY = 200


def _reads_only(sql: str) -> bool:
    head = sql.lstrip()[:8].upper()
    return head.startswith(READ_ONLY_VERBS) and " RETURNING " not in sql.upper()


async def _ready() -> None:
    return None


def _awaited() -> None:
    """Awaits a coroutine that is already done: no trip through the event loop, two greenlet
    switches. SQLAlchemy's `AsyncConnection.execute` refuses a driver that never awaits
    (`AwaitRequired`); this tells it the statement ran in its asyncio context."""
    await_(_ready())


class InlineCursor:
    """A `sqlite3.Cursor` whose statements that may wait run on a worker thread.

    `told`: SQLAlchemy's `AsyncConnection.execute` is told that an inline statement ran in its
    asyncio context (`_awaited`); a prepared statement's caller (kernel/direct.py) asks
    nothing, and is spared the two greenlet switches."""

    def __init__(self, cursor: sqlite3.Cursor, owner: InlineConnection, told: bool = True) -> None:
        self._cursor = cursor
        self._owner = owner
        self._told = told

    def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] = ()) -> InlineCursor:
        if self._owner.holds_write_lock() or _reads_only(sql):
            if self._told:
                _awaited()
            self._cursor.execute(sql, parameters)
        elif sql == "BEGIN IMMEDIATE" and self._begin_at_once():
            _awaited()
        else:
            await_(asyncio.to_thread(self._cursor.execute, sql, parameters))
        return self

    def _begin_at_once(self) -> bool:
        """BEGIN IMMEDIATE if the write lock is free now; False (nothing begun) if another
        connection holds it, for the caller to wait in a thread."""
        cursor = self._cursor
        cursor.execute("PRAGMA busy_timeout=0")
        try:
            cursor.execute("BEGIN IMMEDIATE")
            return True
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise
            return False
        finally:
            cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")

    def executemany(self, sql: str, rows: Sequence[Any]) -> InlineCursor:
        if self._owner.holds_write_lock():
            if self._told:
                _awaited()
            self._cursor.executemany(sql, rows)
        else:
            await_(asyncio.to_thread(self._cursor.executemany, sql, rows))
        return self

    async def _async_soft_close(self) -> None:
        """What SQLAlchemy's asyncio layer calls once a result is fetched: nothing to hand back."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


class InlineConnection:
    """A `sqlite3.Connection` handing out `InlineCursor`s.

    `immediate`: set on the writer engine's connections, whose every transaction begins with
    `BEGIN IMMEDIATE` (kernel/db.py): inside one, the connection holds the write lock.
    """

    immediate = False

    def __init__(self, connection: sqlite3.Connection, checkpoints: Checkpoints | None) -> None:
        self._connection = connection
        self._commits = 0
        self._checkpoints = checkpoints
        # For kernel/direct.py: the connection itself, and a cursor of its own, never closed,
        # for what runs inline (`direct_cursor`'s cases): making and closing one per statement
        # cost a fee charge's dozen statements more than their bookkeeping (decision 0033).
        self.raw = connection
        self.kept = connection.cursor()

    def holds_write_lock(self) -> bool:
        return self.immediate and self._connection.in_transaction

    def cursor(self) -> InlineCursor:
        return InlineCursor(self._connection.cursor(), self)

    def direct_cursor(self, reads: bool = False) -> sqlite3.Cursor | InlineCursor:
        """A cursor for prepared statements (kernel/direct.py), which need no `_awaited`.
        `reads`: the statement is a SELECT. A statement that cannot wait (a SELECT, or any
        statement while this connection holds the write lock) gets the `sqlite3` cursor
        itself: the wrapper's checks, made here once, cost a statement ≈ 3 µs more than
        SQLite's own work on a fee's dozen statements (decision 0029)."""
        if reads or (self.immediate and self._connection.in_transaction):
            return self._connection.cursor()
        return InlineCursor(self._connection.cursor(), self, told=False)

    def commit_awaits(self) -> bool:
        """Whether `commit` would await (and so needs a greenlet): a commit of another
        connection than the writer, or the writer's commit that copies what a checkpoint left
        (`Checkpoints.catch_up`)."""
        if not self._connection.in_transaction:
            return False
        if not self.immediate:
            return True
        return self._checkpoints is not None and self._checkpoints.catch_up

    def commit(self) -> None:
        if not self._connection.in_transaction:
            return
        if not self.immediate:
            await_(asyncio.to_thread(self._connection.commit))
            return
        self._connection.commit()
        checkpoints = self._checkpoints
        if checkpoints is None:
            return
        self._commits += 1
        if checkpoints.catch_up:
            # What was committed while the checkpoint ran, copied now while this connection
            # writes nothing: the WAL is then wholly in the database file, and the next write
            # starts it over (otherwise it grows for good, and every commit gets slower).
            checkpoints.catch_up = False
            try:
                await_(asyncio.to_thread(self._checkpoint_here))
            except asyncio.CancelledError:
                # The commit is done, and must not be told as failed: the request's task is
                # cancelled at its next await instead (the next catch-up copies what is left).
                task = asyncio.current_task()
                if task is not None:
                    task.cancel()
        if self._commits % CHECKPOINT_EVERY == 0:
            checkpoints.start()

    def _checkpoint_here(self) -> None:
        self._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").close()

    def rollback(self) -> None:
        if not self._connection.in_transaction:
            return
        if self.immediate:  # under WAL a rollback forgets the transaction's pages: no I/O
            _awaited()
            self._connection.rollback()
        else:
            await_(asyncio.to_thread(self._connection.rollback))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("_connection", "immediate", "_commits", "_checkpoints", "raw", "kept"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._connection, name, value)


class Checkpoints:
    """The WAL checkpoints of one database file, run on a connection of their own in a worker
    thread, one at a time.

    A PASSIVE checkpoint copies the frames no reader still needs into the database file and
    waits for nobody, and under WAL it may run while the writer commits: the writer goes on
    committing meanwhile (decision 0021). Run on the writer's own connection it held that
    connection, so every write waited for it (10-40 ms, every `CHECKPOINT_EVERY` commits).

    The WAL starts over only once it is wholly copied, which a checkpoint racing the writer
    never achieves: when one ends, `catch_up` asks the writer to copy, after its next commit,
    the few frames written meanwhile (`InlineConnection.commit`)."""

    def __init__(self, database: str, uri: bool) -> None:
        self._database = database
        self._uri = uri
        self._running: asyncio.Future[None] | None = None
        self.catch_up = False

    def start(self) -> None:
        """Starts a checkpoint unless one is running. On the event loop's thread."""
        if self._running is None or self._running.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no event loop (a synchronous caller): checkpoint here
                self._checkpoint()
                return
            self._running = loop.run_in_executor(None, self._checkpoint)
            self._running.add_done_callback(self._ended)

    def _ended(self, _: asyncio.Future[None]) -> None:
        self.catch_up = True

    async def idle(self) -> None:
        """Waits for the running checkpoint, if any (tests)."""
        if self._running is not None:
            await asyncio.shield(self._running)

    def _checkpoint(self) -> None:
        try:
            connection = sqlite3.connect(self._database, uri=self._uri, isolation_level=None)
        except sqlite3.Error:  # the database went away (a test's file): nothing to copy
            return
        try:
            connection.execute("PRAGMA wal_checkpoint(PASSIVE)").close()
        except sqlite3.Error:  # another checkpoint, or the file went away: the next one copies
            pass
        finally:
            connection.close()


# One checkpointer per database file, shared by that file's connections in this process.
_CHECKPOINTS: dict[str, Checkpoints] = {}


def checkpoints_of(database: str) -> Checkpoints | None:
    return _CHECKPOINTS.get(database)


class InlineDBAPI:
    """The `sqlite3` module, except that `connect` wraps its connection."""

    def connect(self, *args: Any, **kwargs: Any) -> InlineConnection:
        database = str(args[0] if args else kwargs.get("database", ""))
        uri = bool(kwargs.get("uri"))
        checkpoints = None
        if database and database != ":memory:" and "mode=memory" not in database:
            checkpoints = _CHECKPOINTS.get(database)
            if checkpoints is None:
                checkpoints = _CHECKPOINTS[database] = Checkpoints(database, uri)
        return InlineConnection(sqlite3.connect(*args, **kwargs), checkpoints)

    def __getattr__(self, name: str) -> Any:
        return getattr(sqlite3, name)


class SQLiteInlineDialect(SQLiteDialect_pysqlite):
    """`sqlite+multibank_inline://`: pysqlite, usable from `create_async_engine`."""

    driver = "multibank_inline"
    is_async = True
    supports_statement_cache = True

    @classmethod
    def import_dbapi(cls) -> Any:
        return InlineDBAPI()

    @classmethod
    def get_pool_class(cls, url: URL) -> type[pool.Pool]:
        # Waiting for a pooled connection must await, not block the loop.
        return pool.AsyncAdaptedQueuePool


registry.register("sqlite.multibank_inline", __name__, "SQLiteInlineDialect")
