"""PostgreSQL (decision 0024): a statement a write request holds back (`Direct.defer`, a fee
charge's movement) goes with the transaction's next round trip: its next statement that returns
no rows, or its COMMIT; alone before a statement whose rows are wanted, or before one SQLAlchemy
sends. A refusal it signals (a NOT NULL violation on the named column) is raised as the caller's
exception wherever it is sent, nothing of the transaction is kept, and the connection is clean
for the next request."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Column, MetaData, String, Table, bindparam, event, func, insert, select, text

from multibank.kernel.db import Database, Unit
from multibank.kernel.direct import Direct, Prepared, Refusal, _literal
from multibank.kernel.errors import Conflict
from tests.conftest import DB_KIND

pytestmark = pytest.mark.skipif(DB_KIND != "postgres", reason="asyncpg's simple queries")

_T = Table(
    "held_back_probe",
    MetaData(),
    Column("k", String(20)),
    Column("v", String(200), nullable=False),
)
_PUT = Prepared(insert(_T).values(k=bindparam("k"), v=bindparam("v")))
_GET = Prepared(select(_T.c.v).where(_T.c.k == bindparam("k")))
REFUSES = ("held_back_probe", "v")


class Refused(Conflict):
    def __init__(self) -> None:
        super().__init__("FUNDS_INSUFFICIENT")


class Taken(Exception):
    pass


@pytest.fixture
async def db(fresh_database_url: str) -> AsyncIterator[Database]:
    """One connection: a refusal that left it inside a transaction would break the next unit."""
    database = Database(fresh_database_url, pool_size=1)
    async with database.engine.begin() as conn:
        await conn.execute(
            text(
                "CREATE TABLE held_back_probe (k VARCHAR(20) CONSTRAINT held_back_probe_k UNIQUE,"
                " v VARCHAR(200) NOT NULL)"
            )
        )
    try:
        yield database
    finally:
        await database.dispose()


@contextmanager
def told(db: Database) -> Iterator[list[str]]:
    """The statements the engine's listeners are told of, as they are sent (not the PREPAREs)."""
    seen: list[str] = []

    def listen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        verb = statement.split()[0].upper()
        if verb != "PREPARE":  # once per connection, not per request
            seen.append(verb + (" probe" if "held_back_probe" in statement else ""))

    engine = db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", listen)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", listen)


def _put(d: Direct, k: str, v: str) -> int:
    return d.execute(_PUT, {"k": k, "v": v})


def _hold(d: Direct, k: str, v: str | None, before_reads: bool = False) -> bool:
    refusals = (Refusal(Refused(), null=REFUSES), Refusal(Taken(), unique="held_back_probe_k"))
    return d.defer(_PUT, {"k": k, "v": v}, refusals, before_reads=before_reads) is not None


def _get(d: Direct, k: str) -> Any:
    row = d.first(_GET, {"k": k})
    return None if row is None else row.v


async def _rows(db: Database) -> dict[str, str]:
    async with db.engine.connect() as conn:
        return dict((await conn.execute(select(_T.c.k, _T.c.v))).all())  # type: ignore[arg-type]


async def _begun(db: Database, k: str = "a") -> Unit:
    unit = db.unit()
    assert await unit.run_direct(_put, k, "first") == 1  # the BEGIN goes with it
    return unit


async def test_held_back_until_the_commit(db: Database) -> None:
    with told(db) as seen:
        unit = await _begun(db)
        try:
            assert seen == ["BEGIN", "INSERT probe"]  # in one query
            assert await unit.run_direct(_hold, "b", "held") is True
            assert seen == ["BEGIN", "INSERT probe"]  # nothing sent yet
            await unit.commit()
            assert seen == ["BEGIN", "INSERT probe", "INSERT probe", "COMMIT"]  # in one query
        finally:
            await unit.close()
    assert await _rows(db) == {"a": "first", "b": "held"}


async def test_held_back_goes_with_the_next_statement_and_the_stored_answer(
    db: Database,
) -> None:
    unit = await _begun(db)
    try:
        await unit.run_direct(_hold, "b", "held")
        await unit.run_direct(_put, "c", "next")
        await unit.run_direct(_hold, "d", "held too")
        await unit.commit(_put, "e", "last")  # the request's last statement, with the COMMIT
    finally:
        await unit.close()
    assert await _rows(db) == {
        "a": "first",
        "b": "held",
        "c": "next",
        "d": "held too",
        "e": "last",
    }


async def test_a_read_after_it_sees_it(db: Database) -> None:
    unit = await _begun(db)
    try:
        await unit.run_direct(_hold, "b", "held")
        assert await unit.run_direct(_get, "b") == "held"  # sent alone first
        await unit.run_direct(_hold, "c", "held")
        # SQLAlchemy's own statement, through the session on the same transaction.
        found = (await unit.session.execute(select(_T.c.v).where(_T.c.k == "c"))).scalar_one()
        assert found == "held"
        await unit.session.commit()
    finally:
        await unit.close()
    assert await _rows(db) == {"a": "first", "b": "held", "c": "held"}


@pytest.mark.parametrize("sent_with", ["commit", "last statement", "next statement", "read"])
async def test_a_refusal_is_the_callers_and_keeps_nothing(db: Database, sent_with: str) -> None:
    unit = await _begun(db)
    try:
        await unit.run_direct(_hold, "b", None)  # NULL where NOT NULL: the refusal
        with pytest.raises(Refused):
            if sent_with == "commit":
                await unit.commit()
            elif sent_with == "last statement":
                await unit.commit(_put, "c", "last")
            elif sent_with == "next statement":
                await unit.run_direct(_put, "c", "next")
            else:
                await unit.run_direct(_get, "a")
        await unit.rollback()
    finally:
        await unit.close()
    assert await _rows(db) == {}
    # The one connection is out of that transaction: the next request's works.
    unit = await _begun(db, "z")
    try:
        await unit.run_direct(_hold, "y", "held")
        await unit.commit()
    finally:
        await unit.close()
    assert await _rows(db) == {"z": "first", "y": "held"}


async def test_a_rollback_drops_it_unsent(db: Database) -> None:
    with told(db) as seen:
        unit = await _begun(db)
        try:
            await unit.run_direct(_hold, "b", "held")
            await unit.rollback()
        finally:
            await unit.close()
    assert seen == ["BEGIN", "INSERT probe"]
    assert await _rows(db) == {}


async def test_not_held_back_outside_a_units_own_transaction(db: Database) -> None:
    unit = db.unit()
    try:
        # Not begun yet: there is no round trip to go with.
        assert await unit.run_direct(_hold, "b", "x") is False
        await unit.run_direct(_put, "a", "first")
        assert unit.session is not None  # SQLAlchemy's connection over it, whose statements
        # do not pass by `Direct`
        assert await unit.run_direct(_hold, "b", "x") is False
        await unit.session.commit()
    finally:
        await unit.close()
    assert await _rows(db) == {"a": "first"}


async def test_held_back_before_the_begin_reads_first(db: Database) -> None:
    """`before_reads`: nothing is sent until a write or the commit; a read runs before the
    transaction (it does not see what is held back), and the BEGIN goes with the rest."""
    async with db.engine.begin() as conn:
        await conn.execute(insert(_T).values(k="old", v="committed"))
    with told(db) as seen:
        unit = db.unit()
        try:
            assert await unit.run_direct(_hold, "a", "held", True) is True
            assert seen == []
            assert await unit.run_direct(_get, "old") == "committed"
            assert await unit.run_direct(_get, "a") is None  # not sent yet
            assert seen == ["SELECT probe", "SELECT probe"]
            await unit.run_direct(_hold, "b", "held too")
            await unit.commit(_put, "c", "last")  # BEGIN, both held, this and COMMIT in one
            assert seen[2:] == ["BEGIN", "INSERT probe", "INSERT probe", "INSERT probe", "COMMIT"]
        finally:
            await unit.close()
    assert await _rows(db) == {"old": "committed", "a": "held", "b": "held too", "c": "last"}


async def test_held_back_before_the_begin_then_nothing_else(db: Database) -> None:
    for end in ("commit", "rollback"):
        unit = db.unit()
        try:
            assert await unit.run_direct(_hold, end, "held", True) is True
            if end == "commit":
                await unit.commit()
            else:
                await unit.rollback()
        finally:
            await unit.close()
    assert await _rows(db) == {"commit": "held"}


async def test_a_unique_refusal_before_the_begin(db: Database) -> None:
    async with db.engine.begin() as conn:
        await conn.execute(insert(_T).values(k="a", v="first"))
    unit = db.unit()
    try:
        await unit.run_direct(_hold, "a", "again", True)
        await unit.run_direct(_hold, "b", "held")
        with pytest.raises(Taken):
            await unit.commit()
    finally:
        await unit.close()
    assert await _rows(db) == {"a": "first"}
    unit = await _begun(db, "z")  # the one connection is clean
    try:
        await unit.commit()
    finally:
        await unit.close()
    assert await _rows(db) == {"a": "first", "z": "first"}


async def test_a_write_before_the_begin_sends_it_first(db: Database) -> None:
    unit = db.unit()
    try:
        await unit.run_direct(_hold, "a", "held", True)
        unit.session.add  # noqa: B018 - SQLAlchemy's connection over it, from here on
        await unit.session.execute(insert(_T).values(k="b", v="orm"))
        await unit.session.commit()
    finally:
        await unit.close()
    assert await _rows(db) == {"a": "held", "b": "orm"}


_PUT_UPPER = Prepared(insert(_T).values(k=bindparam("k"), v=func.upper(bindparam("v"))))


def _hold_and_amend(d: Direct, k: str, v: str) -> tuple[bool, bool]:
    """Holds `_PUT` back, then makes it `_PUT_UPPER` while it is still held: whether amended;
    then once more after a read sent it: whether amended then."""
    held = d.defer(_PUT, {"k": k, "v": "lower"}, ())
    assert held is not None
    before = d.amend(held, _PUT_UPPER, {"k": k, "v": v})
    d.first(_GET, {"k": k})  # sends what is held back, alone
    return before, d.amend(held, _PUT_UPPER, {"k": k, "v": "too late"})


async def test_a_held_statement_amended_runs_instead_in_its_place(db: Database) -> None:
    """`Direct.amend` (decision 0032: a held claim takes its answer in the same INSERT)."""
    with told(db) as seen:
        unit = await _begun(db)
        try:
            assert await unit.run_direct(_hold_and_amend, "b", "amended") == (True, False)
            assert seen == ["BEGIN", "INSERT probe", "INSERT probe", "SELECT probe"]
            await unit.commit()
        finally:
            await unit.close()
    assert await _rows(db) == {"a": "first", "b": "AMENDED"}


_AWKWARD = [
    "",
    "plain",
    "it's \\ \"quoted\" \\x41 \\' $$ $ $1 E'x'",
    "$mb",
    "x$mb$y",
    "ends with $m",
    "ends with $mb",
    "$mb$); DROP TABLE held_back_probe; --",
    "ünïcödé €",
    "line\nbreak\ttab\r",
]


@pytest.mark.parametrize("value", _AWKWARD)
async def test_a_held_statements_text_arrives_as_it_was(db: Database, value: str) -> None:
    """A held statement goes as literal SQL (`EXECUTE name(literals)`): whatever the text holds,
    the row holds that text, in the literal forms (dollar-quoted, hex) as the value chooses."""
    unit = db.unit()
    try:
        assert await unit.run_direct(_hold, "k", value, True) is True
        await unit.commit()
    finally:
        await unit.close()
    assert await _rows(db) == {"k": value}


def test_literals_take_the_cheap_form_only_where_it_is_safe() -> None:
    assert _literal("abc") == "$mb$abc$mb$"
    assert _literal(b"\x00\xff") == "$mb$\\x00ff$mb$"
    for value in ("a$mb", "$mb$", "é", "nul\x00"):
        assert str(_literal(value)).startswith("convert_from(decode('")
