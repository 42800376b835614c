"""Engine, ORM base and the per-request unit of work (the request owns the transaction)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar, TypeVar

from sqlalchemy import BigInteger, MetaData, event
from sqlalchemy.engine import Connection, Engine, Row, make_url
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.pool import AsyncAdaptedQueuePool, PoolProxiedConnection
from sqlalchemy.sql import Executable
from sqlalchemy.util.concurrency import await_, greenlet_spawn
from sqlalchemy.util.queue import AsyncAdaptedQueue, Empty

from multibank.kernel.direct import Direct, in_session

T = TypeVar("T")

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {int: BigInteger}


def normalise_url(url: str) -> str:
    """Accept plain `postgresql://` and `sqlite:///` URLs and pick the async drivers."""
    u = make_url(url)
    if u.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        u = u.set(drivername="postgresql+asyncpg")
    elif u.drivername == "sqlite":
        u = u.set(drivername="sqlite+aiosqlite")
    return u.render_as_string(hide_password=False)


class FairQueue(AsyncAdaptedQueue[Any]):
    """The pool's free connections, handed to waiters in the order they came.

    SQLAlchemy's asyncio queue wakes its first waiter when a connection comes back, but a
    request arriving meanwhile takes it first, and the woken waiter queues again at the back:
    under load some requests waited many times their turn (p99 14x p50 with 16 clients on a
    pool of 5, decision 0014). Here a returned connection goes straight to the longest waiter,
    and nobody takes a free connection while others wait.
    """

    def __init__(self, maxsize: int = 0, use_lifo: bool = False) -> None:
        super().__init__(maxsize, use_lifo)
        self._waiters: deque[asyncio.Future[Any]] = deque()

    def put_nowait(self, item: Any) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(item)
                return
        super().put_nowait(item)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self.put_nowait(item)  # the pool holds at most its size: a return never waits

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        while self._waiters and self._waiters[0].done():
            self._waiters.popleft()
        if not self._waiters:
            try:
                return super().get_nowait()
            except Empty:
                if not block:
                    raise
        elif not block:
            raise Empty()
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await_(self._wait(waiter, timeout))
        except TimeoutError as err:
            raise Empty() from err

    async def _wait(self, waiter: asyncio.Future[Any], seconds: float | None) -> Any:
        try:
            async with asyncio.timeout(seconds):
                return await waiter
        except BaseException:
            # Timed out or cancelled; a connection handed over meanwhile goes to the next.
            if waiter.done() and not waiter.cancelled():
                self.put_nowait(waiter.result())
            else:
                waiter.cancel()
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            raise


class FairPool(AsyncAdaptedQueuePool):
    _queue_class = FairQueue


BUSY_TIMEOUT_MS = 30_000  # how long an SQLite connection waits for the write lock


def _sqlite_pragmas(dbapi_conn: Any, *more: str) -> None:
    """Every SQLite connection: autocommit at the driver (SQLAlchemy says BEGIN), a 30 s wait
    for the write lock, foreign keys enforced; `more` for the writer (WAL, synchronous)."""
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    busy = f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}"
    for pragma in (busy, "PRAGMA foreign_keys=ON", *more):
        cur.execute(pragma)
    cur.close()


def _inline(url: str) -> str:
    """The SQLite URL with the driver that runs what never waits on the loop's thread."""
    from multibank.kernel import sqlite_inline  # noqa: F401  (registers the driver)

    inline = make_url(normalise_url(url)).set(drivername="sqlite+multibank_inline")
    return inline.render_as_string(hide_password=False)


def create_engine(
    url: str, echo: bool = False, pool_size: int = 5, pool_timeout: float = 10
) -> AsyncEngine:
    url = normalise_url(url)
    if url.startswith("sqlite"):
        # One writer at a time is SQLite's model; BEGIN IMMEDIATE takes the write lock up front so
        # two transactions never deadlock upgrading a read lock, and busy_timeout queues them.
        # Every transaction writes (BEGIN IMMEDIATE), so one connection per process is all SQLite
        # can use: requests queue for it in the pool, first come first served, instead of
        # spinning in SQLite's busy handler. Other processes still wait on busy_timeout.
        # Its statements run inline; BEGIN waits in a thread only if the lock is taken
        # (kernel/sqlite_inline.py).
        engine = create_async_engine(
            _inline(url),
            echo=echo,
            connect_args={"check_same_thread": False},
            poolclass=FairPool,
            pool_size=1,
            max_overflow=0,
            pool_timeout=60,
        )

        @event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Checkpoints are the writer's own, every so many commits (kernel/sqlite_inline.py).
            _sqlite_pragmas(
                dbapi_conn,
                "PRAGMA journal_mode=WAL",
                "PRAGMA synchronous=NORMAL",
                "PRAGMA wal_autocheckpoint=0",
            )
            dbapi_conn.immediate = True  # every transaction of this engine: BEGIN IMMEDIATE

        @event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # On the driver's cursor: through `exec_driver_sql` this cost as much as a
            # statement of the request's own (kernel/direct.py). A write request's `Unit` may
            # have begun the transaction on the pooled connection already.
            dbapi = conn.connection.dbapi_connection
            if dbapi is not None and not dbapi.in_transaction:
                Direct(conn).run_sql("BEGIN IMMEDIATE")

        return engine
    # PostgreSQL: a fixed pool per process (no overflow), so the connections a deployment needs
    # are known in advance: processes x pool size (README). A request that waits longer than
    # `pool_timeout` for a connection answers 503 with Retry-After (api/errors.py).
    return create_async_engine(
        url,
        echo=echo,
        poolclass=FairPool,
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=pool_timeout,
        skip_autocommit_rollback=True,  # the read sessions' connections (autocommit)
        # No pre-ping: it is a round trip on every checkout. A connection the server dropped
        # fails its request with 503 (api/errors.py) and is invalidated; the next one reconnects.
    )


def create_read_engine(url: str, echo: bool = False, connections: int = 4) -> AsyncEngine:
    """SQLite only: connections for read requests, in autocommit (no BEGIN IMMEDIATE), so reads
    run side by side under WAL instead of queueing for the one writing connection. A statement
    that writes (a session renewal) takes the write lock for itself alone."""
    engine = create_async_engine(
        _inline(url),
        echo=echo,
        connect_args={"check_same_thread": False},
        poolclass=FairPool,
        pool_size=connections,
        max_overflow=0,
        pool_timeout=60,
        isolation_level="AUTOCOMMIT",
        skip_autocommit_rollback=True,  # autocommit has nothing to roll back: no thread hop
        pool_reset_on_return=None,
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # The writer checkpoints (kernel/sqlite_inline.py); an autocommit write here never does.
        _sqlite_pragmas(dbapi_conn, "PRAGMA wal_autocheckpoint=0")

    return engine


class Database:
    def __init__(
        self, url: str, echo: bool = False, pool_size: int = 5, pool_timeout: float = 10
    ) -> None:
        self.url = normalise_url(url)
        self.engine = create_engine(self.url, echo, pool_size, pool_timeout)
        self.sessionmaker = async_sessionmaker(self.engine, expire_on_commit=False)
        # Read requests (GET): statements in autocommit, so a read costs no BEGIN and COMMIT
        # round trips, and on SQLite reads do not queue behind the writer (decision 0013).
        if not self.is_sqlite:
            self.read_engine = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        elif ":memory:" in self.url or "mode=memory" in self.url:
            self.read_engine = self.engine  # one private database: one connection sees it
        else:
            self.read_engine = create_read_engine(self.url, echo)
        self.read_sessionmaker = async_sessionmaker(self.read_engine, expire_on_commit=False)

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    async def at_once(self, statement: Executable, params: dict[str, Any]) -> Sequence[Row[Any]]:
        """One statement that commits on its own, with the rows it returns, and no session. For
        a write that is whole in one statement (a login's new session). On PostgreSQL, on a
        connection in autocommit: one round trip, no BEGIN or COMMIT. On SQLite, on the writer:
        its BEGIN IMMEDIATE and COMMIT run on the loop's thread (kernel/sqlite_inline.py), where
        an autocommit write would wait for the lock in a thread."""
        engine = self.engine if self.is_sqlite else self.read_engine
        return await greenlet_spawn(_commit_on, engine.sync_engine, statement, params)

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

    def unit(self) -> Unit:
        """A write request's transaction, begun at its first statement."""
        return Unit(self)

    async def dispose(self) -> None:
        if self.is_sqlite and self.read_engine is not self.engine:
            await self.read_engine.dispose()
        await self.engine.dispose()


async def read_rows(
    session: AsyncSession, statement: Executable, params: dict[str, Any]
) -> Sequence[Row[Any]]:
    """Every row of a read statement (a Core `select` of columns).

    On the session's own connection when it has one, so what its transaction wrote is seen;
    otherwise on a connection of the session's engine taken for this statement alone and given
    back at once. Most reads use the session for nothing else: this skips its transaction,
    connection and close (about half the cost of a one-statement read, decision 0019), and a
    request still holds at most one connection at a time. A write request's `Unit` reads in its
    own transaction."""
    if isinstance(session, Unit):
        return await session.read(statement, params)
    if isinstance(session, LazySession):
        if session.made is None:
            engine = session.engine.sync_engine
            return await greenlet_spawn(_rows_on, engine, statement, params)
        session = session.made
    if session.sync_session.in_transaction():
        return (await session.execute(statement, params)).all()
    engine = session.bind
    if not isinstance(engine, AsyncEngine):  # pragma: no cover - sessions are bound to engines
        return (await session.execute(statement, params)).all()
    return await greenlet_spawn(_rows_on, engine.sync_engine, statement, params)


def _commit_on(engine: Engine, statement: Executable, params: dict[str, Any]) -> Sequence[Row[Any]]:
    # On an autocommit engine `begin` and its commit send nothing; on SQLite's writer they are
    # its BEGIN IMMEDIATE and COMMIT.
    with engine.begin() as connection:
        return connection.execute(statement, params).all()


def _rows_on(engine: Engine, statement: Executable, params: dict[str, Any]) -> Sequence[Row[Any]]:
    with engine.connect() as connection:
        return connection.execute(statement, params).all()


def _direct_on(engine: Engine, fn: Callable[..., T], *args: Any) -> T:
    with engine.connect() as connection:
        return fn(Direct(connection), *args)


class LazySession:
    """A read request's session, made on its first use. Most reads never use it (their one
    statement goes through `read_rows`), and making and closing a session costs a read about a
    tenth of its time (decision 0019). Stands in for an `AsyncSession`: any attribute makes the
    session and is the session's."""

    __slots__ = ("_maker", "made")

    def __init__(self, maker: async_sessionmaker[AsyncSession]) -> None:
        self._maker = maker
        self.made: AsyncSession | None = None

    @property
    def engine(self) -> AsyncEngine:
        bind = self._maker.kw["bind"]
        assert isinstance(bind, AsyncEngine)
        return bind

    def __getattr__(self, name: str) -> Any:
        if self.made is None:
            self.made = self._maker()
        return getattr(self.made, name)

    async def run_direct(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(direct, *args)` (kernel/direct.py): on the session's connection once it is made,
        otherwise on a connection taken for `fn` alone, as `read_rows` does."""
        if self.made is not None:
            return await greenlet_spawn(in_session, self.made.sync_session, fn, *args)
        return await greenlet_spawn(_direct_on, self.engine.sync_engine, fn, *args)

    async def close(self) -> None:
        if self.made is not None:
            await self.made.close()


class Unit:
    """A write request's transaction (the request owns it, `api/routing.py`): one pooled
    connection, taken and begun at the first statement, committed or rolled back once.

    The ORM session costs a write request about as much as its work: making it, beginning,
    committing and closing it through the unit of work is ≈ 200 µs of the event loop's CPU on
    SQLite and ≈ 300 µs on PostgreSQL, and a SQLAlchemy `Connection` alone ≈ 50 µs more than
    the pooled DBAPI connection under it (decision 0021). So a request whose statements are all
    prepared (kernel/direct.py: a fee charge, a payment's ledger work) runs them on the pooled
    DBAPI connection: SQLite's `BEGIN IMMEDIATE` first, the asyncpg adapter's transaction at
    its first statement, the driver's COMMIT last.

    What needs SQLAlchemy gets it on the same connection and transaction: `connection` (a
    `Connection` over the pooled one; its BEGIN finds the transaction begun, `create_engine`)
    and the ORM session, made at the first use of any session attribute, which from then on
    controls the transaction (commit, rollback, savepoints) as it always did.

    Stands in for an `AsyncSession`: any attribute it does not define is the session's."""

    __slots__ = ("_db", "_direct", "_inline", "_pooled", "_sa", "info", "made")

    def __init__(self, db: Database) -> None:
        self._db = db
        self._pooled: PoolProxiedConnection | None = None
        self._direct: Direct | None = None
        self._sa: Connection | None = None
        self._inline = db.is_sqlite
        self.made: AsyncSession | None = None
        # The session's `info` (made later, it shares this dict): what a request remembers of
        # its transaction (`ledger.system_account`'s own creations, the auth cache's drops).
        self.info: dict[Any, Any] = {}

    @property
    def bind(self) -> AsyncEngine:
        return self._db.engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    @property
    def session(self) -> AsyncSession:
        """The ORM session of this transaction, made on first use."""
        if self.made is None:
            if self._pooled is None:  # nothing run yet: an ordinary session
                self.made = AsyncSession(self._db.engine, expire_on_commit=False, info=self.info)
            else:
                # On the connection already in use, as the owner of its transaction.
                bound = AsyncConnection(self._db.engine, self._connection())
                self.made = AsyncSession(
                    bound,
                    expire_on_commit=False,
                    info=self.info,
                    join_transaction_mode="control_fully",
                )
        return self.made

    def _connection(self) -> Connection:
        """The SQLAlchemy connection over the pooled one, made once."""
        assert self._pooled is not None
        if self._sa is None:
            self._sa = Connection(self._db.engine.sync_engine, self._pooled)
        return self._sa

    def in_transaction(self) -> bool:
        if self.made is not None:
            return self.made.in_transaction()
        return self._pooled is not None

    def _begun(self) -> Direct:
        """The pooled connection, taken and begun if it was not yet. Inside a greenlet."""
        if self._direct is None:
            engine = self._db.engine.sync_engine
            self._pooled = engine.raw_connection()
            self._direct = Direct(None, self._pooled.dbapi_connection, engine)
            if self._inline:
                self._direct.run_sql("BEGIN IMMEDIATE")  # may wait for another process's lock
        return self._direct

    def _ready(self) -> Direct | None:
        """SQLite's pooled connection while it holds the write lock: a prepared statement then
        runs inline without awaiting anything (kernel/sqlite_inline.py), so it needs no
        greenlet hand-over."""
        if self._inline and self._sa is None and self._direct is not None:
            dbapi = self._pooled.dbapi_connection if self._pooled is not None else None
            if dbapi is not None and dbapi.holds_write_lock():
                return self._direct
        return None

    async def run_direct(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(direct, *args)` in this transaction (kernel/direct.py), in at most one greenlet
        hand-over. `fn` sends prepared statements only (`Direct`'s methods)."""
        if self.made is not None:
            return await greenlet_spawn(in_session, self.made.sync_session, fn, *args)
        ready = self._ready()
        if ready is not None:
            return fn(ready, *args)
        return await greenlet_spawn(self._run, fn, *args)

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return fn(self._begun(), *args)

    async def read(self, statement: Executable, params: dict[str, Any]) -> Sequence[Row[Any]]:
        """A Core statement's rows, in this transaction (`read_rows`)."""
        if self.made is not None:
            return (await self.made.execute(statement, params)).all()
        return await greenlet_spawn(self._read, statement, params)

    def _read(self, statement: Executable, params: dict[str, Any]) -> Sequence[Row[Any]]:
        self._begun()
        return self._connection().execute(statement, params).all()

    async def commit(self, last: Callable[..., object] | None = None, *args: Any) -> None:
        """Commits, after `last(direct, *args)` if given (the request's last statement). Without
        a session that is one hand-over, which also gives the connection back: the request is
        done with it."""
        if self.made is not None:
            if last is not None:
                await self.run_direct(last, *args)
            await self.made.commit()
        elif self._pooled is not None or last is not None:
            await greenlet_spawn(self._finish, last, *args)

    def _finish(self, last: Callable[..., object] | None, *args: Any) -> None:
        try:
            if last is not None:
                last(self._begun(), *args)
            if self._sa is not None and self._sa.in_transaction():
                self._sa.commit()
            if self._pooled is not None:
                self._pooled.commit()  # the driver's own: nothing if SQLAlchemy committed it
        finally:
            self._release()

    async def rollback(self) -> None:
        if self.made is not None:
            await self.made.rollback()
        elif self._pooled is not None:
            await greenlet_spawn(self._undo)

    def _undo(self) -> None:
        if self._sa is not None and self._sa.in_transaction():
            self._sa.rollback()
        if self._pooled is not None:
            self._pooled.rollback()

    async def close(self) -> None:
        """Gives the connection back, rolling back what was not committed. (A session bound to
        the connection leaves it open on close.)"""
        if self.made is not None:
            await self.made.close()
        if self._pooled is not None:
            await greenlet_spawn(self._release)

    def _release(self) -> None:
        pooled, sa = self._pooled, self._sa
        self._pooled = self._sa = self._direct = None
        if sa is not None:
            sa.close()  # rolls back its transaction, and gives the pooled connection back
        elif pooled is not None:
            pooled.close()  # the pool's reset on return rolls back what is left
