"""PostgreSQL (decision 0023): a write request's BEGIN goes in one query with its first
statement, and its COMMIT with its last, each statement EXECUTEd (PREPAREd once per connection)
with its parameters written as literals: text as hex digits, so nothing a client sends is read
as SQL, whatever it holds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import Column, MetaData, String, Table, bindparam, insert, select, text, update

from multibank.kernel.db import Database
from multibank.kernel.direct import Direct, Prepared
from tests.conftest import DB_KIND

pytestmark = pytest.mark.skipif(DB_KIND != "postgres", reason="asyncpg's simple queries")

_T = Table("begin_commit_probe", MetaData(), Column("k", String(20)), Column("v", String(200)))
_PUT = Prepared(insert(_T).values(k=bindparam("k"), v=bindparam("v")))
_SET = Prepared(update(_T).where(_T.c.k == bindparam("k")).values(v=bindparam("v")))

AWKWARD = "it's a \\'; DROP TABLE begin_commit_probe; -- $1 $$ € \U0001f4b6 \\x00"


@pytest.fixture
async def db(fresh_database_url: str) -> AsyncIterator[Database]:
    """A database with the probe table, on one connection: every unit of a test uses the same,
    so what one PREPAREd the next finds there."""
    database = Database(fresh_database_url, pool_size=1)
    async with database.engine.begin() as conn:
        await conn.execute(text("CREATE TABLE begin_commit_probe (k VARCHAR(20), v VARCHAR(200))"))
    try:
        yield database
    finally:
        await database.dispose()


def _put(d: Direct, k: str, v: str) -> int:
    return d.execute(_PUT, {"k": k, "v": v})


def _set(d: Direct, k: str, v: str) -> None:
    d.execute(_SET, {"k": k, "v": v})


async def _read(db: Database, k: str) -> Any:
    async with db.engine.connect() as conn:
        return (await conn.execute(select(_T.c.v).where(_T.c.k == k))).scalar_one_or_none()


async def _put_then_set(db: Database, k: str, first: str, last: str) -> None:
    """A unit whose first statement goes with its BEGIN and whose last with its COMMIT."""
    unit = db.unit()
    try:
        assert await unit.run_direct(_put, k, first) == 1
        await unit.commit(_set, k, last)
    finally:
        await unit.close()


async def test_text_of_any_kind_goes_through_as_it_is(db: Database) -> None:
    for round_ in range(2):  # the second with both statements PREPAREd on the connection
        await _put_then_set(db, f"k{round_}", AWKWARD, AWKWARD + "!")
        assert await _read(db, f"k{round_}") == AWKWARD + "!"


async def test_a_failed_first_statement_leaves_nothing_open(db: Database) -> None:
    unit = db.unit()
    with pytest.raises(Exception, match="too long"):
        await unit.run_direct(_put, "long", "x" * 201)  # VARCHAR(200)
    await unit.rollback()
    await unit.close()
    # The connection went back to the pool with no transaction open: the next unit's work
    # commits, and nothing of the failed one is there.
    await _put_then_set(db, "after", "ok", "ok")
    assert await _read(db, "after") == "ok"
    assert await _read(db, "long") is None


async def test_a_failed_last_statement_commits_nothing_and_the_next_unit_goes_on(
    db: Database,
) -> None:
    """The last statement fails in the query that carries the COMMIT: nothing is committed, and
    what the connection PREPAREd in that transaction is still there for the next unit."""
    with pytest.raises(Exception, match="too long"):
        await _put_then_set(db, "undone", "x", "y" * 201)
    assert await _read(db, "undone") is None
    await _put_then_set(db, "next", "a", "b")
    assert await _read(db, "next") == "b"


async def test_a_unit_rolled_back_after_its_begin_keeps_nothing(db: Database) -> None:
    unit = db.unit()
    await unit.run_direct(_put, "undone", "x")
    await unit.rollback()
    await unit.close()
    assert await _read(db, "undone") is None
