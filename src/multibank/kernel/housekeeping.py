"""Periodic clean-up of rows whose purpose has passed: idempotency records past their retention
(D6: kept at least 24 hours) and one-time codes that expired or were used long ago. Safe with
several processes: each round is one DELETE per table, and deleting twice deletes nothing."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import delete, or_

from multibank.kernel.clock import Clock
from multibank.kernel.codes import OneTimeCode
from multibank.kernel.db import Database
from multibank.kernel.idempotency import IdempotencyStore
from multibank.kernel.loop import PeriodicWorker

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


class Housekeeper(PeriodicWorker):
    """The clean-up loop a server process runs in the background (the app's lifespan)."""

    name = "multibank-housekeeping"

    def __init__(self, db: Database, clock: Clock, interval: float, retention_hours: int) -> None:
        super().__init__(interval, log)
        self.db = db
        self.clock = clock
        self.retention_hours = retention_hours

    async def round(self) -> bool:
        purged = await purge(self.db, self.clock.system_ms(), self.retention_hours)
        if purged.idempotency_records or purged.codes:
            log.info(
                "purged",
                extra={"idempotency_records": purged.idempotency_records, "codes": purged.codes},
            )
        return False
