"""Card authorisations that expire on the programme clock (D24): an open hold is released as an
expiry 7 days after its authorisation. Taken as payments' due steps are (`payments.steps`): by
every server process's card worker (cards/clock.py) and by the simulator's `clock/advance` for
its programme once its new time is committed (`catch_up`), each authorisation in a transaction
of its own, its row taken with `SKIP LOCKED` and re-read under the lock, so each expires once
however many processes look, and a hold a concurrent settlement holds is left to it."""

from __future__ import annotations

import logging

from sqlalchemy import BigInteger, String, bindparam, literal_column, select

from multibank.cards import money
from multibank.cards.authorisations import CardAuthorisation
from multibank.kernel import conflicts
from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.programmes.context import Ctx
from multibank.programmes.models import Programme

log = logging.getLogger("multibank.cards")
BATCH = 50
_NOW = bindparam("now", type_=BigInteger)  # the server's clock: each programme adds its offset
_IN = bindparam("programme_id", type_=BigInteger)
# A literal, so both planners match the partial index of open authorisations.
_OPEN = literal_column("'PENDING_SETTLEMENT'", String)
_DUE = (
    select(CardAuthorisation.id)
    .join(Programme, Programme.id == CardAuthorisation.programme_id)
    .where(
        CardAuthorisation.state == _OPEN,
        CardAuthorisation.expires_at <= _NOW + Programme.clock_offset_ms,
    )
    .order_by(CardAuthorisation.expires_at)
    .limit(BATCH)
)
_DUE_IN = _DUE.where(CardAuthorisation.programme_id == _IN)


async def _take(db: Database, clock: Clock, authorisation_id: int) -> bool:
    """Expires one authorisation in a transaction of its own; False when it was not due, is
    held by another transaction, or lost a race in the database (rolled back, still due)."""
    try:
        async with db.transaction() as session:
            programme_id = (
                await session.execute(
                    select(CardAuthorisation.programme_id).where(
                        CardAuthorisation.id == authorisation_id
                    )
                )
            ).scalar_one_or_none()
            programme = (
                None
                if programme_id is None
                else await session.get(Programme, programme_id, populate_existing=True)
            )
            if programme is None:
                return False
            ctx = Ctx(session, programme, clock.now_ms(programme.clock_offset_ms))
            return await money.expire_due(ctx, authorisation_id)
    except Exception as error:
        if not conflicts.lost_race(error):
            raise
        log.warning("an authorisation expiry lost a race (%s)", conflicts.sqlstate(error))
        return False


async def _due(db: Database, params: dict[str, int], in_programme: bool) -> list[int]:
    async with db.read_sessionmaker() as session:
        stmt = _DUE_IN if in_programme else _DUE
        return list((await session.execute(stmt, params)).scalars())


async def run_due(db: Database, clock: Clock) -> bool:
    """One round of the worker; True when the batch came back full (maybe more is due)."""
    due = await _due(db, {"now": clock.system_ms()}, False)
    for authorisation_id in due:
        await _take(db, clock, authorisation_id)
    return len(due) >= BATCH


async def catch_up(db: Database, clock: Clock, programme_id: int, rounds: int = 10) -> int:
    """Expires what the programme's committed clock makes due; one held by a concurrent
    request is left to it (or to the worker's next round). Answers how many expired."""
    done = 0
    left: set[int] = set()
    for _ in range(rounds):
        taken = 0
        params = {"now": clock.system_ms(), "programme_id": programme_id}
        for authorisation_id in await _due(db, params, True):
            if authorisation_id in left:
                continue
            if await _take(db, clock, authorisation_id):
                taken += 1
            else:
                left.add(authorisation_id)
        done += taken
        if not taken:
            break
    return done
