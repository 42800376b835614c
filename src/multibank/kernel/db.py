"""Engine, ORM base and the per-request unit of work (the request owns the transaction)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar, TypeVar

from sqlalchemy import BigInteger, Integer, MetaData, event, exc
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
from sqlalchemy.util.concurrency import await_
from sqlalchemy.util.queue import AsyncAdaptedQueue, Empty

from multibank.kernel.direct import (
    Direct,
    OwnTransaction,
    Prepared,
    closed,
    flush_deferred,
    in_session,
)
from multibank.kernel.greenlets import spawn

T = TypeVar("T")
log = logging.getLogger("multibank.db")

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
# server runs on (and its migrations, SQL and tests are written for).
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
PAGE_SIZE = 2048  # the page size of a new SQLite database


def _sqlite_pragmas(dbapi_conn: Any, *more: str) -> None:
    """Every SQLite connection: autocommit at the driver (SQLAlchemy says BEGIN), a 30 s wait
    for the write lock, foreign keys enforced, temporary data in memory; `more` for the writer
    (WAL, synchronous).

    A statement that may fail half-way inside a transaction with a savepoint (every write
    request's, `GroupCommit`) keeps a statement journal; on a file, the default, opening it
    cost a fee charge's postings INSERT 30 µs of system calls, 27 of its 37 (decision 0023)."""
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    busy = f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}"
    for pragma in (busy, "PRAGMA foreign_keys=ON", "PRAGMA temp_store=MEMORY", *more):
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
            # A new database is made of 2 KiB pages (SQLite's default is 4): a write request
            # copies each page it first changes into its savepoint's journal, and the group's
            # commit writes each changed page to the WAL; a fee charge changes a dozen pages, and
            # was ≈ 6 µs faster of ≈ 360 (decision 0033). A database that exists keeps its size.
            _sqlite_pragmas(
                dbapi_conn,
                f"PRAGMA page_size={PAGE_SIZE}",
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
    engine = create_async_engine(
        url,
        echo=echo,
        poolclass=FairPool,
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=pool_timeout,
        skip_autocommit_rollback=True,  # the read sessions' connections (autocommit)
        # No pre-ping: it is a round trip on every checkout. See `_replace_closed` instead.
    )

    @event.listens_for(engine.sync_engine, "checkout")
    def _replace_closed(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        # A connection PostgreSQL closed (a restart, a terminated backend, an idle timeout),
        # as asyncpg has already seen: discarded and replaced now, without a round trip. Lent
        # again it would fail every request it served, the prepared statements' (kernel/direct.py)
        # included, which SQLAlchemy's own disconnect handling never sees. A connection that
        # dies while in use fails its request with 503 (api/errors.py) and is replaced here at
        # its next checkout.
        if closed(dbapi_conn):
            raise exc.DisconnectionError("the server closed this connection")

    return engine


def create_read_engine(url: str, echo: bool = False, connections: int = 16) -> AsyncEngine:
    """SQLite only: connections for read requests, in autocommit (no BEGIN IMMEDIATE), so reads
    run side by side under WAL instead of queueing for the one writing connection. A statement
    that writes (a session renewal) takes the write lock for itself alone.

    A read's statements run on the loop's thread and give their connection back before the
    loop turns, so one connection would serve every read; but a renewal waits for the write
    lock in a thread, holding its connection meanwhile (up to a write group, 20 ms). With four
    connections, four such renewals made every read wait, and the fair hand-over then kept
    each read waiting one turn of the loop for as long as the load lasted (decision 0022). The
    pool opens connections only when they are all taken at once, and lends the last returned
    first (its pages are in its cache)."""
    engine = create_async_engine(
        _inline(url),
        echo=echo,
        connect_args={"check_same_thread": False},
        poolclass=FairPool,
        pool_use_lifo=True,
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
        elif self.in_memory:
            self.read_engine = self.engine  # one private database: one connection sees it
        else:
            self.read_engine = create_read_engine(self.url, echo)
        self.read_sessionmaker = async_sessionmaker(self.read_engine, expire_on_commit=False)
        # SQLite's writer, committed once per group of write requests; not for a private
        # in-memory database, whose one connection every request shares.
        self.group: GroupCommit | None = None
        if self.is_sqlite and not self.in_memory:
            self.group = GroupCommit(self.engine.sync_engine)

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    @property
    def in_memory(self) -> bool:
        """A private in-memory SQLite database (the URL may spell `:memory:` percent-encoded)."""
        url = make_url(self.url)
        return self.is_sqlite and (
            url.database in (None, "", ":memory:") or "mode=memory" in str(url.query)
        )

    async def at_once(self, prepared: Prepared, params: Mapping[str, Any]) -> list[Any]:
        """One statement that commits on its own, with the rows it returns (`Direct.fetch`), and
        no session: a write that is whole in one statement (a login's new session), on a pooled
        connection of its own. On PostgreSQL straight to asyncpg, outside a transaction: one
        round trip. On SQLite on the writer, between its BEGIN IMMEDIATE and COMMIT, all on the
        loop's thread unless another process holds the lock (kernel/sqlite_inline.py)."""
        return await spawn(_at_once_on, self.engine.sync_engine, prepared, params)

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
            return await spawn(_rows_on, engine, statement, params)
        session = session.made
    if session.sync_session.in_transaction():
        return (await session.execute(statement, params)).all()
    engine = session.bind
    if not isinstance(engine, AsyncEngine):  # pragma: no cover - sessions are bound to engines
        return (await session.execute(statement, params)).all()
    return await spawn(_rows_on, engine.sync_engine, statement, params)


def _at_once_on(engine: Engine, prepared: Prepared, params: Mapping[str, Any]) -> list[Any]:
    # A pooled connection without SQLAlchemy's `Connection` over it (nor its transaction and
    # events): a third of a login's statement (decision 0025). The engine's listeners still see
    # each statement (`Direct`). On SQLite's writer, in a transaction of its own.
    return _direct_on(engine, _alone, prepared, params)


def _alone(direct: Direct, prepared: Prepared, params: Mapping[str, Any]) -> list[Any]:
    if direct.dialect.name != "sqlite":
        return direct.fetch(prepared, params)
    direct.run_sql("BEGIN IMMEDIATE")
    rows = direct.fetch(prepared, params)
    direct.commit()
    return rows


def _rows_on(engine: Engine, statement: Executable, params: dict[str, Any]) -> Sequence[Row[Any]]:
    with engine.connect() as connection:
        return connection.execute(statement, params).all()


def _direct_on(engine: Engine, fn: Callable[..., T], *args: Any) -> T:
    """`fn(direct)` on a pooled connection taken for it alone, without SQLAlchemy's `Connection`
    over it and, on PostgreSQL, its adapter's cursor: each statement goes to asyncpg at once and
    commits on its own, as the read engine's do (decisions 0025, 0031). Given back to the pool
    afterwards, rolled back if a statement failed half-way."""
    pooled = engine.raw_connection()
    try:
        autocommit = engine.dialect.name == "postgresql"
        return fn(Direct(None, pooled.dbapi_connection, engine, autocommit=autocommit), *args)
    finally:
        pooled.close()


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

    def in_transaction(self) -> bool:
        """Whether the session holds a connection in a transaction (never made: no)."""
        return self.made is not None and self.made.in_transaction()

    async def run_direct(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(direct, *args)` (kernel/direct.py): on the session's connection once it is made,
        otherwise on a connection taken for `fn` alone, as `read_rows` does."""
        if self.made is not None:
            return await spawn(in_session, self.made.sync_session, fn, *args)
        return await spawn(_direct_on, self.engine.sync_engine, fn, *args)

    async def close(self) -> None:
        if self.made is not None:
            await self.made.close()


# In a write request's `info` (shared with its session) when its commit is a group's
# (`GroupCommit`): what must run once the request's work is durable, which a session's own
# commit (a savepoint's release) does not make it. The auth cache drops what it remembers of
# what the request changed there (api/authcache.py), as it does after a session's commit.
AFTER_DURABLE_COMMIT = "multibank.after_durable_commit"


class GroupCommit:
    """SQLite's one writing connection, taken in turn by write requests (`Unit`s) and committed
    once per group of them (group commit, decision 0021).

    SQLite has one writer at a time, and a commit writes every page its transaction changed: a
    fee charge changes about fifteen (its rows and their indexes), and writing them was the
    largest single cost of the request. So a request's transaction is a savepoint of a group's
    transaction (its own work undone alone if it fails). When a request is done, it lets the
    event loop run what else is ready: the requests that reach the database meanwhile join the
    group, and then one commit, writing each changed page once, makes the whole group durable.
    A request answers only after that commit; a failed commit fails every request of the group.

    A group is committed at once after `MAX_REQUESTS` requests or `MAX_AGE_MS`, so the others
    that use the connection (jobs, a login's one statement) get it in turn, and no answer waits
    long for its commit."""

    MAX_REQUESTS = 64
    MAX_AGE_MS = 20.0
    TURNS = 2  # loop turns a request that kept its work lets run before the group commits

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._pooled: PoolProxiedConnection | None = None  # the open group's connection
        self._held = False  # a request (or the commit) has the writer now
        self._turns: deque[asyncio.Future[None]] = deque()  # requests waiting for it
        self._done: list[asyncio.Future[None]] = []  # requests of the group awaiting its commit
        self._started = 0.0
        self._members = 0
        self._kept = 0  # requests of the group that kept their work
        self._flushing = False  # a commit of the open group is scheduled
        self.commits = 0  # groups committed (tests, benches)

    def open_and_free(self) -> bool:
        """A group's transaction is open and nobody has the writer or waits for it: `enter`
        would neither wait for a turn nor begin a transaction (so needs no greenlet)."""
        return self._pooled is not None and not self._held and not self._turns

    async def take_turn(self) -> None:
        """Waits on the event loop for the writer (no greenlet): then `enter(taken=True)`
        neither waits nor, if a group is open still (`open`), begins a transaction (decision
        0033: most requests under load find the writer busy, and waited in a greenlet)."""
        if not self._take_free():
            await self._wait_turn()

    def _take_free(self) -> bool:
        """Takes the writer if nobody has it or waits for it."""
        if self._held or self._turns:
            return False
        self._held = True
        return True

    async def _wait_turn(self) -> None:
        """Waits until the writer is handed to this request (`_pass`)."""
        turn = asyncio.get_running_loop().create_future()
        self._turns.append(turn)
        try:
            await turn
        except BaseException:
            if turn.done() and not turn.cancelled():  # handed over, then interrupted
                self._pass()
            raise

    @property
    def open(self) -> bool:
        return self._pooled is not None

    def enter(self, taken: bool = False) -> PoolProxiedConnection:
        """The writer, in this request's turn, in the open group's transaction (a new group's,
        begun here, if none is open). Inside a greenlet: waiting for the turn awaits. `taken`:
        the turn was taken already (`take_turn`)."""
        if not taken and not self._take_free():
            await_(self._wait_turn())
        if self._pooled is None:
            pooled = None
            try:
                pooled = self._engine.raw_connection()
                # May wait (in a thread) for another process's lock (kernel/sqlite_inline.py).
                Direct(None, pooled.dbapi_connection, self._engine).run_sql("BEGIN IMMEDIATE")
            except BaseException:
                if pooled is not None:
                    pooled.close()
                self._pass()
                raise
            self._pooled = pooled
            self._started = time.monotonic() * 1000
            self._members = self._kept = 0
        self._members += 1
        return self._pooled

    def leave(self, kept: bool) -> None:
        """`leave_async`, inside a greenlet."""
        await_(self.leave_async(kept))

    async def leave_async(self, kept: bool) -> None:
        """The request's savepoint is released (`kept`) or rolled back. The group is committed
        now if it is full or old; otherwise the writer goes to the next request, what the event
        loop has ready runs (and may join the group), and then the group is committed, by this
        request if nobody has the writer, by whoever has it otherwise. A request that kept its
        work returns once the group is committed. On the event loop, without a greenlet: only
        a commit that awaits takes one (`_commit_async`)."""
        if kept:
            self._kept += 1
        old = time.monotonic() * 1000 - self._started >= self.MAX_AGE_MS
        idle = not self._kept and not any(not t.done() for t in self._turns)
        if old or idle or self._members >= self.MAX_REQUESTS:
            await self._commit_async()  # (a group where nobody kept anything is rolled back)
            return
        if not kept:
            self._pass()
            if not self._held and self._done:
                self._schedule_flush()  # those who kept their work wait for a commit
            return
        done = asyncio.get_running_loop().create_future()
        self._done.append(done)
        self._pass()
        try:
            # What is ready runs first, and may join the group: a request whose bytes arrive
            # now has its task made in one loop turn and reaches its first statement in the
            # next, so two turns (decision 0032: groups of 7 became 15 under 16 clients).
            for _ in range(self.TURNS):
                await asyncio.sleep(0)
        except BaseException:  # this request is cancelled: the group is still to be committed
            self._schedule_flush()
            raise
        if not done.done() and not self._held and self._pooled is not None:
            self._held = True
            try:
                await self._commit_async()
            finally:
                if done.done() and not done.cancelled():
                    done.exception()  # raised here, not left unretrieved
            return
        if not done.done() and not self._held:
            self._schedule_flush()
        await done  # raises what made the group's commit fail

    def _schedule_flush(self) -> None:
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def abort(self, error: BaseException) -> None:
        """The group's transaction cannot go on (a savepoint could not be rolled back): every
        request of the group fails, and the connection is rolled back. Inside a greenlet."""
        pooled, done = self._pooled, self._done
        self._pooled, self._done = None, []
        self._fail(done, error)
        try:
            if pooled is not None:
                pooled.close()  # the pool's reset on return rolls the transaction back
        finally:
            self._pass()

    def _flush(self) -> None:
        """The open group's commit, once the event loop has run what was ready (the requests
        that joined meanwhile). If a request has the writer, it schedules this again."""
        self._flushing = False
        if self._held or self._pooled is None:
            return
        self._held = True
        asyncio.get_running_loop().create_task(self._commit_soon())

    async def _commit_soon(self) -> None:
        try:
            await self._commit_async()
        except Exception:  # every request of the group has it; nothing else to tell
            log.warning("a group commit failed", exc_info=True)

    async def _commit_async(self) -> None:
        """`_commit` on the event loop; in a greenlet only if it awaits: the writer copies what
        a checkpoint left (`InlineConnection.commit_awaits`), or the group kept nothing and is
        rolled back. A hand-over costs a write request ≈ 2 µs on a kept greenlet (decision
        0032; ≈ 9 µs on a new one, decision 0030)."""
        pooled = self._pooled
        awaits = getattr(pooled.dbapi_connection, "commit_awaits", None) if pooled else None
        if awaits is None or awaits() or not self._kept:  # a rollback tells SQLAlchemy it awaited
            await spawn(self._commit)
        else:
            self._commit()

    def _commit(self) -> None:
        pooled, done = self._pooled, self._done
        self._pooled, self._done = None, []
        try:
            if pooled is not None:
                ends = Direct(None, pooled.dbapi_connection, self._engine)
                if self._kept:
                    ends.commit()
                    self.commits += 1
                else:  # nobody kept anything (replays, refusals): nothing to write
                    ends.rollback()
        except BaseException as error:
            self._fail(done, error)
            raise
        else:
            for future in done:
                if not future.done():
                    future.set_result(None)
        finally:
            try:
                if pooled is not None:
                    pooled.close()  # back to the pool (rolled back if the commit failed)
            finally:
                self._pass()

    @staticmethod
    def _fail(done: list[asyncio.Future[None]], error: BaseException) -> None:
        failure = RuntimeError("the group commit of this request's transaction failed")
        failure.__cause__ = error
        for future in done:
            if not future.done():
                future.set_exception(error if isinstance(error, Exception) else failure)

    def _pass(self) -> None:
        """The writer goes to the next request waiting for it, or is free."""
        while self._turns:
            turn = self._turns.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._held = False


# `Unit._saved`: where a request in a group stands with its savepoint (decision 0034).
_PENDING, _SAVED, _UNGUARDED = 0, 1, 2


class Unit:
    """A write request's transaction (the request owns it, `api/routing.py`): one pooled
    connection, taken and begun at the first statement, committed or rolled back once.

    The ORM session costs a write request about as much as its work: making it, beginning,
    committing and closing it through the unit of work is ≈ 200 µs of the event loop's CPU on
    SQLite and ≈ 300 µs on PostgreSQL, and a SQLAlchemy `Connection` alone ≈ 50 µs more than
    the pooled DBAPI connection under it (decision 0021). So a request whose statements are all
    prepared (kernel/direct.py: a fee charge, a payment's ledger work) runs them on the pooled
    DBAPI connection: the asyncpg adapter's transaction at its first statement, the driver's
    COMMIT last. On SQLite (a database file) the request's transaction is a savepoint of a
    group's transaction, committed for the whole group (`GroupCommit`).

    What needs SQLAlchemy gets it on the same connection and transaction: `connection` (a
    `Connection` over the pooled one; its BEGIN finds the transaction begun, `create_engine`)
    and the ORM session, made at the first use of any session attribute, which from then on
    controls the transaction as it always did: on PostgreSQL as its owner, on SQLite through a
    savepoint of its own within the request's.

    Stands in for an `AsyncSession`: any attribute it does not define is the session's."""

    __slots__ = (
        "_changes",
        "_db",
        "_direct",
        "_group",
        "_inline",
        "_pooled",
        "_sa",
        "_saved",
        "info",
        "made",
    )

    def __init__(self, db: Database) -> None:
        self._db = db
        self._pooled: PoolProxiedConnection | None = None
        self._direct: Direct | None = None
        self._sa: Connection | None = None
        self._inline = db.is_sqlite
        self._group = db.group
        # In a group: the request's savepoint, taken before its first write (decision 0034):
        # PENDING (none yet, nothing written), SAVED, or UNGUARDED (a write that checked all
        # it could refuse wrote without one); and the connection's count of changed rows when
        # the request took its turn.
        self._saved = _PENDING
        self._changes = 0
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
                if self._group is not None:
                    self.info.setdefault(AFTER_DURABLE_COMMIT, [])
                # On the connection already in use: as the owner of its transaction, or (in a
                # group) through a savepoint of its own, released when the session commits.
                bound = AsyncConnection(self._db.engine, self._connection())
                mode = "control_fully" if self._group is None else "create_savepoint"
                self.made = AsyncSession(
                    bound, expire_on_commit=False, info=self.info, join_transaction_mode=mode
                )
        return self.made

    def _connection(self) -> Connection:
        """The SQLAlchemy connection over the pooled one, made once."""
        assert self._pooled is not None
        if self._sa is None:
            if self._group is not None and self._saved == _PENDING and self._direct is not None:
                # Its statements (the ORM's) do not go through `Direct`: the savepoint first.
                self._direct.lazy_savepoint = None
                self._save(False)
            self._sa = Connection(self._db.engine.sync_engine, self._pooled)
            if self._direct is not None:
                # SQLAlchemy's statements do not go through `Direct`: none is held back from
                # here on, and one held back already is sent before SQLAlchemy's first.
                self._direct.defers = False
                own = getattr(self._pooled.dbapi_connection, "_transaction", None)
                if isinstance(own, OwnTransaction) and own.deferred:
                    event.listen(self._sa, "before_cursor_execute", flush_deferred)
            if self._group is not None:
                # In the group's transaction already (`create_engine`'s BEGIN sees it begun):
                # a session joins it through a savepoint, and never commits it.
                self._sa.begin()
        return self._sa

    def in_transaction(self) -> bool:
        if self.made is not None:
            return self.made.in_transaction()
        return self._pooled is not None

    def _begun(self, taken: bool = False) -> Direct:
        """The pooled connection, taken and begun if it was not yet. Inside a greenlet, unless
        the group's turn is `taken` and its transaction open (`run_direct`)."""
        if self._direct is None:
            engine = self._db.engine.sync_engine
            if self._group is not None:
                self._pooled = self._group.enter(taken)
                self._direct = Direct(None, self._pooled.dbapi_connection, engine)
                # Its savepoint before its first write, not its first statement (`_save`).
                self._saved = _PENDING
                self._changes = self._direct.connection_changes()
                self._direct.lazy_savepoint = self._save
            else:
                self._pooled = engine.raw_connection()
                # PostgreSQL: the transaction begins with its first statement, in one round
                # trip (kernel/direct.py); SQLite's BEGIN IMMEDIATE may wait for another process.
                self._direct = Direct(None, self._pooled.dbapi_connection, engine, begins=True)
                if self._inline:
                    self._direct.run_sql("BEGIN IMMEDIATE")
        return self._direct

    def _save(self, unguarded: bool) -> None:
        """`Direct.lazy_savepoint`: the request's savepoint in its group's transaction, before
        its first write; or (`unguarded`) none, its first write having checked everything that
        could refuse the request (`Direct.first_checked`): from then on a failure cannot be
        undone alone, and fails the group (`_detach`)."""
        if unguarded:
            self._saved = _UNGUARDED
            return
        assert self._direct is not None and self._group is not None
        try:
            self._direct.run_sql("SAVEPOINT request")
        except BaseException as error:
            self._group.abort(error)
            self._pooled = self._direct = None
            raise
        self._saved = _SAVED

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
            return await spawn(in_session, self.made.sync_session, fn, *args)
        ready = self._ready()
        if ready is not None:
            return fn(ready, *args)
        group = self._group
        if self._direct is None and group is not None:
            if group.open_and_free():
                # Its first statements join the group's open transaction, the writer free:
                # taking it and the savepoint await nothing, and what follows runs inline.
                return fn(self._begun(), *args)
            await group.take_turn()  # the writer, waited for on the loop
            # From here `enter` runs before anything awaits, and hands the writer on if it or
            # the savepoint fails (as when it waited for its turn itself).
            if group.open:  # still: nothing to begin, nothing awaits
                return fn(self._begun(taken=True), *args)
            return await spawn(self._run_taken, fn, *args)  # its BEGIN may wait
        return await spawn(self._run, fn, *args)

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return fn(self._begun(), *args)

    def _run_taken(self, fn: Callable[..., T], *args: Any) -> T:
        return fn(self._begun(taken=True), *args)

    async def read(self, statement: Executable, params: dict[str, Any]) -> Sequence[Row[Any]]:
        """A Core statement's rows, in this transaction (`read_rows`)."""
        if self.made is not None:
            return (await self.made.execute(statement, params)).all()
        return await spawn(self._read, statement, params)

    def _read(self, statement: Executable, params: dict[str, Any]) -> Sequence[Row[Any]]:
        self._begun()
        return self._connection().execute(statement, params).all()

    async def commit(self, last: Callable[..., object] | None = None, *args: Any) -> None:
        """Commits, after `last(direct, *args)` if given (the request's last statement), and
        returns once the work is durable. Without a session that is one hand-over, which also
        gives the connection back: the request is done with it. On PostgreSQL, if `last` ends
        with a statement that returns no rows, the COMMIT goes with it (kernel/direct.py)."""
        if self.made is not None:
            if last is not None:
                await self.run_direct(last, *args)
                last = None
            await self.made.commit()  # in a group: releases the session's savepoint
        if self._group is not None:
            ready = self._ready()
            if ready is not None:
                # Its last statement and RELEASE run inline (`_ready`), and the group's wait
                # and commit on the event loop: no greenlet (`GroupCommit.leave_async`).
                await self._finish_in_group_inline(ready, last, *args)
            elif self._pooled is not None or last is not None:
                await spawn(self._finish_in_group, last, *args)
        elif self._pooled is not None or last is not None:
            await spawn(self._finish, last, *args)

    def _finish(self, last: Callable[..., object] | None, *args: Any) -> None:
        try:
            if last is not None:
                direct = self._begun()
                # Its last statement may carry the COMMIT (PostgreSQL, kernel/direct.py); the
                # commit below then sends nothing.
                direct.closing = self._sa is None
                try:
                    last(direct, *args)
                finally:
                    direct.closing = False
            if self._sa is not None and self._sa.in_transaction():
                self._sa.commit()
            if self._pooled is not None:
                self._pooled.commit()  # the driver's own: nothing if SQLAlchemy committed it
        finally:
            self._release()

    def _finish_in_group(self, last: Callable[..., object] | None, *args: Any) -> None:
        try:
            direct = self._begun()
            if last is not None:
                last(direct, *args)
            if self._saved == _SAVED:
                direct.run_sql("RELEASE request")
        except BaseException:
            self._leave_group(kept=False)
            raise
        self._leave_group(kept=True)

    async def _finish_in_group_inline(
        self, direct: Direct, last: Callable[..., object] | None, *args: Any
    ) -> None:
        """`_finish_in_group` when the writer is held inline (`_ready`)."""
        try:
            if last is not None:
                last(direct, *args)
            if self._saved == _SAVED:
                direct.run_sql("RELEASE request")
        except BaseException:
            await spawn(self._leave_group, False)
            raise
        hooks = self._detach(kept=True) or []
        assert self._group is not None
        await self._group.leave_async(True)
        self._after_durable(hooks)

    def _leave_group(self, kept: bool) -> None:
        group = self._group
        assert group is not None
        hooks = self._detach(kept)
        if hooks is None:
            return
        group.leave(kept)
        if kept:
            self._after_durable(hooks)

    def _detach(self, kept: bool) -> list[Callable[[], object]] | None:
        """The request leaves the group's connection (its savepoint rolled back unless `kept`):
        what it asked to run once its work is durable, or None if it never took a turn."""
        group, direct = self._group, self._direct
        assert group is not None
        self._pooled = self._direct = self._sa = None  # the group's, not closed here
        if self.made is not None:
            # Its connection is the group's, and goes on to others: a later use of this unit
            # (a page that rolled back, then reads) takes a turn and a session of its own.
            self.made.sync_session.close()
            self.made = None
        if direct is None:
            return None
        direct.lazy_savepoint = None
        if not kept and self._saved == _SAVED:
            try:
                direct.run_sql("ROLLBACK TO request")
                direct.run_sql("RELEASE request")
            except BaseException as error:
                group.abort(error)
                raise
        elif not kept:
            changes = direct.connection_changes()
            if self._saved == _UNGUARDED or changes != self._changes:
                # Written without a savepoint, and failed: its writes cannot be undone alone,
                # so the group's transaction is rolled back and its requests fail, as when its
                # commit fails (decision 0034). Only a fault can come here: everything that
                # refuses such a request is checked by its first write.
                group.abort(RuntimeError("a request that wrote without a savepoint failed"))
                return None
        hooks: list[Callable[[], object]] = self.info.pop(AFTER_DURABLE_COMMIT, None) or []
        return hooks

    @staticmethod
    def _after_durable(hooks: list[Callable[[], object]]) -> None:
        for hook in hooks:
            try:
                hook()
            except Exception:  # what it tidies is tidied again within its time anyway
                log.warning("a hook after a group commit failed", exc_info=True)

    async def send_held(self) -> None:
        """Sends what `Direct.defer` holds back, now (PostgreSQL): a refusal of it is raised."""
        if self._direct is not None and self._direct.holds():
            await spawn(self._direct.send_held)

    async def rollback(self) -> None:
        if self.made is not None:
            await self.made.rollback()
        if self._group is not None:
            if self._pooled is not None:
                await spawn(self._leave_group, False)
        elif self._pooled is not None:
            await spawn(self._undo)

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
            if self._group is not None:
                await spawn(self._leave_group, False)
            else:
                await spawn(self._release)

    def _release(self) -> None:
        pooled, sa = self._pooled, self._sa
        self._pooled = self._sa = self._direct = None
        if sa is not None:
            sa.close()  # rolls back its transaction, and gives the pooled connection back
        elif pooled is not None:
            pooled.close()  # the pool's reset on return rolls back what is left
