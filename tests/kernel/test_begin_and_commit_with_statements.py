"""PostgreSQL (decision 0023): a write request's BEGIN goes in one query with its first
statement, and its COMMIT with its last, each statement EXECUTEd (PREPAREd once per connection)
with its parameters written as literals: text as hex digits, so nothing a client sends is read
as SQL, whatever it holds."""

from __future__ import annotations

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


async def _db(url: str) -> Database:
    db = Database(url)
    async with db.engine.begin() as conn:
        await conn.execute(text("DROP TABLE IF EXISTS begin_commit_probe"))
        await conn.execute(text("CREATE TABLE begin_commit_probe (k VARCHAR(20), v VARCHAR(200))"))
    return db


def _put(d: Direct, k: str, v: str) -> int:
    return d.execute(_PUT, {"k": k, "v": v})


def _set(d: Direct, k: str, v: str) -> None:
    d.execute(_SET, {"k": k, "v": v})


async def _read(db: Database, k: str) -> Any:
    async with db.engine.connect() as conn:
        return (await conn.execute(select(_T.c.v).where(_T.c.k == k))).scalar_one_or_none()


async def test_text_of_any_kind_goes_through_as_it_is(fresh_database_url: str) -> None:
    db = await _db(fresh_database_url)
    try:
        for round_ in range(2):  # the second on a connection where the statements are PREPAREd
            unit = db.unit()
            assert await unit.run_direct(_put, f"k{round_}", AWKWARD) == 1
            await unit.commit(_set, f"k{round_}", AWKWARD + "!")
            await unit.close()
            assert await _read(db, f"k{round_}") == AWKWARD + "!"
    finally:
        await db.dispose()


async def test_a_failed_first_statement_leaves_nothing_open(fresh_database_url: str) -> None:
    db = await _db(fresh_database_url)
    try:
        unit = db.unit()
        with pytest.raises(Exception, match="too long"):
            await unit.run_direct(_put, "long", "x" * 201)  # VARCHAR(200)
        await unit.rollback()
        await unit.close()
        # The connection went back to the pool with no transaction open: the next unit's work
        # commits, and nothing of the failed one is there.
        unit = db.unit()
        await unit.run_direct(_put, "after", "ok")
        await unit.commit()
        await unit.close()
        assert await _read(db, "after") == "ok"
        assert await _read(db, "long") is None
    finally:
        await db.dispose()


async def test_a_unit_rolled_back_after_its_begin_keeps_nothing(fresh_database_url: str) -> None:
    db = await _db(fresh_database_url)
    try:
        unit = db.unit()
        await unit.run_direct(_put, "undone", "x")
        await unit.rollback()
        await unit.close()
        assert await _read(db, "undone") is None
    finally:
        await db.dispose()
