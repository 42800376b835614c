"""What happens on its own on the programme clock: a payment challenge's expiry, a wire
transfer's approval, completion and (canned) return (D13, D14), and an account's IBAN allocation
once the programme's `ibanAllocationDelaySeconds` have passed since its request (issue 32).

A payment whose next step is due has `due_at` set (programme-clock ms); an allocation is due
`ibanAllocationDelaySeconds` after its request. Whoever finds one due takes it, each in a
transaction of its own, holding the payment's (or account's) row: every server process's
`PaymentWorker`, and the simulator's `clock/advance` for its programme once its new time is
committed (`catch_up`). A row another transaction holds is skipped (`SKIP LOCKED`), and a row
taken is re-read under its lock, so each step happens once however many processes look, and no
step waits for a row while it holds others. (The clock's advance once took every step in the
request's one transaction, holding each payment's row and its ledger rows while it waited for
the next payment's row, which an SCA verify held while it waited for those ledger rows: a
deadlock.) SQLite writes are serial anyway. A step is part of the same transaction as its state
change, so a process killed mid-step leaves the step undone and due, and the next process to
look takes it: no money is lost, and no hold outlives its payment. A step that loses a race in
the database (kernel/conflicts.py) is left due, for the next round.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from sqlalchemy import BigInteger, Select, String, bindparam, literal_column, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.accounts import service as accounts
from multibank.accounts.models import ManagedAccount
from multibank.kernel import conflicts
from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.kernel.loop import PeriodicWorker
from multibank.payments import owt, sca
from multibank.payments.models import AWAITING_SCA, Payment
from multibank.programmes.context import Ctx
from multibank.programmes.models import Programme

log = logging.getLogger("multibank.payments")
BATCH = 50
_NOW = bindparam("now", type_=BigInteger)  # the server's clock: each programme adds its offset
_IN = bindparam("programme_id", type_=BigInteger)
# Written as a literal, so that both databases' planners match the partial index of pending
# allocations (`ix_managed_accounts_iban_pending`) to the query.
_PENDING = literal_column("'PENDING_ALLOCATION'", String)

# Built once: every process runs them every second, and most rounds find nothing (decision 0020).
_PAYMENTS_DUE = (
    select(Payment.id)
    .join(Programme, Programme.id == Payment.programme_id)
    .where(Payment.due_at.is_not(None), Payment.due_at <= _NOW + Programme.clock_offset_ms)
    .order_by(Payment.due_at)
    .limit(BATCH)
)
_IBANS_DUE = (
    select(ManagedAccount.id)
    .join(Programme, Programme.id == ManagedAccount.programme_id)
    .where(
        ManagedAccount.iban_state == _PENDING,
        ManagedAccount.iban_requested_at + Programme.iban_allocation_delay_seconds * 1000
        <= _NOW + Programme.clock_offset_ms,
    )
    .order_by(ManagedAccount.iban_requested_at)
    .limit(BATCH)
)
_PAYMENTS_DUE_IN = _PAYMENTS_DUE.where(Payment.programme_id == _IN)
_IBANS_DUE_IN = _IBANS_DUE.where(ManagedAccount.programme_id == _IN)

Take = Callable[[AsyncSession, Clock, int], Awaitable[bool]]


async def step(ctx: Ctx, payment: Payment) -> None:
    """The payment's due step (the caller holds its row lock and saw it due)."""
    if payment.state in AWAITING_SCA:
        await sca.expire(ctx, payment)
    else:
        await owt.step(ctx, payment)
    await ctx.db.flush()


async def _ctx(session: AsyncSession, clock: Clock, programme_id: int) -> Ctx | None:
    programme = await session.get(Programme, programme_id, populate_existing=True)
    if programme is None:
        return None
    return Ctx(session, programme, clock.now_ms(programme.clock_offset_ms))


async def _take_payment(session: AsyncSession, clock: Clock, payment_id: int) -> bool:
    """The payment's due step, unless another transaction holds its row or it moved on."""
    stmt = (
        select(Payment)
        .where(Payment.id == payment_id, Payment.due_at.is_not(None))
        .with_for_update(skip_locked=True)
        .execution_options(populate_existing=True)
    )
    payment = (await session.execute(stmt)).scalar_one_or_none()
    if payment is None or payment.due_at is None:
        return False
    ctx = await _ctx(session, clock, payment.programme_id)
    if ctx is None or payment.due_at > ctx.now:
        return False
    await step(ctx, payment)
    return True


async def _take_iban(session: AsyncSession, clock: Clock, account_id: int) -> bool:
    """The account's due IBAN allocation, unless another transaction holds its row or it was
    allocated meanwhile. Its webhook event goes with it, once (`accounts.allocate_iban`)."""
    stmt = (
        select(ManagedAccount)
        .where(ManagedAccount.id == account_id, ManagedAccount.iban_state == _PENDING)
        .with_for_update(skip_locked=True)
        .execution_options(populate_existing=True)
    )
    account = (await session.execute(stmt)).scalar_one_or_none()
    if account is None:
        return False
    ctx = await _ctx(session, clock, account.programme_id)
    if ctx is None or not accounts.iban_due(ctx, account):
        return False
    return await accounts.allocate_iban(ctx, account)


async def _alone(db: Database, clock: Clock, take: Take, row_id: int) -> bool:
    """`take` in a transaction of its own; False when it lost a race in the database: what it
    did was rolled back, and the step is still due."""
    try:
        async with db.transaction() as session:
            return await take(session, clock, row_id)
    except Exception as error:
        if not conflicts.lost_race(error):
            raise
        log.warning(
            "a step lost a race in the database (%s): left for the next round",
            conflicts.sqlstate(error),
        )
        return False


async def _due(db: Database, stmt: Select[int], params: dict[str, int]) -> list[int]:
    async with db.read_sessionmaker() as session:
        return list((await session.execute(stmt, params)).scalars())


async def run_due(db: Database, clock: Clock) -> bool:
    """One round of the worker: each due payment step and IBAN allocation of every programme,
    one transaction each. True when a batch came back full: maybe more is due now."""
    full = False
    for stmt, take in ((_PAYMENTS_DUE, _take_payment), (_IBANS_DUE, _take_iban)):
        due = await _due(db, stmt, {"now": clock.system_ms()})
        for row_id in due:
            await _alone(db, clock, take, row_id)
        full = full or len(due) >= BATCH
    return full


async def catch_up(db: Database, clock: Clock, programme_id: int, rounds: int = 10) -> int:
    """Takes what is due by the programme's clock, as committed (the simulator's `clock/advance`
    calls it once its new time is), each step in a transaction of its own; a step that makes the
    next one due at once is taken too. A row a concurrent request holds is left: that request
    decides what becomes of it, or else the background step of a server process takes it within
    `payments_poll_seconds`. Answers how many steps it took."""
    done = 0
    left: set[tuple[str, int]] = set()  # held by another transaction, or lost a race
    kinds = (("payment", _PAYMENTS_DUE_IN, _take_payment), ("iban", _IBANS_DUE_IN, _take_iban))
    for _ in range(rounds):
        taken = 0
        for kind, stmt, take in kinds:
            due = await _due(db, stmt, {"now": clock.system_ms(), "programme_id": programme_id})
            for row_id in due:
                if (kind, row_id) in left:
                    continue
                if await _alone(db, clock, take, row_id):
                    taken += 1
                else:
                    left.add((kind, row_id))
        done += taken
        if not taken:
            break
    return done


class PaymentWorker(PeriodicWorker):
    """The loop every server process runs (the app's lifespan): payment steps and IBAN
    allocations as they fall due."""

    name = "multibank-payments"

    def __init__(self, db: Database, clock: Clock, interval: float) -> None:
        super().__init__(interval, log)
        self.db = db
        self.clock = clock

    async def round(self) -> bool:
        return await run_due(self.db, self.clock)
