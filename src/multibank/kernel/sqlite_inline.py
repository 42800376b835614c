"""SQLite reads without a thread hop: the read engine's driver (decision 0014).

aiosqlite runs every call on a thread of its own and hands the result back to the event loop:
each statement of a read costs several thread switches and GIL hand-offs, about as much CPU as
the rest of the request. Under WAL a `SELECT` never waits for a lock (the writer does not block
readers), and one indexed lookup takes microseconds, so the read engine runs its `SELECT`s
inline, on the event loop's thread, through the standard `sqlite3` module.

A statement that writes (a read's session renewal, a due IBAN allocation) may wait for the
write lock, which this process's own writer may hold across an `await`: run inline it would
block the loop that the writer needs to finish, so it goes to a worker thread and the loop
waits for it as for aiosqlite.
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

READ_ONLY_VERBS = ("SELECT", "WITH", "PRAGMA", "EXPLAIN", "VALUES")


def _reads_only(sql: str) -> bool:
    head = sql.lstrip()[:8].upper()
    return head.startswith(READ_ONLY_VERBS) and " RETURNING " not in sql.upper()


class InlineCursor:
    """A `sqlite3.Cursor` whose writes run on a worker thread; everything else is delegated."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] = ()) -> InlineCursor:
        if _reads_only(sql):
            self._cursor.execute(sql, parameters)
        else:
            await_(asyncio.to_thread(self._cursor.execute, sql, parameters))
        return self

    def executemany(self, sql: str, rows: Sequence[Any]) -> InlineCursor:
        await_(asyncio.to_thread(self._cursor.executemany, sql, rows))
        return self

    async def _async_soft_close(self) -> None:
        """What SQLAlchemy's asyncio layer calls once a result is fetched: nothing to hand back."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


class InlineConnection:
    """A `sqlite3.Connection` handing out `InlineCursor`s."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def cursor(self) -> InlineCursor:
        return InlineCursor(self._connection.cursor())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_connection":
            object.__setattr__(self, name, value)
        else:
            setattr(self._connection, name, value)


class InlineDBAPI:
    """The `sqlite3` module, except that `connect` wraps its connection."""

    def connect(self, *args: Any, **kwargs: Any) -> InlineConnection:
        return InlineConnection(sqlite3.connect(*args, **kwargs))

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
