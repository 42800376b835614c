"""Idempotency records and codes are purged only once past retention (D6: at least 24 hours)."""

from __future__ import annotations

import asyncio

from sqlalchemy import select

from multibank.kernel import codes
from multibank.kernel.codes import OneTimeCode
from multibank.kernel.housekeeping import HOUR_MS, Housekeeper, purge
from multibank.kernel.idempotency import Claim, IdempotencyRecord, IdempotencyStore
from multibank.kernel.ids import new_id


async def _seed(container, created_at: int) -> tuple[int, str]:
    pid = new_id()
    subject = f"user:{pid}"
    async with container.db.transaction() as s:
        record = await IdempotencyStore(s).begin(
            programme_id=pid,
            caller="c",
            operation="POST /x",
            ref="r",
            body_hash="h",
            now_ms=created_at,
        )
        assert isinstance(record, Claim)
        await IdempotencyStore(s).complete(record, 200, None, b"{}")
        await codes.issue(
            s, programme_id=pid, sandbox=True, subject=subject, purpose="P", now_ms=created_at
        )
    return pid, subject


async def _left(container, pid: int) -> tuple[int, int]:
    async with container.db.transaction() as s:
        records = (
            await s.execute(select(IdempotencyRecord).where(IdempotencyRecord.programme_id == pid))
        ).all()
        left = (await s.execute(select(OneTimeCode).where(OneTimeCode.programme_id == pid))).all()
    return len(records), len(left)


async def test_purge_keeps_what_is_within_retention(container):
    now = container.clock.system_ms()
    old, _ = await _seed(container, now - 25 * HOUR_MS)
    recent, _ = await _seed(container, now - 23 * HOUR_MS)
    purged = await purge(container.db, now, 24)
    assert purged.idempotency_records >= 1
    assert purged.codes >= 1
    assert await _left(container, old) == (0, 0)
    assert await _left(container, recent) == (1, 1)


async def test_the_loop_purges_in_the_background(container):
    now = container.clock.system_ms()
    old, _ = await _seed(container, now - 48 * HOUR_MS)
    keeper = Housekeeper(container.db, container.clock, interval=0.05, retention_hours=24)
    keeper.start()
    try:
        for _ in range(100):
            if await _left(container, old) == (0, 0):
                break
            await asyncio.sleep(0.05)
    finally:
        await keeper.stop()
    assert await _left(container, old) == (0, 0)
