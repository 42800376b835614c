"""Periodic clean-up of rows whose purpose has passed: idempotency records past their retention
(D6: kept at least 24 hours) and one-time codes that expired or were used long ago. Safe with
several processes: each round is one DELETE per table, and deleting twice deletes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from sqlalchemy import delete, or_

from multibank.kernel.clock import Clock
from multibank.kernel.codes import OneTimeCode
from multibank.kernel.db import Database
from multibank.kernel.idempotency import IdempotencyStore

log = logging.getLogger("multibank.housekeeping")
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Purged:
    idempotency_records: int
    codes: int


async def purge(db: Database, now_ms: int, retention_hours: int) -> Purged:
    cutoff = now_ms - retention_hours * HOUR_MS
    async with db.transaction() as session:
        records = await IdempotencyStore(session).purge(cutoff)
        result = await session.execute(
            delete(OneTimeCode).where(
                or_(OneTimeCode.expires_at < cutoff, OneTimeCode.used_at < cutoff)
            )
        )
    return Purged(records, int(getattr(result, "rowcount", 0) or 0))


class Housekeeper:
    """The clean-up loop a server process runs in the background (the app's lifespan)."""

    def __init__(self, db: Database, clock: Clock, interval: float, retention_hours: int) -> None:
        self.db = db
        self.clock = clock
        self.interval = interval
        self.retention_hours = retention_hours
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._run(), name="multibank-housekeeping")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                purged = await purge(self.db, self.clock.system_ms(), self.retention_hours)
                if purged.idempotency_records or purged.codes:
                    log.info(
                        "purged",
                        extra={
                            "idempotency_records": purged.idempotency_records,
                            "codes": purged.codes,
                        },
                    )
            except Exception:  # the database may be away for a while; try again next round
                log.exception("housekeeping round failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)
