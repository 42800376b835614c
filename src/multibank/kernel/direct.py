"""Hot statements on the driver's connection: SQLAlchemy compiles, the DBAPI cursor executes.

A statement executed through SQLAlchemy (session or connection) costs 40-150 µs of the event
loop's CPU on top of what the driver needs (5-15 µs on SQLite, ≈ 60 µs for an asyncpg round
trip): the execution context, the compiled-cache lookup, parameter and result objects, events
and one greenlet hand-over per statement (decision 0021). The statements a request sends on
every write (a session's renewal, the idempotency claim, a fee's lookup, a ledger posting) are
therefore `Prepared`: a Core statement, compiled once per dialect with SQLAlchemy (so the SQL
is the dialect's, written once), whose parameters go in the compiled order through SQLAlchemy's
own bind processors (JSON, booleans) straight to the PEP 249 cursor of the connection the
request's transaction holds (a write's `kernel.db.Unit`, or a session's), and on PostgreSQL,
once the adapter has begun the transaction, to asyncpg itself. Several statements run in one
greenlet hand-over (`run`).

What stays the same as `session.execute`:
- the statement runs in the request's transaction, on its connection (begun if it was not:
  SQLite's `BEGIN IMMEDIATE`, the asyncpg adapter's transaction); what a session has pending
  is flushed first, as an ORM statement's autoflush would;
- a driver error is raised as SQLAlchemy's exception of the same kind (`IntegrityError`,
  `OperationalError`, ...), so callers and the error handlers see what they saw before;
- the engine's `before_cursor_execute` listeners see each statement (tests count round trips).

On PostgreSQL a write request's `Unit` begins its transaction here (`Direct(begins=True)`):
the BEGIN goes in one simple query with the first statement, and the COMMIT with the last
(`closing`), each of those two statements PREPAREd by name once per connection and run as
`EXECUTE name(literals)` (decision 0023): two round trips fewer per write, and PostgreSQL keeps
the statement's plan (literal SQL of its own would be parsed and planned every time). The
statements in between go as prepared by asyncpg.

A statement whose outcome nothing waits for can be held back (`Direct.defer`, decision 0024):
it goes with the transaction's next round trip, and says it was refused with an error
(`Refusal`), raised as the caller's own exception where it is sent. A fee charge's movement is,
and its session renewal and claim too, before the BEGIN: its one read first, then everything else
in one query with the COMMIT.

What does not: ORM events (`do_orm_execute`). A statement that changes rows the auth cache
remembers (programmes, api keys, sessions) must not be prepared here, except a session's own
renewal, which the cache records itself (`Prepared(..., renewal=True)`).
"""

from __future__ import annotations

import hashlib
from collections import namedtuple
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Concatenate, NoReturn, ParamSpec, TypeVar, cast
from weakref import WeakKeyDictionary

from sqlalchemy import exc
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session
from sqlalchemy.sql import ClauseElement, ColumnElement, sqltypes
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.util.concurrency import await_

from multibank.kernel.greenlets import spawn

P = ParamSpec("P")
T = TypeVar("T")

# Tables whose changes the auth cache must hear of (api/authcache.py listens to ORM events).
_CACHED_TABLES = frozenset({"programmes", "api_keys", "auth_sessions"})

Processor = Callable[[Any], Any]


class _Plan:
    """A statement compiled for one dialect: its SQL and how to lay out its parameters."""

    __slots__ = (
        "_get",
        "fixed",
        "json",
        "name",
        "names",
        "positional",
        "processors",
        "reads",
        "results",
        "row",
        "sql",
    )

    def __init__(self, statement: ClauseElement, keys: Sequence[str] | None, dialect: Dialect):
        compiled = cast(
            SQLCompiler,
            statement.compile(dialect=dialect, column_keys=list(keys) if keys else None),
        )
        self.sql = str(compiled)
        # Only reads: a SELECT (a statement with a data-modifying WITH begins with WITH).
        self.reads = self.sql.lstrip()[:6].upper() == "SELECT"
        # The name it is PREPAREd under (SQL level) on a PostgreSQL connection (`Direct`).
        self.name = "mb_" + hashlib.sha1(self.sql.encode()).hexdigest()[:20]
        names = list(compiled.positiontup or ())
        self.positional = bool(compiled.positional)
        if not self.positional:  # pragma: no cover - both drivers here are positional
            names = list(compiled.binds)
        binds = compiled.binds
        for name in names:
            if binds[name].expanding:
                raise ValueError(f"{name}: IN lists are not supported by a prepared statement")
        self.names = tuple(names)
        # What SQLAlchemy bound itself (the `1` of `posting_count + 1`): the same every time.
        self.fixed = {
            n: binds[n].value for n in names if not binds[n].required and binds[n].value is not None
        }
        # The parameters in order, in one call (a statement without `fixed` ones): a fee
        # charge lays out ≈ 80 of them in a dozen statements (decision 0033).
        self._get: Callable[[Mapping[str, Any]], Any] | None = None
        if names and not self.fixed:
            get = itemgetter(*names)
            self._get = get if len(names) > 1 else lambda params: (get(params),)
        processors: list[tuple[int, Processor]] = []
        for position, name in enumerate(names):
            process = binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                processors.append((position, process))
        self.processors = tuple(processors)
        # The JSON parameters: text converts to JSON only when cast (`literal_execute`).
        self.json = frozenset(
            position
            for position, name in enumerate(names)
            if isinstance(binds[name].type, sqltypes.JSON)
        )
        columns = list(getattr(statement, "exported_columns", ()) or ())
        results: list[tuple[int, Processor]] = []
        for position, column in enumerate(columns):
            process = column.type.dialect_impl(dialect).result_processor(dialect, None)
            if process is not None:
                results.append((position, process))
        self.results = tuple(results)
        self.row: Any = (
            namedtuple("Row", [c.key for c in columns], rename=True) if columns else None
        )

    def literal_execute(self, arguments: Sequence[Any]) -> str | None:
        """PostgreSQL: `EXECUTE name(literals...)` for this statement PREPAREd on the
        connection; None if a parameter has no literal form here."""
        literals = self._literals(arguments, 0, 0)
        if literals is None:
            return None
        if not literals:
            return f"EXECUTE {self.name}"
        return f"EXECUTE {self.name}({', '.join(literals)})"

    def literal_extend(self, shorter: _Plan, literal: str, arguments: Sequence[Any]) -> str | None:
        """`literal_execute(arguments)` from `literal`, the EXECUTE of `shorter` with the first
        of `arguments`, when this statement's parameters are `shorter`'s and more after them:
        only the parameters after them are written. None if they are not, or if a parameter
        has no literal form."""
        count = len(shorter.names)
        if not count or self.names[:count] != shorter.names or len(arguments) <= count:
            return None
        head = f"EXECUTE {shorter.name}("
        if not literal.startswith(head) or len(literal) > MAX_LITERAL_SQL:
            return None
        tail = self._literals(arguments, count, len(literal))
        if tail is None:
            return None
        return f"EXECUTE {self.name}({literal[len(head) : -1]}, {', '.join(tail)})"

    def _literals(self, arguments: Sequence[Any], start: int, size: int) -> list[str] | None:
        # `_literal` of each (ints, the most frequent, inline): a fee charge has 60 of them.
        literals = []
        for position in range(start, len(arguments)):
            value = arguments[position]
            if type(value) is int:
                literals.append(f"({value})")
                continue
            literal = _literal(value)
            if literal is None:
                return None
            literals.append(literal)
        for position in self.json:
            if position >= start and arguments[position] is not None:
                literals[position - start] += "::json"
        if size + sum(map(len, literals)) > MAX_LITERAL_SQL:
            return None
        return literals

    def arguments(self, params: Mapping[str, Any]) -> Sequence[Any] | dict[str, Any]:
        get, fixed = self._get, self.fixed
        try:
            if get is not None:
                got: tuple[Any, ...] = get(params)
                if not self.processors and self.positional:
                    return got
                values = list(got)
            else:
                values = [params[n] if n not in fixed else fixed[n] for n in self.names]
        except KeyError as missing:
            raise exc.ArgumentError(f"no value for parameter {missing} of {self.sql}") from None
        for position, process in self.processors:
            values[position] = process(values[position])
        if self.positional:
            return tuple(values)
        return dict(zip(self.names, values, strict=True))  # pragma: no cover

    def rows(self, raw: Sequence[Any]) -> list[Any]:
        make = self.row._make
        if not self.results:
            return [make(r) for r in raw]
        out = []
        for r in raw:
            values = list(r)
            for position, process in self.results:
                values[position] = process(values[position])
            out.append(make(values))
        return out


# A statement whose literals would make it longer than this goes with its parameters instead.
MAX_LITERAL_SQL = 64 * 1024


def _literal(value: Any) -> str | None:
    """A parameter as PostgreSQL literal SQL, with no quoting rule involved (nor
    `standard_conforming_strings`): text as a dollar-quoted string, which has no escapes, and
    bytes as one holding bytea's hex input (`\\x...`). The server reads either with the input
    function of the type the prepared statement declares, looking up no function as it did for
    `convert_from(decode(hex))` at every execution: 11 % less of PostgreSQL's CPU per fee charge
    (decision 0032). Text that could end the quote early (`$mb`), holds a NUL (which ends a
    simple query's text) or is not ASCII goes as hex digits decoded by the server, as before."""
    kind = type(value)
    if value is None:
        return "NULL"
    if kind is bool:
        return "TRUE" if value else "FALSE"
    if kind is int:
        return f"({value})"
    if kind is str:
        if value.isascii() and "$mb" not in value and "\x00" not in value:
            return f"$mb${value}$mb$"
        return f"convert_from(decode('{value.encode().hex()}', 'hex'), 'UTF8')"
    if kind is bytes:
        return f"$mb$\\x{value.hex()}$mb$"
    return None


# The statements PREPAREd (SQL level) on each asyncpg connection.
_PREPARED: WeakKeyDictionary[Any, set[str]] = WeakKeyDictionary()

# The isolation levels of SQLAlchemy's asyncpg adapter, as asyncpg writes them in its BEGIN.
_LEVELS = {
    "read_committed": "READ COMMITTED",
    "read_uncommitted": "READ UNCOMMITTED",
    "repeatable_read": "REPEATABLE READ",
    "serializable": "SERIALIZABLE",
}


def _begin_sql(adapter: Any) -> str | None:
    """The BEGIN asyncpg would send for the adapter's transaction (`Transaction.start`); None
    when the connection is in autocommit or set up otherwise (the adapter then begins)."""
    level = adapter.isolation_level
    if level == "autocommit" or (level is not None and level not in _LEVELS):
        return None
    sql = "BEGIN" if level is None else f"BEGIN ISOLATION LEVEL {_LEVELS[level]}"
    if adapter.readonly:
        sql += " READ ONLY"
    if adapter.deferrable:
        sql += " DEFERRABLE"
    return sql


class Refusal:
    """How a held-back statement says it was refused (`Direct.defer`): the error it makes
    PostgreSQL raise, a NOT NULL violation on `table.name` or a unique violation of the
    constraint `name`, stands for `error`, which is raised instead (after `then`, if given)."""

    __slots__ = ("error", "name", "sqlstate", "table", "then")

    def __init__(
        self,
        error: Exception,
        *,
        null: tuple[str, str] | None = None,
        unique: str | None = None,
        then: Callable[[], None] | None = None,
    ) -> None:
        self.error, self.then = error, then
        self.table: str | None = None
        if null is not None:
            self.sqlstate, (self.table, self.name) = _NOT_NULL_VIOLATION, null
        elif unique is not None:
            self.sqlstate, self.name = _UNIQUE_VIOLATION, unique
        else:  # pragma: no cover - a programming error
            raise ValueError("a refusal is a NOT NULL or a unique violation")

    def matches(self, error: Exception) -> bool:
        if getattr(error, "sqlstate", None) != self.sqlstate:
            return False
        if self.sqlstate == _UNIQUE_VIOLATION:
            return getattr(error, "constraint_name", None) == self.name
        return (
            getattr(error, "table_name", None) == self.table
            and getattr(error, "column_name", None) == self.name
        )


class StaleRead(Exception):
    """What a request read from what this process remembers was no longer so when its held-back
    statements were checked (`ledger.Condition`): its transaction rolls back and the request
    runs once more with `FRESH_READS` set (api/routing.py)."""


# Set while a request runs again after a StaleRead: it reads everything afresh.
FRESH_READS: ContextVar[bool] = ContextVar("multibank_fresh_reads", default=False)

_NOT_NULL_VIOLATION = "23502"
_UNIQUE_VIOLATION = "23505"


class Deferred:
    """A statement whose sending waits for the transaction's next round trip (`Direct.defer`):
    the `EXECUTE` that runs it, and what its refusals mean."""

    __slots__ = (
        "arguments",
        "connection",
        "done",
        "listeners",
        "literal",
        "plan",
        "refusals",
    )

    def __init__(
        self,
        literal: str,
        plan: _Plan,
        arguments: Any,
        refusals: Sequence[Refusal],
        listeners: Any,
        connection: Connection | None,
        done: Callable[[], None] | None,
    ) -> None:
        self.literal, self.plan, self.arguments = literal, plan, arguments
        self.refusals = refusals
        self.listeners, self.connection = listeners, connection
        self.done = done  # called once it has run

    def tell(self) -> None:
        """The engine's listeners see it when it is sent, as the statement it is."""
        if self.listeners is not None:
            for listen in self.listeners:
                listen(self.connection, None, self.plan.sql, self.arguments, None, False)


def _failure(sent: Sequence[Deferred], error: Exception) -> Exception | None:
    """The refusal `error` stands for, if it is one of the held-back statements' refusals."""
    for deferred in sent:
        for refusal in deferred.refusals:
            if refusal.matches(error):
                if refusal.then is not None:
                    refusal.then()
                return refusal.error
    return None


class OwnTransaction:
    """Stands in for asyncpg's `Transaction` in SQLAlchemy's asyncpg adapter when a `Direct`
    began the transaction itself: the adapter (and so the pool's reset, a session bound to
    the connection) commits and rolls it back as it would asyncpg's, and does not begin
    another. `ended`: the request's last statement carried its COMMIT.

    `deferred`: statements not sent yet (`Direct.defer`), which go with the next statement that
    returns no rows, or with the COMMIT. `begin`: the BEGIN itself, when statements were held
    back before any was sent (`Direct.defer(before_reads=True)`); until it is sent, statements
    whose rows are wanted run before it, outside the transaction."""

    __slots__ = ("_driver", "begin", "deferred", "ended")

    def __init__(self, driver: Any, begin: str | None = None) -> None:
        self._driver = driver
        self.ended = False
        self.begin = begin
        self.deferred: list[Deferred] = []

    def take(self) -> tuple[list[str], list[Deferred]]:
        """What is held back, as the statements that send it, in order (the BEGIN first if
        it was held back too); held no more. The listeners are told of them."""
        pending, self.deferred = self.deferred, []
        sql = [d.literal for d in pending]
        if self.begin is not None:
            if pending and pending[0].listeners is not None:
                for listen in pending[0].listeners:
                    listen(pending[0].connection, None, self.begin, (), None, False)
            sql.insert(0, self.begin)
            self.begin = None
        for each in pending:
            each.tell()
        return sql, pending

    async def commit(self) -> None:
        if self.ended:
            return
        if self.begin is not None and not self.deferred:  # nothing was ever sent
            self.ended = True
            return
        sql, pending = self.take()
        self.ended = True
        if not pending:
            await self._driver.execute("COMMIT")
            return
        if pending[0].listeners is not None:  # the COMMIT that goes with them, as itself
            for listen in pending[0].listeners:
                listen(pending[0].connection, None, "COMMIT", (), None, False)
        try:
            await self._driver.execute("; ".join([*sql, "COMMIT"]))
        except Exception as error:
            # A statement failed before the COMMIT ran: the transaction is still open (and
            # aborted), and the adapter forgets it once its commit has failed, so it ends here.
            await self._driver.execute("ROLLBACK")
            failure = _failure(pending, error)
            if failure is not None:
                raise failure from None
            raise
        _done(pending)

    async def rollback(self) -> None:
        # A ROLLBACK where PostgreSQL has ended the transaction already (its COMMIT failed) is
        # a warning, not an error.
        self.deferred = []  # never sent: nothing to undo
        if not self.ended:
            self.ended = True
            if self.begin is None:  # else nothing was ever sent
                await self._driver.execute("ROLLBACK")

    def flush(self) -> None:
        """Sends what is held back, alone (inside a greenlet)."""
        if not self.deferred:
            return
        sql, pending = self.take()
        try:
            await_(self._driver.execute("; ".join(sql)))
        except Exception as error:
            failure = _failure(pending, error)
            if failure is not None:
                raise failure from None
            raise
        _done(pending)


def _done(sent: Sequence[Deferred]) -> None:
    for each in sent:
        if each.done is not None:
            each.done()


def flush_deferred(conn: Connection, *args: Any) -> None:
    """`before_cursor_execute` listener of a SQLAlchemy connection over a `Unit`'s pooled one
    (kernel/db.py): what is held back is sent before any statement SQLAlchemy sends."""
    own = getattr(conn.connection.dbapi_connection, "_transaction", None)
    if isinstance(own, OwnTransaction) and own.deferred:
        own.flush()


def closed(dbapi: Any) -> bool:
    """Whether the driver knows its connection is closed (asyncpg: the server terminated it),
    without a round trip. False for a driver that cannot tell."""
    driver = getattr(dbapi, "driver_connection", None)
    is_closed = getattr(driver, "is_closed", None)
    return bool(is_closed()) if callable(is_closed) else False


class Prepared:
    """A Core statement with bound parameters (`bindparam`), compiled once per dialect.

    `statement`: one statement, or one per dialect name (`{"postgresql": ..., "sqlite": ...}`)
    where the SQL differs (`INSERT ... ON CONFLICT` is each dialect's own construct).
    `keys`: for an INSERT without `.values()`, the columns it sets (each its own parameter).
    `renewal`: the statement is a session's renewal (an auth-cache table write allowed: the cache
    records it itself). `new_rows`: the statement only adds rows with new keys to such a table (a
    login's new session), so nothing the cache remembers changes."""

    __slots__ = ("_plans", "keys", "statements")

    def __init__(
        self,
        statement: ClauseElement | Mapping[str, ClauseElement],
        keys: Sequence[str] | None = None,
        renewal: bool = False,
        new_rows: bool = False,
    ) -> None:
        statements = dict(statement) if isinstance(statement, Mapping) else {"": statement}
        for each in statements.values():
            table = getattr(getattr(each, "table", None), "name", None)
            allowed = renewal or new_rows
            if isinstance(each, UpdateBase) and table in _CACHED_TABLES and not allowed:
                raise ValueError(f"{table}: its changes go through the session (auth cache)")
        self.statements = statements
        self.keys = tuple(keys) if keys else None
        self._plans: dict[str, _Plan] = {}

    def plan(self, dialect: Dialect) -> _Plan:
        found = self._plans.get(dialect.name)
        if found is None:
            statement = self.statements.get(dialect.name, self.statements.get(""))
            if statement is None:
                raise ValueError(f"no statement for the {dialect.name} dialect")
            found = self._plans[dialect.name] = _Plan(statement, self.keys, dialect)
        return found


@dataclass(frozen=True)
class Fold:
    """A held check (`Direct.hold_check`) as a condition a write can carry in its WHERE:
    `clause` with `params`; `done` once a statement carrying it found it true. `name` tells
    statements built with it apart."""

    name: str
    clause: ColumnElement[bool]
    params: Mapping[str, Any]
    done: Callable[[], None]


class Direct:
    """The DBAPI connection of a transaction, for `Prepared` statements. Used inside `run` (a
    greenlet): the asyncio drivers' adapters await there.

    `connection`: the SQLAlchemy connection it belongs to, when there is one (a session's);
    a write request's `Unit` runs its prepared statements on the pooled DBAPI connection alone,
    and then `connection` is None (the engine's listeners see that).

    `begins` (PostgreSQL, a `Unit`): the transaction is begun by the first statement sent here
    or through the adapter, whichever comes first; here, its BEGIN goes with that statement
    when the statement returns no rows (`execute`). `closing`: set while the request's last
    statement runs; if it returns no rows, it goes with the COMMIT of a transaction begun here
    (and then `execute` cannot tell the rows it changed: -1). `autocommit` (PostgreSQL, a pooled
    connection of its own): each statement goes to asyncpg at once, outside any transaction, and
    commits on its own; the connection goes back to the pool with nothing to roll back."""

    __slots__ = (
        "_adapter",
        "_begin",
        "_checks",
        "_dbapi",
        "_driver",
        "_folds",
        "_inline",
        "_kept",
        "_listeners",
        "_new_cursor",
        "_raw",
        "_writer",
        "closing",
        "connection",
        "defers",
        "dialect",
        "lazy_savepoint",
    )

    def __init__(
        self,
        connection: Connection | None,
        dbapi: Any = None,
        engine: Engine | None = None,
        begins: bool = False,
        autocommit: bool = False,
    ) -> None:
        self.connection = connection
        if connection is not None:
            dbapi = connection.connection.dbapi_connection
            events: Any = connection.dispatch
            self.dialect = connection.dialect
        else:
            assert engine is not None
            events = engine.dispatch
            self.dialect = engine.dialect
        assert dbapi is not None  # a connection in use holds one
        # SQLite's inline driver has a cursor for callers that are not SQLAlchemy's own.
        inline = getattr(dbapi, "direct_cursor", None)
        self._new_cursor = dbapi.cursor if inline is None else inline
        self._inline = inline is not None
        # SQLite's inline driver: its connection's own cursor, for a statement that cannot wait
        # (a SELECT, or any statement while the writer holds the write lock: `_kept_now`).
        self._kept: Any = dbapi.kept if inline is not None else None
        self._raw: Any = dbapi.raw if inline is not None else None
        self._writer = bool(getattr(dbapi, "immediate", False)) if inline is not None else False
        self._dbapi = dbapi
        listeners = events.before_cursor_execute
        self._listeners = listeners if listeners else None
        # PostgreSQL: asyncpg itself, once SQLAlchemy's adapter has run this transaction's
        # first statement (and so begun the transaction it commits): the adapter's cursor costs
        # ≈ 12 µs more per round trip (decision 0021).
        self._adapter: Any = dbapi if self.dialect.name == "postgresql" else None
        self._checks: list[Callable[[Direct], None]] | None = None  # `hold_check`
        self._folds: list[Fold] | None = None  # `hold_check`'s folds, while each check has one
        # SQLite, a request in a group (kernel/db.Unit, decision 0034): called before the
        # first statement that writes (`False`: take the request's savepoint now), or after a
        # `first_checked` statement wrote (`True`: the request writes without one); then None.
        self.lazy_savepoint: Callable[[bool], None] | None = None
        self._driver: Any = None
        self._begin: str | None = None
        if begins and self._adapter is not None:
            self._begin = _begin_sql(self._adapter)
            if self._begin is not None:
                self._driver = self._adapter.driver_connection
        elif autocommit:
            if self._adapter is None or self._adapter._transaction is not None:
                raise ValueError("autocommit: a PostgreSQL connection outside a transaction")
            self._driver = self._adapter.driver_connection
        self.closing = False
        # Whether `defer` may hold a statement back: a `Unit`'s own transaction, until
        # SQLAlchemy has a connection over it (kernel/db.py).
        self.defers = self._begin is not None

    def _run_on_driver(self, plan: _Plan, arguments: Any, call: str) -> Any:
        driver, adapter = self._driver, self._adapter
        sql, sent, ends = plan.sql, None, None
        pending: list[Deferred] = []
        told_begin = False
        own = adapter._transaction
        if self._begin is not None and own is None:
            # The transaction begins now: the adapter holds it from here on (its rollback, the
            # pool's reset on return, ends it), also if the BEGIN fails half-way.
            adapter._transaction = OwnTransaction(driver)
            literal = self._executable(plan, arguments) if call == "execute" else None
            if literal is None:
                self._simple(self._begin)
            else:
                sent, told_begin = f"{self._begin}; {literal}", True
        elif isinstance(own, OwnTransaction) and not own.ended:
            literal = None
            if call == "execute" and (own.deferred or self.closing):
                literal = self._executable(plan, arguments)
            if own.deferred:
                if literal is not None:
                    parts, pending = own.take()  # told first, as they go first
                    sent = "; ".join([*parts, literal])
                elif own.begin is None or not plan.reads:
                    own.flush()  # a statement whose rows are wanted goes alone, after them
                # else a read before the transaction begins (what is held back does not change
                # what it reads, `defer(before_reads=True)`), on its own
            if self.closing and literal is not None:
                sent = f"{sent or literal}; COMMIT"
                ends = own
        if self._listeners is not None:
            # Each statement as itself (a combined query's BEGIN, held-back statements or
            # COMMIT too), with the SQL and parameters its EXECUTE runs.
            told = [(sql, arguments, call == "executemany")]
            if told_begin:
                told.insert(0, (self._begin or "BEGIN", (), False))
            if ends is not None:
                told.append(("COMMIT", (), False))
            for statement, parameters, many in told:
                for listen in self._listeners:
                    listen(self.connection, None, statement, parameters, None, many)
        if sent is not None:
            sql, arguments = sent, ()
        try:
            if sent is not None:
                status = await_(driver.execute(sent))  # a simple query: its last status
                if ends is not None:
                    ends.ended = True
                _done(pending)
                return status
            if call == "executemany":
                return await_(driver.executemany(sql, arguments))
            return await_(getattr(driver, call)(sql, *arguments))
        except Exception as error:
            failure = _failure(pending, error)
            if failure is not None:
                raise failure from None
            self._raise(sql, arguments, error)

    def holds(self) -> bool:
        """Whether statements (`defer`) or checks (`hold_check`) are held back here."""
        if self._checks:
            return True
        own = self._adapter._transaction if self._adapter is not None else None
        return isinstance(own, OwnTransaction) and bool(own.deferred)

    def send_held(self) -> None:
        """Sends what is held back, alone, and runs the checks held back (inside a greenlet)."""
        checks, self._checks = self._checks, None
        for check in checks or ():
            check(self)
        own = self._adapter._transaction if self._adapter is not None else None
        if isinstance(own, OwnTransaction):
            own.flush()

    def hold_check(self, check: Callable[[Direct], None], fold: Fold | None = None) -> None:
        """SQLite (decision 0033): `check(direct)`, which would have been a request's first
        statement, is held back. The request holds the one write lock from its first statement
        to its commit, so what the check reads cannot change meanwhile: its caller makes the
        request's last statement check it (and then makes `check` do nothing), and
        `send_held` runs it where the answer is wanted before that (the request's own refusal
        is about to be its answer). `fold`: the same check as a condition another statement
        may carry instead (`folds`, decision 0034)."""
        if self._checks is None:
            self._checks = []
            self._folds = []
        self._checks.append(check)
        if fold is None or self._folds is None:
            self._folds = None  # a check that cannot be folded: none is
        else:
            self._folds.append(fold)

    def folds(self) -> tuple[Fold, ...] | None:
        """The held checks as conditions a statement can carry (`Fold`), or None if one of them
        cannot be: a statement that carries them all checks what the held checks would."""
        if self._checks is None:
            return ()
        return None if self._folds is None else tuple(self._folds)

    def folded(self) -> None:
        """A statement carried every held check (`folds`) and found them true: each is done."""
        folds = self._folds or []
        self._checks = self._folds = None
        for fold in folds:
            fold.done()

    def first_checked(self, prepared: Prepared, params: Mapping[str, Any]) -> Any | None:
        """`first`, for a write that checks, in its own WHERE, everything that could refuse the
        request: when it changes nothing, nothing is written (so it needs no savepoint first,
        `lazy_savepoint`); when it writes, the request goes on without one (decision 0034)."""
        hook, self.lazy_savepoint = self.lazy_savepoint, None
        try:
            row = self.first(prepared, params)
        finally:
            self.lazy_savepoint = hook
        if row is not None and hook is not None:
            self.lazy_savepoint = None
            hook(True)
        return row

    def defer(
        self,
        prepared: Prepared,
        params: Mapping[str, Any],
        refusals: Sequence[Refusal],
        done: Callable[[], None] | None = None,
        before_reads: bool = False,
    ) -> Deferred | None:
        """PostgreSQL, a `Unit`'s own transaction: holds back a statement that returns no rows
        until the transaction's next round trip, which carries it (the next statement that
        returns no rows, or the COMMIT); it is sent alone first before a statement whose rows
        are wanted, or before anything SQLAlchemy sends. Its refusals (`Refusal`) are raised
        where it is sent, and the transaction then rolls back; `done` is called once it has
        run.

        `before_reads`: may also be held back before the transaction has begun (its BEGIN then
        goes with it); until then the statements whose rows are wanted run first, outside the
        transaction: the caller vouches that nothing it reads depends on what is held back.

        The statement held back, or None: not held back (another kind of transaction, the
        BEGIN already sent when `before_reads` wanted it not, or too long a statement); the
        caller runs it itself."""
        if not self.defers:
            return None
        own = self._adapter._transaction
        if own is None:
            if not before_reads or self._begin is None or self._driver is None:
                return None
            own = self._adapter._transaction = OwnTransaction(self._driver, self._begin)
        elif not isinstance(own, OwnTransaction) or own.ended:
            return None
        plan = prepared.plan(self.dialect)
        arguments = plan.arguments(params)
        literal = self._executable(plan, arguments)
        if literal is None:
            return None
        held = Deferred(literal, plan, arguments, refusals, self._listeners, self.connection, done)
        own.deferred.append(held)
        return held

    def amend(self, held: Deferred, prepared: Prepared, params: Mapping[str, Any]) -> bool:
        """Makes a statement still held back (`defer`) run `prepared` with `params` instead, in
        its place and with its refusals. False if it was sent already (or the new one cannot
        be held back): the caller then sends what it wanted on its own."""
        own = self._adapter._transaction if self._adapter is not None else None
        if not isinstance(own, OwnTransaction) or own.ended:
            return False
        if not any(each is held for each in own.deferred):
            return False
        plan = prepared.plan(self.dialect)
        arguments = plan.arguments(params)
        # Most often `prepared` takes the held statement's parameters and more after them (a
        # claim and its answer): only those more are written.
        literal = plan.literal_extend(held.plan, held.literal, cast(Sequence[Any], arguments))
        if literal is not None:
            self._prepare(plan)
        else:
            literal = self._executable(plan, arguments)
        if literal is None:
            return False
        held.literal, held.plan, held.arguments = literal, plan, arguments
        return True

    def _executable(self, plan: _Plan, arguments: Any) -> str | None:
        """`EXECUTE` of the statement with literal parameters, PREPAREd on this connection
        first if it was not (once per connection)."""
        literal = plan.literal_execute(arguments)
        if literal is None:
            return None
        self._prepare(plan)
        return literal

    def _prepare(self, plan: _Plan) -> None:
        """PREPAREs the statement by its name on this connection if it was not (once)."""
        prepared = _PREPARED.setdefault(self._driver, set())
        if plan.name not in prepared:
            self._simple(f"PREPARE {plan.name} AS {plan.sql}")
            prepared.add(plan.name)

    def _simple(self, sql: str) -> None:
        """A statement without parameters on asyncpg, in a simple query (the BEGIN)."""
        if self._listeners is not None:
            for listen in self._listeners:
                listen(self.connection, None, sql, (), None, False)
        try:
            await_(self._driver.execute(sql))
        except Exception as error:
            self._raise(sql, (), error)

    def _raise(self, sql: str, arguments: Any, error: Exception) -> NoReturn:
        try:
            self._adapter._handle_exception(error)  # raises the adapter's DBAPI error
        except self.dialect.loaded_dbapi.Error as translated:
            raise self._fail(sql, arguments, translated) from error
        raise error  # pragma: no cover - the adapter raises for every error

    def _started(self) -> None:
        """After a statement through the adapter: the transaction is begun (or the connection
        is in autocommit), and later statements may go to asyncpg."""
        if self._adapter is not None and self._driver is None:
            self._driver = self._adapter.driver_connection

    def _kept_now(self, reads: bool) -> Any:
        """SQLite: the connection's own cursor when the statement cannot wait (it reads, or the
        writer holds the write lock), told to the listeners as `_cursor` tells its; else None
        (`InlineConnection.direct_cursor`)."""
        kept = self._kept
        if kept is None or not (reads or (self._writer and self._raw.in_transaction)):
            return None
        return kept

    def _tell(self, cursor: Any, sql: str, arguments: Any, many: bool) -> None:
        if self._listeners is not None:
            for listen in self._listeners:
                listen(self.connection, cursor, sql, arguments, None, many)

    def _cursor(self, plan: _Plan, arguments: Any, many: bool) -> Any:
        cursor = self._new_cursor(plan.reads) if self._inline else self._new_cursor()
        if self._listeners is not None:
            for listen in self._listeners:
                listen(self.connection, cursor, plan.sql, arguments, None, many)
        return cursor

    def run_sql(self, sql: str) -> None:
        """A statement of the driver's own, without parameters (SQLite's `BEGIN IMMEDIATE`)."""
        kept = self._kept_now(False)
        if kept is not None:  # a savepoint's, in the writer's transaction
            self._tell(kept, sql, (), False)
            try:
                kept.execute(sql)
            except self.dialect.loaded_dbapi.Error as error:
                raise self._fail(sql, (), error) from error
            return
        cursor = self._new_cursor()
        if self._listeners is not None:
            for listen in self._listeners:
                listen(self.connection, cursor, sql, (), None, False)
        try:
            cursor.execute(sql)
        except self.dialect.loaded_dbapi.Error as error:
            raise self._fail(sql, (), error) from error
        finally:
            cursor.close()

    def commit(self) -> None:
        """The driver's COMMIT, seen by the engine's listeners as the statement it is."""
        self._end("COMMIT", self._dbapi.commit)

    def rollback(self) -> None:
        """The driver's ROLLBACK, seen by the engine's listeners as the statement it is."""
        self._end("ROLLBACK", self._dbapi.rollback)

    def _end(self, sql: str, end: Callable[[], None]) -> None:
        if self._listeners is not None:
            for listen in self._listeners:
                listen(self.connection, None, sql, (), None, False)
        try:
            end()
        except self.dialect.loaded_dbapi.Error as error:
            raise self._fail(sql, (), error) from error

    def _fail(self, sql: str, arguments: Any, error: Exception) -> exc.StatementError:
        # A connection the server dropped says so as SQLAlchemy's own would
        # (`connection_invalidated`: the request answers 503), and is not lent again: the pool
        # replaces a closed connection when it is next checked out (`kernel.db.create_engine`).
        gone = self.dialect.is_disconnect(cast(Any, error), self._dbapi, None) or closed(
            self._dbapi
        )
        return exc.DBAPIError.instance(
            sql,
            arguments,
            error,
            self.dialect.loaded_dbapi.Error,
            connection_invalidated=gone,
            dialect=self.dialect,
            ismulti=False,
        )

    def fetch(self, prepared: Prepared, params: Mapping[str, Any]) -> list[Any]:
        """Every row the statement returns (a SELECT, or DML with RETURNING), as named tuples."""
        plan = prepared.plan(self.dialect)
        arguments = plan.arguments(params)
        if self.lazy_savepoint is not None and not plan.reads:
            self._savepoint_now()
        kept = self._kept_now(plan.reads) if self._kept is not None else None
        if kept is not None:
            self._tell(kept, plan.sql, arguments, False)
            try:
                raw = kept.execute(plan.sql, arguments).fetchall()
            except self.dialect.loaded_dbapi.Error as error:
                raise self._fail(plan.sql, arguments, error) from error
            return plan.rows(raw)
        if self._driver is not None:
            return plan.rows(self._run_on_driver(plan, arguments, "fetch"))
        cursor = self._cursor(plan, arguments, False)
        try:
            cursor.execute(plan.sql, arguments)
            raw = cursor.fetchall()
        except self.dialect.loaded_dbapi.Error as error:
            raise self._fail(plan.sql, arguments, error) from error
        finally:
            cursor.close()
        self._started()
        return plan.rows(raw)

    def connection_changes(self) -> int:
        """SQLite: the rows its connection has changed since it was opened (`total_changes`)."""
        return int(self._raw.total_changes) if self._raw is not None else 0

    def _savepoint_now(self) -> None:
        hook, self.lazy_savepoint = self.lazy_savepoint, None
        if hook is not None:
            hook(False)

    def first(self, prepared: Prepared, params: Mapping[str, Any]) -> Any | None:
        rows = self.fetch(prepared, params)
        return rows[0] if rows else None

    def execute(self, prepared: Prepared, params: Mapping[str, Any]) -> int:
        """Runs a statement that returns no rows; the number of rows it changed."""
        plan = prepared.plan(self.dialect)
        arguments = plan.arguments(params)
        if self.lazy_savepoint is not None and not plan.reads:
            self._savepoint_now()
        # (A statement with rows is not run for its count on the kept cursor: closing the
        # cursor is what would end it.)
        kept = self._kept_now(plan.reads) if plan.row is None and self._kept is not None else None
        if kept is not None:
            self._tell(kept, plan.sql, arguments, False)
            try:
                count: int = kept.execute(plan.sql, arguments).rowcount
            except self.dialect.loaded_dbapi.Error as error:
                raise self._fail(plan.sql, arguments, error) from error
            return count
        if self._driver is not None:
            status = str(self._run_on_driver(plan, arguments, "execute"))
            tail = status.rpartition(" ")[2]  # "UPDATE 1", "INSERT 0 2"
            return int(tail) if tail.isdigit() else -1
        cursor = self._cursor(plan, arguments, False)
        try:
            cursor.execute(plan.sql, arguments)
            count = cursor.rowcount
        except self.dialect.loaded_dbapi.Error as error:
            raise self._fail(plan.sql, arguments, error) from error
        finally:
            cursor.close()
        self._started()
        return count

    def execute_many(self, prepared: Prepared, rows: Sequence[Mapping[str, Any]]) -> None:
        plan = prepared.plan(self.dialect)
        arguments = [plan.arguments(r) for r in rows]
        if self.lazy_savepoint is not None:
            self._savepoint_now()
        kept = self._kept_now(False) if self._kept is not None else None
        if kept is not None:
            self._tell(kept, plan.sql, arguments, True)
            try:
                kept.executemany(plan.sql, arguments)
            except self.dialect.loaded_dbapi.Error as error:
                raise self._fail(plan.sql, arguments, error) from error
            return
        if self._driver is not None:
            self._run_on_driver(plan, arguments, "executemany")
            return
        cursor = self._cursor(plan, arguments, True)
        try:
            cursor.executemany(plan.sql, arguments)
        except self.dialect.loaded_dbapi.Error as error:
            raise self._fail(plan.sql, arguments, error) from error
        finally:
            cursor.close()
        self._started()


_HELD = "multibank.direct"  # session.info: (the session's transaction, its Direct)


def in_session(session: Session, fn: Callable[..., T], *args: Any) -> T:
    """`fn(direct, *args)` on the connection of the session's transaction (begun if it was
    not). Inside a greenlet."""
    session.flush()  # what the unit of work holds is written first, as an ORM autoflush would
    # The connection of the session's transaction, found once per transaction: the session's
    # own lookup costs as much as a statement on SQLite.
    transaction = session.get_transaction()
    held = session.info.get(_HELD)
    if held is None or transaction is None or held[0] is not transaction:
        connection = session.connection()  # begins the transaction if it has not begun
        held = session.info[_HELD] = (session.get_transaction(), Direct(connection))
    return fn(held[1], *args)


async def run(db: AsyncSession, fn: Callable[Concatenate[Direct, P], T], *args: Any) -> T:
    """Calls `fn(direct, *args)` with the connection of the request's transaction (begun if it
    was not), in one greenlet hand-over however many statements `fn` sends. `db` is a session,
    or what stands in for one (`kernel.db.Unit`, `LazySession`), which knows its connection."""
    if isinstance(db, AsyncSession):
        return await spawn(in_session, db.sync_session, fn, *args)
    runner: Callable[..., Awaitable[T]] = db.run_direct
    return await runner(fn, *args)


def _fetch(direct: Direct, prepared: Prepared, params: Mapping[str, Any]) -> list[Any]:
    return direct.fetch(prepared, params)


def _execute(direct: Direct, prepared: Prepared, params: Mapping[str, Any]) -> int:
    return direct.execute(prepared, params)


async def fetch(db: AsyncSession, prepared: Prepared, params: Mapping[str, Any]) -> list[Any]:
    """One statement's rows, in the session's transaction."""
    return await run(db, _fetch, prepared, params)


async def execute(db: AsyncSession, prepared: Prepared, params: Mapping[str, Any]) -> int:
    """One statement without rows, in the session's transaction; the rows it changed."""
    return await run(db, _execute, prepared, params)


def _first(direct: Direct, prepared: Prepared, params: Mapping[str, Any]) -> Any | None:
    return direct.first(prepared, params)


async def first(db: AsyncSession, prepared: Prepared, params: Mapping[str, Any]) -> Any | None:
    """The first row of one statement (None if it returns none), in the session's transaction."""
    return await run(db, _first, prepared, params)
