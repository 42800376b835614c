"""Work the programme clock makes due, and the one rule by which it is taken (issue 42 §3).

A kind of due work (`DueWork`) names its table, the query of its rows due over every programme
(`due`: ids, oldest first, at most `BATCH`, binding `NOW`, the server's clock, to which each
programme adds its own offset), what a row must still be when it is claimed, and its step.
Whoever looks takes each due row the same way: every server process's `DueWorker`, and the
simulator's and the portal's `clock/advance` and the CLI's `clock` once the programme's new time
is committed (`catch_up`, the same queries narrowed to one programme).

The rule: each row in a transaction of its own, claimed with `FOR UPDATE SKIP LOCKED` and re-read
under the lock (`populate_existing`), its step run with the programme's clock as it is at that
moment. A row another transaction holds is skipped, not waited for: that transaction decides what
becomes of it, or a later round takes it; so each step happens once however many processes look,
and no step waits for a row while it holds others. A step is in the same transaction as its
state change, so a process killed mid-step leaves it undone and due. A step that loses a race in
the database (kernel/conflicts.py) is rolled back and left due for the next round. (SQLite
writes are serial anyway: the claim's lock clause is a no-op there.)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, Select, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.kernel import conflicts
from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.kernel.loop import PeriodicWorker
from multibank.programmes.context import Ctx
from multibank.programmes.models import Programme

log = logging.getLogger("multibank.due")
BATCH = 50
# The server's clock (epoch ms): a `due` query adds each programme's `clock_offset_ms` to it.
NOW = bindparam("now", type_=BigInteger)
PROGRAMME = bindparam("programme_id", type_=BigInteger)
ROW = bindparam("row_id", type_=BigInteger)


@dataclass(frozen=True)
class DueWork:
    """One kind of step on the programme clock. `entity` is a mapped class with `id` and
    `programme_id`; `due` selects its ids due by `NOW`, joined to `Programme` for the offset,
    ordered and limited to `BATCH`; `step` runs on the claimed row and answers whether it did
    anything (a row found not due after all answers False)."""

    name: str
    entity: Any
    due: Select[int]
    step: Callable[[Ctx, Any], Awaitable[bool]]
    still_due: ColumnElement[bool] | None = None

    # Built once each: every process runs them every second, and most rounds find nothing.
    @cached_property
    def due_in_programme(self) -> Select[int]:
        return self.due.where(self.entity.programme_id == PROGRAMME)

    @cached_property
    def claim(self) -> Select[Any]:
        stmt = select(self.entity).where(self.entity.id == ROW)
        if self.still_due is not None:
            stmt = stmt.where(self.still_due)
        return stmt.with_for_update(skip_locked=True).execution_options(populate_existing=True)

    async def take(self, session: AsyncSession, clock: Clock, row_id: int) -> bool:
        """The row's step in `session`, unless another transaction holds the row or it is no
        longer due."""
        row = (await session.execute(self.claim, {"row_id": row_id})).scalar_one_or_none()
        if row is None:
            return False
        programme = await session.get(Programme, row.programme_id, populate_existing=True)
        if programme is None:
            return False
        return await self.step(
            Ctx(session, programme, clock.now_ms(programme.clock_offset_ms)), row
        )


async def alone(db: Database, clock: Clock, work: DueWork, row_id: int) -> bool:
    """`work.take` in a transaction of its own; False when it lost a race in the database: what
    it did was rolled back, and the step is still due."""
    try:
        async with db.transaction() as session:
            return await work.take(session, clock, row_id)
    except Exception as error:
        if not conflicts.lost_race(error):
            raise
        log.warning(
            "a %s step lost a race in the database (%s): left for the next round",
            work.name,
            conflicts.sqlstate(error),
        )
        return False


async def due_ids(db: Database, stmt: Select[int], params: dict[str, int]) -> list[int]:
    async with db.read_sessionmaker() as session:
        return list((await session.execute(stmt, params)).scalars())


async def run_due(db: Database, clock: Clock, works: Sequence[DueWork]) -> bool:
    """One round over every programme: each due row of each kind, in `works`' order. True when a
    batch came back full: more may be due now."""
    full = False
    for work in works:
        due = await due_ids(db, work.due, {"now": clock.system_ms()})
        for row_id in due:
            await alone(db, clock, work, row_id)
        full = full or len(due) >= BATCH
    return full


async def catch_up(
    db: Database, clock: Clock, programme_id: int, works: Sequence[DueWork], rounds: int = 10
) -> int:
    """What the programme's clock, as committed, makes due, in `works`' order; a step that makes
    another due at once is taken too (up to `rounds` rounds). A row a concurrent transaction
    holds, or whose step lost a race, is left to it and to the workers. Answers how many steps
    it took."""
    done = 0
    left: set[tuple[str, int]] = set()
    for _ in range(rounds):
        taken = 0
        for work in works:
            params = {"now": clock.system_ms(), "programme_id": programme_id}
            for row_id in await due_ids(db, work.due_in_programme, params):
                if (work.name, row_id) in left:
                    continue
                if await alone(db, clock, work, row_id):
                    taken += 1
                else:
                    left.add((work.name, row_id))
        done += taken
        if not taken:
            break
    return done


class DueWorker(PeriodicWorker):
    """The loop every server process runs (the app's lifespan): each kind of due work as it
    falls due."""

    name = "multibank-due"

    def __init__(
        self, db: Database, clock: Clock, interval: float, works: Sequence[DueWork]
    ) -> None:
        super().__init__(interval, log)
        self.db = db
        self.clock = clock
        self.works = tuple(works)

    async def round(self) -> bool:
        return await run_due(self.db, self.clock, self.works)
