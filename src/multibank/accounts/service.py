"""Managed accounts: creation for verified owners, state changes, IBAN upgrade, deposits.
Flushes, never commits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError

from multibank.accounts import events
from multibank.accounts import iban as ibans
from multibank.accounts import repository as repo
from multibank.accounts.models import ManagedAccount
from multibank.accounts.schemas import ManagedAccountCreate
from multibank.identities import repository as identities
from multibank.identities.service import is_verified
from multibank.kernel.errors import Conflict, NotFound
from multibank.kernel.money import payment_limit
from multibank.kernel.validation import parse_id
from multibank.ledger import service as ledger
from multibank.ledger.models import SETTLEMENT, LedgerAccount
from multibank.programmes import repository as programmes
from multibank.programmes.context import Ctx

ACTIVE, BLOCKED, DESTROYED = "ACTIVE", "BLOCKED", "DESTROYED"
MAX_PAGE = 100
INT64_MAX = 2**63 - 1
PROFILE_KIND = {"CORPORATE": "corporateManagedAccount", "CONSUMER": "consumerManagedAccount"}


@dataclass(frozen=True)
class Owner:
    identity_id: int
    identity_type: str


async def _event(ctx: Ctx, account: ManagedAccount, type_: str) -> None:
    """A zero-amount posting, so the statement shows what happened to the account; these are
    the entries `showFundMovementsOnly` leaves out."""
    await ledger.post(
        ctx.db,
        programme_id=ctx.programme.id,
        type_=type_,
        legs=[ledger.Leg(account.id, account.currency, 0, 0)],
        now_ms=ctx.now,
    )


async def create(ctx: Ctx, owner: Owner, data: ManagedAccountCreate) -> ManagedAccount:
    pid = parse_id(data.profileId)
    profile = None if pid is None else await programmes.get_profile(ctx.db, ctx.programme.id, pid)
    if profile is None or profile.kind != PROFILE_KIND[owner.identity_type]:
        raise Conflict("PROFILE_NOT_FOUND")
    if not profile.active:
        raise Conflict("PROFILE_INACTIVE")
    if data.currency not in profile.currencies:
        raise Conflict("CURRENCY_NOT_SUPPORTED_BY_PROFILE")
    identity = await identities.get(ctx.db, ctx.programme.id, owner.identity_id)
    if identity is None or not is_verified(identity):
        raise Conflict("OWNER_IDENTITY_NOT_VERIFIED")
    ledger_account = await ledger.open_account(ctx.db, ctx.programme.id, data.currency, ctx.now)
    account = ManagedAccount(
        id=ledger_account.id,
        programme_id=ctx.programme.id,
        identity_id=owner.identity_id,
        identity_type=owner.identity_type,
        profile_id=profile.id,
        friendly_name=data.friendlyName,
        tag=data.tag,
        currency=data.currency,
        state=ACTIVE,
        iban_state="UNALLOCATED",
        created_at=ctx.now,
    )
    ctx.db.add(account)
    await ctx.db.flush()
    await _event(ctx, account, "INSTRUMENT_CREATE")
    await announce(ctx, "CREATED", account)
    return account


async def announce(ctx: Ctx, kind: str, account: ManagedAccount) -> None:
    """The account's webhook event (D16), with its balances as they are now."""
    ledger_account = await ctx.db.get(LedgerAccount, account.id, populate_existing=True)
    if ledger_account is not None:
        await events.account(ctx, kind, account, ledger_account)


async def load(ctx: Ctx, owner: Owner, account_id: str) -> repo.Row:
    """The owner's account; another identity's or an unknown one is 404 (D7)."""
    aid = parse_id(account_id)
    row = None if aid is None else await repo.get(ctx.db, ctx.programme.id, owner.identity_id, aid)
    if row is None:
        raise NotFound("Managed account not found")
    await allocate_if_due(ctx, row[0])
    return row


async def update_details(
    ctx: Ctx,
    owner: Owner,
    account_id: str,
    tag: str | None,
    friendly_name: str | None,
    sent: set[str],
) -> repo.Row:
    account, _ = await load(ctx, owner, account_id)
    if "tag" in sent:
        account.tag = tag
    if "friendlyName" in sent and friendly_name is not None:
        account.friendly_name = friendly_name
    await ctx.db.flush()
    await announce(ctx, "UPDATED", account)
    return await load(ctx, owner, account_id)


def iban_due(ctx: Ctx, account: repo.AccountView | ManagedAccount) -> bool:
    """Whether the account's pending IBAN allocation is due by `ctx`'s clock."""
    if account.iban_state != "PENDING_ALLOCATION" or account.iban_requested_at is None:
        return False
    return ctx.now >= account.iban_requested_at + ctx.programme.iban_allocation_delay_seconds * 1000


async def view(ctx: Ctx, owner: Owner, account_id: str) -> repo.AccountView:
    """The owner's account as a read answers it, with its balances; another identity's or an
    unknown one is 404 (D7). A due IBAN allocation is finished first, as `load` does."""
    aid = parse_id(account_id)
    row = None if aid is None else await repo.view(ctx.db, ctx.programme.id, owner.identity_id, aid)
    if row is None:
        raise NotFound("Managed account not found")
    if iban_due(ctx, row):
        await load(ctx, owner, account_id)
        row = await repo.view(ctx.db, ctx.programme.id, owner.identity_id, row.id)
        assert row is not None  # the owner's account: it was there a moment ago, and stays
    return row


async def page(
    ctx: Ctx, owner: Owner, filters: repo.Filters, offset: int, limit: int | None
) -> tuple[int, list[repo.AccountView]]:
    async def read() -> tuple[int, list[repo.AccountView]]:
        return await repo.page(
            ctx.db,
            ctx.programme.id,
            owner.identity_id,
            filters,
            offset,
            min(limit or MAX_PAGE, MAX_PAGE),
        )

    total, rows = await read()
    due = [row for row in rows if iban_due(ctx, row)]
    if due:
        for row in due:
            await load(ctx, owner, str(row.id))
        total, rows = await read()
    return total, rows


async def block(ctx: Ctx, account: ManagedAccount, reason: str) -> None:
    if account.state == DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    if account.state == BLOCKED:
        raise Conflict("INSTRUMENT_ALREADY_BLOCKED")
    account.state = BLOCKED
    account.blocked_reason = reason
    await ctx.db.flush()
    await _event(ctx, account, "INSTRUMENT_BLOCK")
    await announce(ctx, "BLOCKED", account)


async def unblock(ctx: Ctx, account: ManagedAccount, by_operator: bool) -> None:
    """Users lift only their own (USER) blocks; a SYSTEM block is the operator's to lift."""
    if account.state == DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    if account.state != BLOCKED:
        raise Conflict("INSTRUMENT_NOT_BLOCKED")
    if account.blocked_reason != "USER" and not by_operator:
        raise Conflict("INSTRUMENT_INACTIVE")
    account.state = ACTIVE
    account.blocked_reason = None
    await ctx.db.flush()
    await _event(ctx, account, "INSTRUMENT_UNBLOCK")
    await announce(ctx, "UNBLOCKED", account)


# What a slice above this one says against removing an account (its id): it raises the
# Conflict that refuses the removal. The cards contribute theirs: not while a debit card spends
# the account (`cards.service.linked_cards_block_removal`, D18).
RemovalRule = Callable[[Ctx, int], Awaitable[None]]


async def remove(ctx: Ctx, owner: Owner, account_id: str, *, rules: Sequence[RemovalRule]) -> None:
    """3.1.0: irreversible; only an empty account can be removed, and only when no rule of the
    slices above (`rules`) refuses it."""
    account, balance = await load(ctx, owner, account_id)
    if account.state == DESTROYED:
        raise Conflict("INSTRUMENT_ALREADY_REMOVED")
    if balance.available != 0 or balance.actual != 0:
        raise Conflict("BALANCE_NOT_ZERO")
    for rule in rules:
        await rule(ctx, account.id)
    account.state = DESTROYED
    account.blocked_reason = None
    account.destroyed_reason = "USER"
    await ctx.db.flush()
    await _event(ctx, account, "INSTRUMENT_DELETE")
    await announce(ctx, "DESTROYED", account)


# IBAN


async def upgrade_iban(ctx: Ctx, owner: Owner, account_id: str) -> ManagedAccount:
    account, _ = await load(ctx, owner, account_id)
    if account.state != ACTIVE:
        raise Conflict("INSTRUMENT_IS_NOT_ACTIVE")
    if account.iban_state == "ALLOCATED":
        raise Conflict("INSTRUMENT_ALREADY_UPGRADED_TO_IBAN")
    if account.iban_state == "PENDING_ALLOCATION":
        raise Conflict("IBAN_ALREADY_REQUESTED")
    if not ibans.supported(account.currency):
        raise Conflict("IBAN_NOT_SUPPORTED")
    identity = await identities.get(ctx.db, ctx.programme.id, owner.identity_id)
    if identity is None or not is_verified(identity):
        raise Conflict("OWNER_NOT_VERIFIED")
    account.iban_state = "PENDING_ALLOCATION"
    account.iban_requested_at = ctx.now
    await ctx.db.flush()
    await events.iban(ctx, "REQUESTED", account)
    if ctx.programme.iban_allocation_delay_seconds == 0:
        await allocate_iban(ctx, account)
    return account


async def allocate_pending_iban(ctx: Ctx, account: ManagedAccount) -> None:
    """Sandbox (simulator and portal): finishes the allocation the account's owner asked for now
    instead of after the programme's delay. An account whose owner never asked, or that has its
    IBAN already, is refused: IBAN_NOT_PENDING."""
    if account.iban_state != "PENDING_ALLOCATION":
        raise Conflict(
            "IBAN_NOT_PENDING", "the account's owner has not asked for an IBAN, or it has one"
        )
    await allocate_iban(ctx, account)


async def allocate_if_due(ctx: Ctx, account: ManagedAccount) -> None:
    """Allocation is due `ibanAllocationDelaySeconds` after the request (programme clock). Every
    server process's background step allocates what is due (payments/steps.py), and so does
    whatever needs the IBAN first: a read of the account, a deposit, a wire transfer from it.
    Whichever comes first allocates, once (`allocate_iban`)."""
    if iban_due(ctx, account):
        await allocate_iban(ctx, account)


# The account's row while its allocation is pending, locked: an allocation takes the account's
# row before the account-number counter's, as every transaction that takes both does (a deposit
# or a wire transfer holds the account already), so two allocations never wait on each other.
_PENDING_LOCKED = (
    select(ManagedAccount.id)
    .where(
        ManagedAccount.id == bindparam("account_id"),
        ManagedAccount.programme_id == bindparam("programme_id"),
        ManagedAccount.iban_state == "PENDING_ALLOCATION",
    )
    .with_for_update()
)


async def allocate_iban(ctx: Ctx, account: ManagedAccount) -> bool:
    """Finishes a pending allocation; False when there was none (someone else finished it)."""
    params = {"account_id": account.id, "programme_id": ctx.programme.id}
    if (await ctx.db.execute(_PENDING_LOCKED, params)).first() is None:
        await ctx.db.refresh(account)
        return False
    allocation = await ibans.allocate(ctx.db, account.currency)
    stmt = (
        update(ManagedAccount)
        .where(
            ManagedAccount.id == account.id,
            ManagedAccount.programme_id == ctx.programme.id,
            ManagedAccount.iban_state == "PENDING_ALLOCATION",
        )
        .values(
            iban_state="ALLOCATED",
            iban=allocation.iban,
            bic=allocation.bic,
            sort_code=allocation.sort_code,
            account_number=allocation.account_number,
        )
        .execution_options(synchronize_session=False)
    )
    done = (await ctx.db.execute(stmt)).rowcount == 1  # type: ignore[attr-defined]
    await ctx.db.refresh(account)
    if done:
        # (On a read, whose statements commit one at a time, the event follows the allocation
        # rather than sharing its transaction.)
        await events.iban(ctx, "CREATED", account)
        await ctx.db.flush()
    return bool(done)


def iban_body(account: ManagedAccount, beneficiary: str) -> dict[str, object]:
    if account.iban_state != "ALLOCATED" or account.iban is None:
        return {"state": account.iban_state, "bankAccountDetails": []}
    return {
        "state": "ALLOCATED",
        "bankAccountDetails": [
            {
                "beneficiaryNameAndSurname": beneficiary,
                "beneficiaryBank": ibans.BANK_NAME,
                "beneficiaryBankAddress": ibans.BANK_ADDRESS,
                "paymentReference": f"MB{account.id}",
                "details": d,
            }
            for d in ibans.details(
                account.currency,
                account.iban,
                account.bic or "",
                account.sort_code or "",
                account.account_number or "",
            )
        ],
    }


# Deposits (simulator)


async def deposit(
    ctx: Ctx,
    account: ManagedAccount | None,
    currency: str,
    amount: int | None,
    details: dict[str, str],
    tx_id: int | None = None,
) -> str:
    """Money arriving from outside: settlement → account. Answers the simulator's `code`.

    `tx_id` is the sender's own id for the payment: each is credited once (a repeat, or an id
    that is not a positive int64, is DENIED_INVALID_TX_ID). Money from outside reaches only an
    account with an allocated IBAN (D11a), as on the reference."""
    if account is None:
        return "DENIED_ACCOUNT_NOT_FOUND"
    if tx_id is not None and (
        not 0 < tx_id <= INT64_MAX or await ledger.external_id_used(ctx.db, ctx.programme.id, tx_id)
    ):
        return "DENIED_INVALID_TX_ID"
    if amount is None or amount <= 0:
        return "DENIED_AMOUNT_NOT_POSITIVE"
    if currency != account.currency:
        return "DENIED_CURRENCY_NOT_ACCOUNT_CURRENCY"
    if account.state != ACTIVE:
        return "DENIED_ACCOUNT_INACTIVE"
    await allocate_if_due(ctx, account)
    if account.iban_state != "ALLOCATED":
        return "DENIED_ACCOUNT_NOT_UPGRADED_TO_IBAN"
    if amount > payment_limit(currency):
        # Over the scheme limit (D11b): no payment of this size arrives; nothing is written,
        # not even the programme's settlement account.
        return "DENIED_OTHER"
    settlement = await ledger.system_account(
        ctx.db, ctx.programme.id, SETTLEMENT, currency, ctx.now
    )
    # Balances are int64: a deposit that would overflow the account or the programme's
    # settlement account is refused, rather than failing in the database (a 500 for this and
    # every later deposit in the currency).
    if (
        max(await ledger.balances(ctx.db, account.id)) > INT64_MAX - amount
        or min(await ledger.balances(ctx.db, settlement)) < amount - INT64_MAX
    ):
        return "DENIED_OTHER"
    try:
        # A savepoint, so a txId another request took at the same moment answers a code.
        async with ctx.db.begin_nested():
            tx = await ledger.post(
                ctx.db,
                programme_id=ctx.programme.id,
                type_="DEPOSIT",
                legs=[
                    ledger.Leg(account.id, currency, amount, amount),
                    ledger.Leg(settlement, currency, -amount, -amount, guarded=False),
                ],
                now_ms=ctx.now,
                details={k: v for k, v in details.items() if v},
                external_id=tx_id,
            )
    except IntegrityError:
        return "DENIED_INVALID_TX_ID"
    await events.deposit(ctx, account, tx.id, amount, details)
    return "COMPLETED"


def balances_of(ledger_account: LedgerAccount | repo.AccountView) -> dict[str, int]:
    return {"availableBalance": ledger_account.available, "actualBalance": ledger_account.actual}
