"""The card steps the programme clock makes due, in one place: manufacturing (D25), expiry,
renewal and the about-to-expire notice (D24), and the expiry of authorisations held too long
(D23, D24). `catch_up` is what `clock/advance` runs once its new time is committed; the worker
is the one background loop every server process runs for cards."""

from __future__ import annotations

import logging

from multibank.cards import lifecycle, manufacturing, money_steps
from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.kernel.loop import PeriodicWorker

log = logging.getLogger("multibank.cards")

# Each module's steps take their own rows (cards or authorisations), each in a transaction of
# its own, so their order here only decides which runs first in a round.
STEPS = (manufacturing, lifecycle, money_steps)


async def catch_up(db: Database, clock: Clock, programme_id: int) -> None:
    """Every card step due by the programme's committed clock."""
    for step in STEPS:
        await step.catch_up(db, clock, programme_id)


async def run_due(db: Database, clock: Clock) -> bool:
    """One round over every programme; True when some batch came back full (more may be due)."""
    more = False
    for step in STEPS:
        more = await step.run_due(db, clock) or more
    return more


class CardClockWorker(PeriodicWorker):
    """The loop every server process runs (the app's lifespan): card steps as they fall due."""

    name = "multibank-cards"

    def __init__(self, db: Database, clock: Clock, interval: float) -> None:
        super().__init__(interval, log)
        self.db = db
        self.clock = clock

    async def round(self) -> bool:
        return await run_due(self.db, self.clock)
