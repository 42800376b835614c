"""SQLite on the event loop's own thread: the stdlib `sqlite3` driver handed to SQLAlchemy's
aiosqlite dialect as its DBAPI module (`create_engine`'s public `module` argument), adapted with
the asyncio connector SQLAlchemy gives dialect authors (`sqlalchemy.connectors.asyncio`), so
every call runs inline (decision 0065).

aiosqlite hands each cursor, execute, fetch and close to a thread of its own and back: four
wake-ups per statement, each waiting a turn of the loop behind every request in flight. That
was most of a sandbox read's time and its tail, and a write holding the only writing connection
waited for those turns once per statement, behind the reads (issue 44). Here the adapter awaits
coroutines that finish without suspending: it gets each answer at once, with no thread and no
turn of the loop. A statement of the sandbox is an indexed, bounded B-tree walk of a few
microseconds, much cheaper than one hand-over.

SQLite's own busy handler would wait for a lock by sleeping in the statement, and so stop the
loop: if the lock's holder is a transaction of this same process waiting on the loop (a read's
session renewal meeting the writer, an engine of another application instance in a test), it
waits for the whole timeout. So the connections wait for no lock themselves (`timeout=0`) and a
statement refused with SQLITE_BUSY is tried again here after an asynchronous sleep, a little
longer each time, until the same overall timeout: the loop goes on meanwhile. Trying again is
what SQLite's busy handler does too; a statement refused as busy did nothing (the writer takes
its lock at BEGIN IMMEDIATE and reads never upgrade, so no transaction is half done by it).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from sqlalchemy.connectors.asyncio import AsyncAdapt_dbapi_connection, AsyncAdapt_dbapi_module

T = TypeVar("T")
FIRST_WAIT_S = 0.001  # the first sleep on a busy database, doubled up to LONGEST_WAIT_S
LONGEST_WAIT_S = 0.05


def busy(error: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY (or one of its extended codes): the lock is another connection's."""
    code = getattr(error, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_BUSY


async def unless_busy(timeout_s: float, call: Callable[..., T], *args: Any) -> T:
    """`call(*args)`, run again after a sleep while SQLite answers that it is busy, for up to
    `timeout_s` in all; then the busy error stands ("database is locked")."""
    wait = FIRST_WAIT_S
    deadline: float | None = None
    while True:
        try:
            return call(*args)
        except sqlite3.OperationalError as error:
            if not busy(error):
                raise
            now = time.monotonic()
            if deadline is None:
                deadline = now + timeout_s
            if now >= deadline:
                raise
            await asyncio.sleep(min(wait, deadline - now))
            wait = min(wait * 2, LONGEST_WAIT_S)


class InlineCursor:
    """An asyncio-shaped cursor over a `sqlite3.Cursor`: each coroutine finishes at once, unless
    the database is busy (`unless_busy`)."""

    def __init__(self, cursor: sqlite3.Cursor, busy_timeout_s: float) -> None:
        self.cursor = cursor
        self.busy_timeout_s = busy_timeout_s

    async def __aenter__(self) -> InlineCursor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cursor.close()

    @property
    def description(self) -> Any:
        return self.cursor.description

    @property
    def rowcount(self) -> int:
        return self.cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self.cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self.cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self.cursor.arraysize = value

    async def execute(self, sql: str, parameters: Any = ()) -> InlineCursor:
        await unless_busy(self.busy_timeout_s, self.cursor.execute, sql, parameters)
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> InlineCursor:
        # Materialised once: a busy first try must not have consumed an iterator.
        rows = list(parameters)
        await unless_busy(self.busy_timeout_s, self.cursor.executemany, sql, rows)
        return self

    async def fetchone(self) -> Any:
        return self.cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self.cursor.fetchmany(self.cursor.arraysize if size is None else size)

    async def fetchall(self) -> list[Any]:
        return self.cursor.fetchall()

    async def close(self) -> None:
        self.cursor.close()


class InlineConnection:
    """An asyncio-shaped connection over a `sqlite3.Connection`: each coroutine finishes at
    once, unless the database is busy (`unless_busy`)."""

    def __init__(self, connection: sqlite3.Connection, busy_timeout_s: float) -> None:
        self.connection = connection
        self.busy_timeout_s = busy_timeout_s

    def cursor(self) -> InlineCursor:
        return InlineCursor(self.connection.cursor(), self.busy_timeout_s)

    async def commit(self) -> None:
        await unless_busy(self.busy_timeout_s, self.connection.commit)

    async def rollback(self) -> None:
        self.connection.rollback()

    async def close(self) -> None:
        self.connection.close()


class AdaptedInlineConnection(AsyncAdapt_dbapi_connection):
    """SQLAlchemy's asyncio adapter over an `InlineConnection`, with the two things pysqlite's
    dialect asks of a sqlite3 connection beyond the DBAPI: its `isolation_level` (None:
    autocommit at the driver) and `create_function`."""

    def __init__(self, dbapi: Any, connection: InlineConnection) -> None:
        # The connector's protocol is structural and untyped beyond these methods.
        adapted: Any = connection
        super().__init__(dbapi, adapted)
        self.raw = connection.connection

    @property
    def isolation_level(self) -> str | None:
        return self.raw.isolation_level

    @isolation_level.setter
    def isolation_level(self, value: Any) -> None:  # None, "" or a BEGIN mode, as sqlite3 takes
        self.raw.isolation_level = value

    def create_function(self, *args: Any, **kwargs: Any) -> None:
        self.raw.create_function(*args, **kwargs)


class InlineSQLite(AsyncAdapt_dbapi_module):
    """The DBAPI module given to SQLAlchemy's aiosqlite dialect: sqlite3's names, connections
    that run inline."""

    paramstyle = "qmark"
    has_stop = False  # no aiosqlite thread to stop: a connection ends by closing it

    def __init__(self, busy_timeout_s: float) -> None:
        super().__init__(sqlite3, dbapi_module=sqlite3)
        self.busy_timeout_s = busy_timeout_s
        for name in (
            "DatabaseError",
            "Error",
            "IntegrityError",
            "InterfaceError",
            "NotSupportedError",
            "OperationalError",
            "ProgrammingError",
            "sqlite_version",
            "sqlite_version_info",
            "PARSE_COLNAMES",
            "PARSE_DECLTYPES",
            "Binary",
        ):
            setattr(self, name, getattr(sqlite3, name))

    def connect(self, *args: Any, **kwargs: Any) -> AdaptedInlineConnection:
        # Used by one request at a time (the pool's), from whatever thread runs the loop that
        # made the engine (a test's loop may run in a thread of its own).
        kwargs["check_same_thread"] = False
        kwargs["timeout"] = 0  # SQLite's busy handler off: `unless_busy` waits without blocking
        raw = sqlite3.connect(*args, **kwargs)
        return AdaptedInlineConnection(self, InlineConnection(raw, self.busy_timeout_s))
