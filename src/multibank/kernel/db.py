"""Engine, ORM base and the per-request unit of work (the request owns the transaction)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar

from sqlalchemy import BigInteger, Integer, MetaData, event, exc, text
from sqlalchemy.engine import Connection, CursorResult, Result, Row, make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.sql import Executable

from multibank.kernel.sqlite_driver import InlineSQLite

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


# The type of a table's own id (time-ordered 64-bit, kernel/ids.py). On SQLite a primary key
# declared exactly INTEGER is the table's rowid: a row is found by its id in one B-tree, and an
# INSERT writes no separate index of ids (BIGINT made each a table plus a unique index). On
# PostgreSQL a bigint, as every other integer (decision 0030, migration 0015).
ID = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {int: BigInteger}


# The drivers a URL may name: `normalise_url` turns each into asyncpg or aiosqlite, the two the
# server runs on (and its migrations, SQL and tests are written for). The aiosqlite dialect's
# connections are stdlib sqlite3 ones run on the loop's thread (kernel/sqlite_driver.py).
SUPPORTED_DRIVERS = frozenset(
    {
        "postgresql",
        "postgres",
        "postgresql+asyncpg",
        "postgresql+psycopg2",
        "sqlite",
        "sqlite+aiosqlite",
    }
)


def check_url(url: str) -> None:
    """Raises ValueError, in one line naming what is supported, unless `url` is a database URL
    of PostgreSQL or SQLite (`Settings` checks MULTIBANK_DATABASE_URL with it)."""
    supported = "PostgreSQL (postgresql://USER@HOST:PORT/NAME) or SQLite (sqlite:///PATH)"
    try:
        u = make_url(url)
    except (exc.ArgumentError, ValueError):
        raise ValueError(f"not a database URL; multibank runs on {supported}") from None
    if u.drivername not in SUPPORTED_DRIVERS:
        raise ValueError(f"{u.drivername!r} is not supported; multibank runs on {supported}")


def normalise_url(url: str) -> str:
    """Accept plain `postgresql://` and `sqlite:///` URLs and pick the async drivers."""
    u = make_url(url)
    if u.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        u = u.set(drivername="postgresql+asyncpg")
    elif u.drivername == "sqlite":
        u = u.set(drivername="sqlite+aiosqlite")
    return u.render_as_string(hide_password=False)


BUSY_TIMEOUT_S = 30  # how long an SQLite statement waits for the write lock (sqlite_driver.py)
PAGE_SIZE = 2048  # the page size of a new SQLite database
# SQLite: connections for read requests (WAL lets them read beside the writer). A read whose
# session renewal waits for the write lock holds its connection meanwhile: with four, four such
# renewals made every read wait (decision 0022). The pool opens them only when all are in use.
READERS = 16


def _sqlite_pragmas(dbapi_conn: Any, *more: str) -> None:
    """Every SQLite connection: autocommit at the driver (SQLAlchemy says BEGIN, see the
    `begin` listener of `create_engine`: SQLAlchemy's documented recipe for SQLite's own
    transaction control), no wait for a lock in SQLite itself (the driver waits, without
    stopping the loop: kernel/sqlite_driver.py), foreign keys enforced, temporary data in
    memory; `more` for the writer (page size of a new file, WAL, synchronous)."""
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    for pragma in (
        "PRAGMA busy_timeout=0",
        "PRAGMA foreign_keys=ON",
        "PRAGMA temp_store=MEMORY",
        *more,
    ):
        cur.execute(pragma)
    cur.close()


def create_engine(
    url: str, echo: bool = False, pool_size: int = 5, pool_timeout: float = 10
) -> AsyncEngine:
    url = normalise_url(url)
    if url.startswith("sqlite"):
        # SQLite has one writer at a time: one writing connection per process, so write
        # transactions queue for it in the pool (first come, first served) instead of spinning
        # for the lock; other processes' transactions are waited for up to BUSY_TIMEOUT_S.
        # BEGIN IMMEDIATE takes the write lock up front, so two transactions never deadlock
        # upgrading a read lock.
        engine = create_async_engine(
            url,
            module=InlineSQLite(BUSY_TIMEOUT_S),
            echo=echo,
            pool_size=1,
            max_overflow=0,
            pool_timeout=60,
        )

        @event.listens_for(engine.sync_engine, "connect")
        def on_connect(dbapi_conn: Any, _record: Any) -> None:
            # A new database is made of 2 KiB pages (a database that exists keeps its size);
            # WAL lets the read connections read while this one writes.
            _sqlite_pragmas(
                dbapi_conn,
                f"PRAGMA page_size={PAGE_SIZE}",
                "PRAGMA journal_mode=WAL",
                "PRAGMA synchronous=NORMAL",
            )

        @event.listens_for(engine.sync_engine, "begin")
        def on_begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    # PostgreSQL: a fixed pool per process (no overflow), so the connections a deployment needs
    # are known in advance: processes x pool size (README). A request that waits longer than
    # `pool_timeout` for a connection answers 503 with Retry-After (api/errors.py). A
    # connection that died is found at its next use and fails that request with 503; its pool
    # replaces it (SQLAlchemy's disconnect handling). Statements are bound parameters through
    # asyncpg's protocol-level prepared statements, never SQL-level PREPARE: behind PgBouncer in
    # transaction mode the URL's `?prepared_statement_cache_size=0` turns the cache off, and each
    # statement's name is unique (SQLAlchemy's asyncpg dialect, "Prepared Statement Name with
    # PGBouncer"), so two processes sharing a server connection never clash on one.
    connect_args: dict[str, Any] = {"prepared_statement_name_func": _statement_name}
    if behind_pooler(url):
        # asyncpg's own statement cache (its `executemany` names and keeps statements) would
        # outlive the transaction, and so the server connection, they were prepared on.
        connect_args["statement_cache_size"] = 0
    return create_async_engine(
        url,
        echo=echo,
        connect_args=connect_args,
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=pool_timeout,
        skip_autocommit_rollback=True,  # the read requests' connections (autocommit)
    )


def behind_pooler(url: str) -> bool:
    """PostgreSQL through a transaction pooler (PgBouncer): the URL turns the dialect's
    statement cache off (`?prepared_statement_cache_size=0`), as SQLAlchemy documents for one."""
    parsed = make_url(normalise_url(url))
    return parsed.get_backend_name() == "postgresql" and (
        parsed.query.get("prepared_statement_cache_size") == "0"
    )


def _statement_name() -> str:
    return f"__asyncpg_{uuid.uuid4()}__"


def create_read_engine(url: str, echo: bool = False, connections: int = READERS) -> AsyncEngine:
    """SQLite only: connections for read requests, in autocommit (no BEGIN IMMEDIATE), so reads
    run side by side under WAL instead of queueing for the one writing connection. A statement
    that writes (a session renewal) takes the write lock for itself alone."""
    engine = create_async_engine(
        normalise_url(url),
        module=InlineSQLite(BUSY_TIMEOUT_S),
        echo=echo,
        pool_size=connections,
        max_overflow=0,
        pool_timeout=60,
        pool_use_lifo=True,  # the last returned first: its pages are in its cache
        isolation_level="AUTOCOMMIT",
        skip_autocommit_rollback=True,  # autocommit has nothing to roll back on return
    )

    @event.listens_for(engine.sync_engine, "connect")
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        _sqlite_pragmas(dbapi_conn)

    return engine


class Database:
    """The server's database: a write engine, whose transactions the write requests and the
    jobs own (`sessionmaker`, `transaction`), and a read engine in autocommit for read requests
    (`read_sessionmaker`): a read is its statements alone, no BEGIN or COMMIT, and on SQLite it
    does not queue behind the writer (decision 0013)."""

    def __init__(
        self, url: str, echo: bool = False, pool_size: int = 5, pool_timeout: float = 10
    ) -> None:
        self.url = normalise_url(url)
        self.engine = create_engine(self.url, echo, pool_size, pool_timeout)
        self.sessionmaker = async_sessionmaker(self.engine, expire_on_commit=False)
        if self.behind_pooler:
            # asyncpg prepares a statement and runs it in two exchanges; outside a transaction a
            # transaction-pooling PgBouncer may give them two server connections, and the second
            # does not know the statement. So reads run in transactions there, like writes.
            self.read_engine = self.engine
        elif not self.is_sqlite:
            # The same pool: a connection lent for a read runs in autocommit until returned.
            self.read_engine = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        elif self.in_memory:
            self.read_engine = self.engine  # one private database: one connection sees it
        else:
            self.read_engine = create_read_engine(self.url, echo)
        self.read_sessionmaker = async_sessionmaker(self.read_engine, expire_on_commit=False)

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    @property
    def behind_pooler(self) -> bool:
        return behind_pooler(self.url)

    @property
    def in_memory(self) -> bool:
        """A private in-memory SQLite database (the URL may spell `:memory:` percent-encoded)."""
        url = make_url(self.url)
        return self.is_sqlite and (
            url.database in (None, "", ":memory:") or "mode=memory" in str(url.query)
        )

    async def at_once(self, statement: Executable, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        """One statement that is a whole write on its own (a login's new session), committed
        with the rows it returns, without a session. On PostgreSQL in autocommit: the statement
        alone, no BEGIN or COMMIT (in a transaction behind a pooler). On SQLite in a transaction
        of the writer's."""
        if self.is_sqlite or self.behind_pooler:
            async with self.engine.begin() as conn:
                return (await conn.execute(statement, params)).all()
        async with self.read_engine.connect() as conn:
            return (await conn.execute(statement, params)).all()

    async def ping(self) -> None:
        """Raises unless the database answers a `SELECT 1` on a connection of the writer's pool."""
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A unit of work outside a request (CLI, jobs): commit on success, roll back on error."""
        async with self.sessionmaker() as session:
            try:
                yield session
                await session.commit()
            except BaseException:
                await session.rollback()
                raise

    async def dispose(self) -> None:
        if self.read_engine is not self.engine and self.is_sqlite:
            await self.read_engine.dispose()
        await self.engine.dispose()


def dialect_name(db: AsyncSession) -> str:
    """The name of the dialect the session's statements run on ("postgresql", "sqlite")."""
    return db.get_bind().dialect.name


def changed(result: Result[Any]) -> int:
    """The rows an UPDATE, INSERT or DELETE changed (its result is a cursor's result)."""
    assert isinstance(result, CursorResult)
    return int(result.rowcount)
