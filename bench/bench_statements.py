"""What one statement costs the event loop, by the way it is sent (decision 0021): through the
ORM session, through a SQLAlchemy connection, or as a prepared statement on the driver's cursor
(kernel/direct.py), alone or several in one hand-over; and what a write transaction's own
lifecycle costs (session, SQLAlchemy connection, the pooled connection alone).

CPU time of the event loop's thread per statement (or per transaction), best of 3 rounds, in
process: no sockets but the database's. Figures to compare within one run.

Usage: .venv/bin/python bench/bench_statements.py [--database-url postgresql://...]
       [--statements 3000]   (default: a fresh SQLite file)
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import BigInteger, Column, MetaData, Table, bindparam, update
from sqlalchemy.util.concurrency import greenlet_spawn

from multibank.kernel import direct
from multibank.kernel.db import Database
from multibank.kernel.direct import Direct, Prepared

META = MetaData()
T = Table("bench_rows", META, Column("id", BigInteger, primary_key=True), Column("n", BigInteger))
BUMP = update(T).where(T.c.id == bindparam("b_id")).values(n=T.c.n + 1).returning(T.c.n)
PREPARED = Prepared(BUMP)
PARAMS = {"b_id": 1}


async def best(label: str, n: int, each: Callable[[], Awaitable[Any]], per: int = 1) -> None:
    rounds = []
    for _ in range(3):
        start = time.thread_time()
        for _ in range(n // per):
            await each()
        rounds.append(time.thread_time() - start)
    print(f"{label:<58} {1e6 * min(rounds) / n:8.1f} µs")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--statements", type=int, default=3000)
    args = ap.parse_args()
    url = args.database_url or f"sqlite:///{tempfile.mkdtemp()}/statements.db"
    db = Database(url)
    async with db.engine.begin() as conn:
        await conn.run_sync(META.drop_all)
        await conn.run_sync(META.create_all)
        await conn.execute(T.insert(), [{"id": 1, "n": 0}])
    n = args.statements
    print(f"{'one UPDATE ... RETURNING, in an open transaction':<58} {'loop CPU':>11}")
    async with db.sessionmaker() as session:
        await session.execute(BUMP, PARAMS)
        await best("ORM session: session.execute", n, lambda: session.execute(BUMP, PARAMS))
        conn = await session.connection()
        await best(
            "SQLAlchemy connection: connection.execute", n, lambda: conn.execute(BUMP, PARAMS)
        )
        await best(
            "prepared, one hand-over each (direct.fetch)",
            n,
            lambda: direct.fetch(session, PREPARED, PARAMS),
        )

        def ten(d: Direct) -> None:
            for _ in range(10):
                d.fetch(PREPARED, PARAMS)

        await best(
            "prepared, ten in one hand-over (direct.run)", n, lambda: direct.run(session, ten), 10
        )
        await session.rollback()

    print(f"{'a write transaction of that one statement':<58} {'loop CPU':>11}")

    async def with_session() -> None:
        session = db.sessionmaker()
        await direct.execute(session, PREPARED, PARAMS)
        await session.commit()
        await session.close()

    async def with_connection() -> None:
        def work() -> None:
            with db.engine.sync_engine.connect() as c:
                c.begin()
                Direct(c).fetch(PREPARED, PARAMS)
                c.commit()

        await greenlet_spawn(work)

    async def with_unit() -> None:
        unit = db.unit()
        await direct.fetch(unit, PREPARED, PARAMS)  # type: ignore[arg-type]
        await unit.commit()
        await unit.close()

    await best("ORM session: begin, statement, commit, close", n, with_session)
    await best("SQLAlchemy connection, in one hand-over", n, with_connection)
    await best("kernel.db.Unit (the pooled connection alone)", n, with_unit)
    await db.dispose()


if __name__ == "__main__":
    asyncio.run(main())
