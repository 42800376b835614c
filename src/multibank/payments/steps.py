"""The steps payments take on their own, on the programme clock (D13, D14): a challenge's expiry,
and a wire transfer's approval, completion and (canned) return.

A payment whose next step is due has `due_at` set (programme-clock ms). Whoever finds it due takes
the step in one transaction, holding the payment's row: every server process's `PaymentWorker`,
and the simulator's `clock/advance` for its programme. On PostgreSQL the worker skips rows another
process holds (`SKIP LOCKED`) and re-reads the row under its lock, so each step happens once
however many processes look; SQLite writes are serial anyway. A step is part of the same
transaction as its state change, so a process killed mid-step leaves the step undone and due, and
the next process to look takes it: no money is lost, and no hold outlives its payment.
"""

from __future__ import annotations

import logging

from sqlalchemy import BigInteger, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.kernel.loop import PeriodicWorker
from multibank.payments import owt, sca
from multibank.payments.models import AWAITING_SCA, Payment
from multibank.programmes.context import Ctx
from multibank.programmes.models import Programme

log = logging.getLogger("multibank.payments")
BATCH = 50


async def step(ctx: Ctx, payment: Payment) -> None:
    """The payment's due step (the caller holds its row lock and saw it due)."""
    if payment.state in AWAITING_SCA:
        await sca.expire(ctx, payment)
    else:
        await owt.step(ctx, payment)
    await ctx.db.flush()


async def _lock_if_due(db: AsyncSession, payment_id: int, skip_locked: bool) -> Payment | None:
    stmt = (
        select(Payment)
        .where(Payment.id == payment_id, Payment.due_at.is_not(None))
        .with_for_update(skip_locked=skip_locked)
        .execution_options(populate_existing=True)
    )
    return (await db.execute(stmt)).scalar_one_or_none()


async def catch_up(ctx: Ctx, rounds: int = 10) -> int:
    """Takes every step of the programme that is due by its clock, in the caller's transaction
    (the simulator's clock/advance): a step that makes the next one due at once is taken too."""
    done = 0
    for _ in range(rounds):
        stmt = (
            select(Payment.id)
            .where(
                Payment.programme_id == ctx.programme.id,
                Payment.due_at.is_not(None),
                Payment.due_at <= ctx.now,
            )
            .order_by(Payment.due_at)
            .limit(BATCH)
        )
        ids = list((await ctx.db.execute(stmt)).scalars())
        if not ids:
            break
        for payment_id in ids:
            payment = await _lock_if_due(ctx.db, payment_id, skip_locked=False)
            if payment is not None and payment.due_at is not None and payment.due_at <= ctx.now:
                await step(ctx, payment)
                done += 1
    return done


# Built once: every process runs it every second, and most rounds find nothing (decision 0020).
_DUE = (
    select(Payment.id, Payment.programme_id)
    .join(Programme, Programme.id == Payment.programme_id)
    .where(
        Payment.due_at.is_not(None),
        Payment.due_at <= bindparam("now", type_=BigInteger) + Programme.clock_offset_ms,
    )
    .order_by(Payment.due_at)
    .limit(BATCH)
)


async def run_due(db: Database, clock: Clock) -> int:
    """One round of the worker: each due payment of every programme, one transaction each."""
    now = clock.system_ms()
    async with db.read_sessionmaker() as session:
        due = list((await session.execute(_DUE, {"now": now})).all())
    done = 0
    for payment_id, programme_id in due:
        async with db.transaction() as session:
            programme = await session.get(Programme, programme_id)
            payment = await _lock_if_due(session, payment_id, skip_locked=True)
            if programme is None or payment is None or payment.due_at is None:
                continue  # another process took it, or it moved on
            ctx = Ctx(session, programme, clock.now_ms(programme.clock_offset_ms))
            if payment.due_at > ctx.now:
                continue
            await step(ctx, payment)
            done += 1
    return done


class PaymentWorker(PeriodicWorker):
    """The loop every server process runs (the app's lifespan)."""

    name = "multibank-payments"

    def __init__(self, db: Database, clock: Clock, interval: float) -> None:
        super().__init__(interval, log)
        self.db = db
        self.clock = clock

    async def round(self) -> bool:
        return await run_due(self.db, self.clock) >= BATCH  # a full batch: maybe more due now
