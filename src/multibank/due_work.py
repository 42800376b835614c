"""Every kind of work the programme clock makes due, in the order a round takes them: payments
and IBAN allocations, then the card steps. One scheduler takes them all (`programmes/due.py`):
every server process's worker, and `clock/advance` (simulator, portal, CLI) once a programme's
new time is committed."""

from __future__ import annotations

from multibank.cards import clock as cards
from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.payments import steps as payments
from multibank.programmes import due

WORK = (*payments.WORK, *cards.WORK)


async def catch_up(db: Database, clock: Clock, programme_id: int) -> int:
    """Every step due by the programme's committed clock; how many were taken."""
    return await due.catch_up(db, clock, programme_id, WORK)


def worker(db: Database, clock: Clock, interval: float) -> due.DueWorker:
    return due.DueWorker(db, clock, interval, WORK)
