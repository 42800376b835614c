"""What happens on its own on the programme clock for payments and accounts: a payment
challenge's expiry, a wire transfer's approval, completion and (canned) return (D13, D14), and an
account's IBAN allocation once the programme's `ibanAllocationDelaySeconds` have passed since its
request (issue 32).

A payment whose next step is due has `due_at` set (programme-clock ms); an allocation is due
`ibanAllocationDelaySeconds` after its request. Both are taken by the one scheduler of due work
(`programmes/due.py`, which states the rule: a transaction per row, claimed with `SKIP LOCKED`).
(The clock's advance once took every step in the request's one transaction, holding each
payment's row and its ledger rows while it waited for the next payment's row, which an SCA verify
held while it waited for those ledger rows: a deadlock.)
"""

from __future__ import annotations

from sqlalchemy import String, literal_column, select

from multibank.accounts import service as accounts
from multibank.accounts.models import ManagedAccount
from multibank.payments import owt, sca, service
from multibank.payments.models import AWAITING_SCA, OWT, SCHEDULED, Payment
from multibank.programmes.context import Ctx
from multibank.programmes.due import BATCH, NOW, DueWork
from multibank.programmes.models import Programme

# Written as a literal, so that both databases' planners match the partial index of pending
# allocations (`ix_managed_accounts_iban_pending`) to the query.
_PENDING = literal_column("'PENDING_ALLOCATION'", String)


async def step(ctx: Ctx, payment: Payment) -> None:
    """The payment's due step (the caller holds its row lock and saw it due)."""
    if payment.state in AWAITING_SCA:
        await sca.expire(ctx, payment)
    elif payment.state == SCHEDULED:
        await execute(ctx, payment)
    else:
        await owt.step(ctx, payment)
    await ctx.db.flush()


async def execute(ctx: Ctx, payment: Payment) -> None:
    """A scheduled payment, now (its time has come, or the simulator says so)."""
    if payment.kind == OWT:
        await owt.execute(ctx, payment)
    else:
        await service.execute(ctx, payment)


async def payment_step(ctx: Ctx, payment: Payment) -> bool:
    if payment.due_at is None or payment.due_at > ctx.now:
        return False
    await step(ctx, payment)
    return True


async def iban_step(ctx: Ctx, account: ManagedAccount) -> bool:
    """Its webhook event goes with it, once (`accounts.allocate_iban`)."""
    if not accounts.iban_due(ctx, account):
        return False
    return await accounts.allocate_iban(ctx, account)


PAYMENTS = DueWork(
    "payment",
    Payment,
    select(Payment.id)
    .join(Programme, Programme.id == Payment.programme_id)
    .where(Payment.due_at.is_not(None), Payment.due_at <= NOW + Programme.clock_offset_ms)
    .order_by(Payment.due_at)
    .limit(BATCH),
    payment_step,
    still_due=Payment.due_at.is_not(None),
)
IBANS = DueWork(
    "IBAN allocation",
    ManagedAccount,
    select(ManagedAccount.id)
    .join(Programme, Programme.id == ManagedAccount.programme_id)
    .where(
        ManagedAccount.iban_state == _PENDING,
        ManagedAccount.iban_requested_at + Programme.iban_allocation_delay_seconds * 1000
        <= NOW + Programme.clock_offset_ms,
    )
    .order_by(ManagedAccount.iban_requested_at)
    .limit(BATCH),
    iban_step,
    still_due=ManagedAccount.iban_state == _PENDING,
)
WORK = (PAYMENTS, IBANS)
