"""SQLite's group commit (kernel/db.GroupCommit, decision 0021): write requests that meet share
one commit, each in a savepoint of its own; a request's failure undoes its own work alone; a
request answers only once its work is committed; a failed commit fails the whole group; a
request's ORM session keeps its transaction semantics inside the group; and the connection's
other users (jobs) still get it between groups.

These run on SQLite files whatever `MULTIBANK_TEST_DB` says: PostgreSQL commits each request's
transaction on a connection of its own, and has no group."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    BigInteger,
    Column,
    MetaData,
    String,
    Table,
    bindparam,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.kernel import db as db_module
from multibank.kernel import direct, sqlite_inline
from multibank.kernel.db import AFTER_DURABLE_COMMIT, Database
from multibank.kernel.direct import Direct, Prepared

META = MetaData()
ROWS = Table("rows", META, Column("id", BigInteger, primary_key=True), Column("note", String(20)))
INSERT = Prepared(insert(ROWS), keys=("id", "note"))


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'group.db'}")
    assert database.group is not None
    async with database.transaction() as session:
        await session.execute(text("CREATE TABLE rows (id INTEGER PRIMARY KEY, note VARCHAR(20))"))
    yield database
    await database.dispose()


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions `kernel.db` hands to a greenlet, in order."""
    names: list[str] = []
    real = db_module.spawn

    async def counting(fn: Any, *args: Any, **kwargs: Any) -> Any:
        names.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(db_module, "spawn", counting)
    return names


def committed(db: Database) -> set[int]:
    """The rows another connection sees: what is committed."""
    path = db.url.split("///", 1)[1]
    other = sqlite3.connect(path)
    try:
        return {row[0] for row in other.execute("SELECT id FROM rows")}
    finally:
        other.close()


async def request(db: Database, row: int, fail: bool = False) -> set[int]:
    """One write request as `api/routing.py` runs it: its statement, then commit (or, when it
    fails, rollback), then close. Returns what is committed the moment it answers."""
    unit = db.unit()
    try:
        await direct.execute(unit, INSERT, {"id": row, "note": "request"})
        await asyncio.sleep(0)  # what a request awaits between its statements
        if fail:
            await unit.rollback()
            return committed(db)
        await unit.commit()
        return committed(db)
    finally:
        await unit.close()


async def test_requests_that_meet_share_one_commit(db: Database) -> None:
    assert db.group is not None
    seen = await asyncio.gather(*(request(db, row) for row in range(1, 21)))
    assert committed(db) == set(range(1, 21))
    # Each request answered once its own row was committed...
    assert all(row in seen[row - 1] for row in range(1, 21))
    # ...and twenty requests took fewer commits than that.
    assert 1 <= db.group.commits < 20


async def test_a_failed_request_is_undone_alone(db: Database) -> None:
    await asyncio.gather(request(db, 1), request(db, 2, fail=True), request(db, 3))
    assert committed(db) == {1, 3}


async def test_a_failed_commit_fails_every_request_of_the_group(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Direct) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(Direct, "commit", broken)
    outcomes = await asyncio.gather(
        *(request(db, row) for row in range(1, 6)), return_exceptions=True
    )
    assert all(isinstance(outcome, Exception) for outcome in outcomes), outcomes
    assert committed(db) == set()
    monkeypatch.undo()
    # The writer is free again, and the next request commits as usual.
    assert 6 in await request(db, 6)


async def session_request(db: Database, row: int, fail: bool) -> None:
    """A request that also uses the ORM session: its prepared statement first (as a write's
    renewal is), then a Core statement through the session."""
    unit = db.unit()
    session: Any = unit
    try:
        await direct.execute(unit, INSERT, {"id": row, "note": "prepared"})
        await session.execute(insert(ROWS).values(id=row + 100, note="session"))
        await asyncio.sleep(0)
        if fail:
            await unit.rollback()
        else:
            await unit.commit()
    finally:
        await unit.close()


async def test_a_session_in_a_group_commits_and_rolls_back_with_its_request(
    db: Database,
) -> None:
    await asyncio.gather(
        session_request(db, 1, fail=False),
        session_request(db, 2, fail=True),
        request(db, 3),
    )
    assert committed(db) == {1, 101, 3}


async def test_jobs_get_the_writer_between_groups(db: Database) -> None:
    async def job() -> None:
        async with db.transaction() as session:
            await session.execute(insert(ROWS).values(id=999, note="job"))

    await asyncio.gather(*(request(db, row) for row in range(1, 11)), job())
    assert committed(db) == {*range(1, 11), 999}


async def test_a_request_that_keeps_nothing_ends_its_group_at_once(db: Database) -> None:
    """A replay or a refusal: its savepoint is rolled back, and alone in its group the
    transaction is rolled back too, before it answers."""
    unit = db.unit()
    await direct.execute(unit, INSERT, {"id": 1, "note": "undone"})
    await unit.rollback()
    await unit.close()
    assert committed(db) == set()
    assert await request(db, 2) == {2}
    async with AsyncSession(db.engine) as session:
        assert (await session.execute(select(ROWS.c.id))).scalars().all() == [2]


async def test_a_private_in_memory_database_commits_each_request_alone() -> None:
    """One connection serves every request of an in-memory database, reads included: it has no
    group, and a request's work is committed, and seen, as it answers."""
    database = Database("sqlite:///:memory:")
    assert database.group is None and database.read_engine is database.engine
    async with database.transaction() as session:
        await session.execute(text("CREATE TABLE rows (id INTEGER PRIMARY KEY, note VARCHAR(20))"))
    unit = database.unit()
    await direct.execute(unit, INSERT, {"id": 1, "note": "alone"})
    await unit.commit()
    await unit.close()
    async with AsyncSession(database.read_engine) as session:
        assert (await session.execute(select(ROWS.c.id))).scalars().all() == [1]
    await database.dispose()


async def test_a_request_that_rolled_back_can_write_again(db: Database) -> None:
    """A page that refuses (rolls back) and then writes takes a new turn: its first session
    went with the group it left, whose connection others now use."""
    unit = db.unit()
    session: Any = unit
    await direct.execute(unit, INSERT, {"id": 1, "note": "undone"})
    await session.execute(insert(ROWS).values(id=2, note="undone"))
    await unit.rollback()
    others = asyncio.gather(request(db, 3), request(db, 4))
    await session.execute(insert(ROWS).values(id=5, note="again"))
    await unit.commit()
    await unit.close()
    await others
    assert committed(db) == {3, 4, 5}


async def test_what_waits_for_durability_runs_after_the_group_commit(db: Database) -> None:
    """The auth cache drops what a request changed again once it is durable (decision 0013):
    in a group, after the group's commit, not at the session's savepoint release; and not at
    all for a request that rolled back."""
    seen: list[set[int]] = []

    async def with_hook(row: int, fail: bool) -> None:
        unit = db.unit()
        session: Any = unit
        await direct.execute(unit, INSERT, {"id": row, "note": "hooked"})
        await session.execute(insert(ROWS).values(id=row + 100, note="session"))
        session.info[AFTER_DURABLE_COMMIT].append(lambda: seen.append(committed(db)))
        await asyncio.sleep(0)
        if fail:
            await unit.rollback()
        else:
            await unit.commit()
        await unit.close()

    await asyncio.gather(with_hook(1, fail=False), request(db, 2), with_hook(3, fail=True))
    # Once, for the request that kept its work, and only when that work was committed.
    assert len(seen) == 1 and {1, 101} <= seen[0], seen


async def test_a_request_cancelled_as_it_leaves_does_not_hold_up_its_group(
    db: Database,
) -> None:
    """The request that would commit the group is cancelled while it lets the loop run: the
    group is still committed (its work included), and the others of the group answer."""

    async def quick(row: int) -> None:
        unit = db.unit()
        await direct.execute(unit, INSERT, {"id": row, "note": "quick"})
        await unit.commit()
        await unit.close()

    async def slow(row: int) -> None:
        unit = db.unit()
        await direct.execute(unit, INSERT, {"id": row, "note": "slow"})
        await asyncio.sleep(0)  # holds the writer across a turn of the loop
        await unit.commit()
        await unit.close()

    other = asyncio.create_task(quick(3))  # done first; waits for the group's commit
    last = asyncio.create_task(slow(1))  # joins, and would commit the group itself
    await asyncio.sleep(0)  # `other` lets the loop run; `last` takes the writer
    await asyncio.sleep(0)  # `other` waits for the commit; `last` lets the loop run
    last.cancel()
    await asyncio.wait_for(other, 5)
    with pytest.raises(asyncio.CancelledError):
        await last
    assert committed(db) == {1, 3}


async def test_a_request_joins_an_open_group_without_a_greenlet_when_the_writer_is_free(
    db: Database, spawned: list[str]
) -> None:
    """Decision 0029: while a group's transaction is open and nobody has the writer, a request's
    first statements take it and their savepoint at once, inline; the group still commits
    both requests in one commit."""
    assert db.group is not None
    first = db.unit()
    await direct.execute(first, INSERT, {"id": 1, "note": "first"})
    assert spawned == ["_run_taken"]  # it began the group (its BEGIN may wait)
    committing = asyncio.create_task(first.commit())
    await asyncio.sleep(0)  # it released its savepoint and passed the writer on
    assert db.group.open_and_free()
    second = db.unit()
    try:
        await direct.execute(second, INSERT, {"id": 2, "note": "second"})
        assert spawned == ["_run_taken"]  # joined without one
        assert not db.group.open_and_free()  # it has the writer now
        await second.commit()
        await committing
    finally:
        await second.close()
        await first.close()
    assert committed(db) == {1, 2}
    assert db.group.commits == 1
    assert not db.group.open_and_free()  # committed: no group is open


async def test_a_request_that_waits_for_the_writer_waits_without_a_greenlet(
    db: Database, spawned: list[str]
) -> None:
    """Decision 0033: a request that finds the writer taken waits for its turn on the event
    loop; the group's transaction still open when its turn comes, its statements run inline,
    and the group commits both requests in one commit."""
    assert db.group is not None
    first, second = db.unit(), db.unit()
    try:
        await direct.execute(first, INSERT, {"id": 1, "note": "first"})
        waiting = asyncio.create_task(direct.execute(second, INSERT, {"id": 2, "note": "2nd"}))
        await asyncio.sleep(0)
        assert not waiting.done()  # the first has the writer until it commits
        committing = asyncio.create_task(first.commit())
        await asyncio.wait_for(waiting, 5)  # its turn came, the group still open
        await second.commit()
        await committing
    finally:
        await second.close()
        await first.close()
    assert spawned == ["_run_taken"]  # the group's BEGIN alone
    assert committed(db) == {1, 2}
    assert db.group.commits == 1


async def test_a_request_cancelled_while_it_waits_for_the_writer_passes_nothing_on(
    db: Database,
) -> None:
    """A request cancelled while it waits for its turn (`GroupCommit.take_turn`) leaves the
    writer to the one that has it, and the next one gets it after that one."""
    assert db.group is not None
    first, second, third = db.unit(), db.unit(), db.unit()
    try:
        await direct.execute(first, INSERT, {"id": 1, "note": "first"})
        cancelled = asyncio.create_task(direct.execute(second, INSERT, {"id": 2, "note": "x"}))
        waiting = asyncio.create_task(direct.execute(third, INSERT, {"id": 3, "note": "third"}))
        await asyncio.sleep(0)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert not waiting.done()  # the first still has the writer
        committing = asyncio.create_task(first.commit())
        await asyncio.wait_for(waiting, 5)
        await third.commit()
        await committing
    finally:
        for unit in (first, second, third):
            await unit.close()
    assert committed(db) == {1, 3}


async def test_a_savepoint_that_fails_as_a_request_joins_fails_its_group_and_frees_the_writer(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request joining an open group inline (decision 0029) whose savepoint fails (a disk
    error) aborts the group as `GroupCommit.abort` says, outside a greenlet as within one: the
    group's requests fail, nothing of them is kept, and the next write has the writer."""
    assert db.group is not None
    first = db.unit()
    await direct.execute(first, INSERT, {"id": 1, "note": "first"})
    committing = asyncio.create_task(first.commit())
    await asyncio.sleep(0)
    assert db.group.open_and_free()
    real = Direct.run_sql

    def failing(self: Direct, sql: str) -> None:
        if sql == "SAVEPOINT request":
            raise sqlite3.OperationalError("disk I/O error")
        real(self, sql)

    monkeypatch.setattr(Direct, "run_sql", failing)
    second = db.unit()
    try:
        with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
            await direct.execute(second, INSERT, {"id": 2, "note": "second"})
    finally:
        monkeypatch.setattr(Direct, "run_sql", real)
        await second.close()
    with pytest.raises(sqlite3.OperationalError):
        await committing
    await first.close()
    assert await request(db, 3) == {3}


async def test_a_request_leaves_its_group_without_a_greenlet_unless_its_commit_awaits(
    db: Database, spawned: list[str]
) -> None:
    """Decision 0030: a request that kept its work releases its savepoint, waits for the group
    and commits it on the event loop itself; only a commit that awaits (the writer copying what
    a checkpoint left) takes a greenlet, and then commits as well."""
    assert db.group is not None
    assert (await request(db, 1)) == {1}
    assert spawned == ["_run_taken"]  # it began the group; leaving and committing took none
    checkpoints = sqlite_inline.checkpoints_of(db.url.split("///", 1)[1])
    assert checkpoints is not None
    checkpoints.catch_up = True  # a checkpoint ended: the next commit copies what it left
    spawned.clear()
    assert (await request(db, 2)) == {1, 2}
    assert spawned == ["_run_taken", "_commit"]
    assert not checkpoints.catch_up
    assert db.group.commits == 2


async def test_a_request_that_arrives_while_one_waits_for_its_commit_joins_its_group(
    db: Database,
) -> None:
    """A request whose bytes arrive as one finishes its work has its task made in one loop turn
    and reaches the database in the next: the finished one lets two turns run before its group
    commits, so both go in one commit (decision 0032)."""
    assert db.group is not None
    await request(db, 0)  # the writer's connection is made (a group older than 20 ms commits)
    loop = asyncio.get_running_loop()
    late: list[asyncio.Future[set[int]]] = []
    before = db.group.commits
    unit = db.unit()
    try:
        await direct.execute(unit, INSERT, {"id": 1, "note": "first"})
        # As the server's protocol does for a request that arrives: a callback makes its task.
        loop.call_soon(lambda: late.append(asyncio.ensure_future(request(db, 2))))
        await unit.commit()
        seen = committed(db)
    finally:
        await unit.close()
    assert 2 in await late[0]
    assert seen == {0, 1, 2}  # 1 and 2 committed together
    assert db.group.commits == before + 1


# Decision 0034: a request's savepoint is taken before its first write, and not at all when its
# first write checks everything that could refuse it (`Direct.first_checked`).
READ = Prepared(select(ROWS.c.id).where(ROWS.c.id == bindparam("id")))
CLAIM = Prepared(
    update(ROWS).where(ROWS.c.id == bindparam("id")).values(note="claimed").returning(ROWS.c.id)
)


async def test_a_request_takes_its_savepoint_at_its_first_write_not_its_first_read(
    db: Database, sent: list[str]
) -> None:
    unit = db.unit()
    try:
        assert await direct.first(unit, READ, {"id": 1}) is None
        assert "SAVEPOINT request" not in sent
        await direct.execute(unit, INSERT, {"id": 1, "note": "written"})
        assert sent.count("SAVEPOINT request") == 1
        await unit.commit()
    finally:
        await unit.close()
    assert sent.index("SAVEPOINT request") < sent.index("RELEASE request")
    assert committed(db) == {1}


async def test_a_request_that_fails_before_writing_leaves_its_group_as_it_was(
    db: Database, sent: list[str]
) -> None:
    """It read, and its checked write changed nothing: no savepoint was taken, nothing is
    rolled back, and the request that kept its work in the same group is committed."""
    await request(db, 0)
    kept = db.unit()
    refused = db.unit()
    try:
        await direct.execute(kept, INSERT, {"id": 1, "note": "kept"})
        committing = asyncio.create_task(kept.commit())
        await asyncio.sleep(0)
        sent.clear()
        assert await direct.run(refused, lambda d: d.first_checked(CLAIM, {"id": 42})) is None
        await refused.rollback()
        await committing
    finally:
        await refused.close()
        await kept.close()
    assert not any(sql.startswith(("SAVEPOINT", "ROLLBACK")) for sql in sent), sent
    assert committed(db) == {0, 1}


async def test_a_request_whose_checked_write_wrote_goes_on_without_a_savepoint(
    db: Database, sent: list[str]
) -> None:
    await request(db, 7)
    unit = db.unit()
    try:

        def claim_then_write(d: Direct) -> Any:
            row = d.first_checked(CLAIM, {"id": 7})
            d.execute(INSERT, {"id": 8, "note": "after"})  # after it, none is taken either
            return row

        sent.clear()
        assert (await direct.run(unit, claim_then_write)).id == 7
        await unit.commit()
    finally:
        await unit.close()
    assert not any("SAVEPOINT" in sql or "RELEASE" in sql for sql in sent), sent
    assert committed(db) == {7, 8}


@pytest.mark.parametrize("how", ["after a checked write", "behind Direct's back"])
async def test_a_request_that_fails_after_writing_without_a_savepoint_fails_its_group(
    db: Database, how: str
) -> None:
    """Its writes cannot be undone alone: the group's transaction is rolled back and the other
    requests of the group fail, as when a commit fails; nothing of any is kept, and the next
    request has the writer. (Only a fault comes here: a request that writes without a savepoint
    has checked, in its first write, everything that refuses it.)"""
    await request(db, 7)
    kept, failing = db.unit(), db.unit()
    try:
        await direct.execute(kept, INSERT, {"id": 1, "note": "kept"})
        committing = asyncio.create_task(kept.commit())
        await asyncio.sleep(0)
        if how == "after a checked write":
            await direct.run(failing, lambda d: d.first_checked(CLAIM, {"id": 7}))
        else:
            assert await direct.first(failing, READ, {"id": 7}) is not None  # its turn, no write
            raw = failing._pooled.dbapi_connection.raw  # type: ignore[union-attr]
            raw.execute("INSERT INTO rows (id, note) VALUES (2, 'unseen')")
        await failing.rollback()
        with pytest.raises(RuntimeError):
            await committing
    finally:
        await failing.close()
        await kept.close()
    assert committed(db) == {7}
    async with AsyncSession(db.engine) as session:
        note = (await session.execute(select(ROWS.c.note).where(ROWS.c.id == 7))).scalar_one()
    assert note == "request"  # the claim was rolled back with the group
    assert 3 in await request(db, 3)
