"""Fee charges (D4, D5): the fee type's amount for the identity's fee group, in the source
account's currency, moves from that account to the programme's revenue account."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    String,
    Table,
    and_,
    bindparam,
    exists,
    func,
    literal,
    select,
    true,
)
from sqlalchemy import cast as sql_cast

from multibank.accounts.models import ManagedAccount
from multibank.cards import repository as cards
from multibank.fees import events
from multibank.identities.models import Identity
from multibank.kernel.db import dialect_name
from multibank.kernel.errors import Conflict
from multibank.kernel.idempotency import held_ctes, held_params, send_held, settle_held, take_held
from multibank.kernel.validation import parse_id
from multibank.ledger import postgres as ledger_sql
from multibank.ledger import service as ledger
from multibank.ledger.models import REVENUE, LedgerAccount
from multibank.programmes.context import Ctx
from multibank.programmes.models import FeeType


@dataclass(frozen=True)
class FeeCharge:
    transaction: ledger.Movement
    profile_id: int
    fee_type: str
    source_id: int
    currency: str
    amount: int
    source_type: str = "managed_accounts"


@dataclass(frozen=True)
class _Source:
    """The columns of the source a charge reads (an account's, or a prepaid card's)."""

    id: int | None
    identity_id: int | None
    currency: str | None
    state: str | None
    profile_id: int | None


_IDENTITIES = cast(Table, Identity.__table__)
_FEE_TYPES = cast(Table, FeeType.__table__)
_ACCOUNTS = cast(Table, ManagedAccount.__table__)
# What a charge reads, in one statement (issue 11): the identity's fee group, the fee type's
# amounts and the source account, each within the programme; a missing fee type or account is a
# row of NULLs, and a missing identity no row at all. Its parameters are named apart from every
# column: in a statement with an UPDATE (`_ONE_STATEMENT`), a parameter named after a column of
# the updated table is a value to SET.
_LOOKUP = (
    select(
        _IDENTITIES.c.fee_group,
        _FEE_TYPES.c.amounts,
        _ACCOUNTS.c.id,
        _ACCOUNTS.c.identity_id,
        _ACCOUNTS.c.currency,
        _ACCOUNTS.c.state,
        _ACCOUNTS.c.profile_id,
    )
    .select_from(
        _IDENTITIES.outerjoin(
            _FEE_TYPES,
            and_(
                _FEE_TYPES.c.programme_id == _IDENTITIES.c.programme_id,
                _FEE_TYPES.c.name == bindparam("f_fee_type"),
            ),
        ).outerjoin(
            _ACCOUNTS,
            and_(
                _ACCOUNTS.c.programme_id == _IDENTITIES.c.programme_id,
                _ACCOUNTS.c.id == bindparam("f_account_id"),
            ),
        )
    )
    .where(
        _IDENTITIES.c.programme_id == bindparam("f_programme_id"),
        _IDENTITIES.c.id == bindparam("f_identity_id"),
    )
)


# PostgreSQL: the whole charge of an account in one statement (decision 0064): the session's
# held check (its renewal, and the claim of its ref), the lookup above with the amount it
# charges and the revenue shard's account, and the movement, written only if the check passed
# and the lookup passes every check `charge` makes; the statement answers what the check
# returned, the lookup's row and the postings it wrote, and `charge` refuses from that row in
# the same order as from the lookup alone.
_LEDGER_ACCOUNTS = cast(Table, LedgerAccount.__table__).alias("revenue")
_FEE_GROUP_AMOUNTS = func.coalesce(
    _FEE_TYPES.c.amounts.op("->")(_IDENTITIES.c.fee_group),
    _FEE_TYPES.c.amounts.op("->")(literal("DEFAULT", String())),
)
_FOUND = _LOOKUP.add_columns(
    sql_cast(
        _FEE_GROUP_AMOUNTS.op("->>", return_type=String())(_ACCOUNTS.c.currency), BigInteger()
    ).label("amount"),
    _LEDGER_ACCOUNTS.c.id.label("revenue_id"),
).outerjoin_from(
    _IDENTITIES,  # joined to the lookup's FROM: the shard's account in the account's currency
    _LEDGER_ACCOUNTS,
    _LEDGER_ACCOUNTS.c.system_key == ledger_sql.revenue_key(_ACCOUNTS.c.currency),
)


def _one_statement(held: int) -> Any:
    """The charge's statement; `held`: 0 no held check, 1 a renewal, 2 a renewal and a claim."""
    checks = held_ctes(with_claim=held == 2)[:held]
    found = _FOUND.cte("found")
    passes = [
        found.c.identity_id == bindparam("f_identity_id"),
        found.c.amount.is_not(None),
        found.c.state == "ACTIVE",
        found.c.revenue_id.is_not(None),
    ]
    if checks:
        passes.append(exists(select(checks[-1].c.id)))
    details = func.json_build_object(
        literal("chargeFeeType", String()),
        bindparam("f_fee_type", type_=String()),
        literal("profileId", String()),
        sql_cast(found.c.profile_id, String()),
        type_=JSON(),
    )
    row = (
        select(
            found.c.id.label("source_id"),
            found.c.revenue_id.label("target_id"),
            found.c.currency,
            found.c.amount,
            details.label("details"),
        )
        .where(*passes)
        .cte("charged")
    )
    moved = ledger_sql.transfer_ctes(row)

    def count(cte: Any) -> Any:
        return select(func.count()).select_from(cte).scalar_subquery()

    one = select(literal(1, BigInteger()).label("one")).subquery("one")
    statement = select(
        *(count(check).label(check.name) for check in checks),
        *found.c,
        count(moved[-1]).label("posted"),
    ).select_from(one.outerjoin(found, true()))
    for cte in [*checks, found, row, *moved]:
        statement = statement.add_cte(cte)
    return statement


_ONE_STATEMENT = {held: _one_statement(held) for held in (0, 1, 2)}


async def _charge_in_one_statement(
    ctx: Ctx, identity_id: int, fee_type: str, account_id: int
) -> FeeCharge:
    db = ctx.db
    await db.flush()  # what the unit of work holds is written first, as `ledger.post` does
    held = take_held(db)
    programme_id = ctx.programme.id
    moved = ledger_sql.transfer_params(programme_id, "CHARGE_FEE", "COMPLETED", ctx.now)
    params = {
        "f_programme_id": programme_id,
        "f_identity_id": identity_id,
        "f_fee_type": fee_type,
        "f_account_id": account_id,
        **ledger.revenue_key_params(programme_id, account_id),
        **moved,
    }
    shape = 0
    if held is not None:
        shape = 1 if held.claim is None else 2
        params.update(held_params(held))
    found = (await db.execute(_ONE_STATEMENT[shape], params)).one()
    if held is not None:  # the session and the ref answer first, as when they went first
        await settle_held(held, found.renewed, getattr(found, "claimed", 0))
    # The refusals of `charge`, in its order, from the same row.
    if found.amounts is None:  # no such identity (a row of NULLs), or no such fee type
        raise Conflict("UNRESOLVED_FEE_TYPE")
    if found.id is None:
        raise Conflict("UNRESOLVED_INSTRUMENT")
    if found.identity_id != identity_id:
        raise Conflict("IDENTITY_NOT_OWNER_OF_INSTRUMENT")
    fee_amounts: dict[str, Any] = found.amounts
    amounts = fee_amounts.get(found.fee_group)
    if amounts is None:
        amounts = fee_amounts.get("DEFAULT", {})
    amount = amounts.get(found.currency)
    if amount is None:
        raise Conflict("UNRESOLVED_CURRENCY")
    if found.state != "ACTIVE":
        raise Conflict("UNRESOLVED_INSTRUMENT")
    if int(amount) != found.amount:  # pragma: no cover - the statement charges what we read
        raise RuntimeError(f"fee charged {found.amount}, read {amount}")
    currency, profile_id = str(found.currency), int(found.profile_id)
    details = {"chargeFeeType": fee_type, "profileId": str(profile_id)}
    if found.revenue_id is None:
        # The programme's first charge to this revenue shard in this currency: nothing was
        # written; the shard's account is created, then the movement goes as `ledger.post`.
        tx = await _post(ctx, account_id, currency, int(amount), details)
    elif found.posted != 2:
        raise Conflict("FUNDS_INSUFFICIENT")  # the transaction rolls back what was written
    else:
        tx = ledger.transferred(moved, currency, details)
    await events.fee(
        ctx, tx.id, fee_type, account_id, currency, int(amount), profile_id, "managed_accounts"
    )
    return FeeCharge(tx, profile_id, fee_type, account_id, currency, int(amount))


async def _post(
    ctx: Ctx, account_id: int, currency: str, amount: int, details: dict[str, Any]
) -> ledger.Movement:
    """The fee's movement from the account to its revenue shard (created on first use)."""
    revenue = await ledger.system_account(
        ctx.db,
        ctx.programme.id,
        REVENUE,
        currency,
        ctx.now,
        shard=ledger.revenue_shard(account_id),
    )
    try:
        return await ledger.post(
            ctx.db,
            programme_id=ctx.programme.id,
            type_="CHARGE_FEE",
            legs=[
                ledger.Leg(account_id, currency, -amount, -amount),
                ledger.Leg(revenue, currency, amount, amount, guarded=False),
            ],
            now_ms=ctx.now,
            state="COMPLETED",
            details=details,
        )
    except ledger.InsufficientFunds:
        raise Conflict("FUNDS_INSUFFICIENT") from None


async def charge(
    ctx: Ctx, identity_id: int, fee_type: str, source_type: str, source_id: str
) -> FeeCharge:
    instrument_id = parse_id(source_id)  # None (not an id) matches no instrument
    if (
        source_type == "managed_accounts"
        and instrument_id is not None
        and dialect_name(ctx.db) == "postgresql"
    ):
        return await _charge_in_one_statement(ctx, identity_id, fee_type, instrument_id)
    await send_held(ctx.db)  # a held session check goes first here, alone
    on_card = source_type == "managed_cards"
    programme_id = ctx.programme.id
    params = {
        "f_programme_id": programme_id,
        "f_identity_id": identity_id,
        "f_fee_type": fee_type,
        "f_account_id": None if on_card else instrument_id,
    }
    found = (await ctx.db.execute(_LOOKUP, params)).first()
    if found is None or found.amounts is None:  # no such identity, or no such fee type
        raise Conflict("UNRESOLVED_FEE_TYPE")
    if source_type not in ("managed_accounts", "managed_cards"):
        raise Conflict("UNRESOLVED_INSTRUMENT")
    # The source's columns (None when there is no such instrument).
    account = _Source(found.id, found.identity_id, found.currency, found.state, found.profile_id)
    if on_card:
        card = (
            None
            if instrument_id is None
            else await cards.get_in_programme(ctx.db, programme_id, instrument_id)
        )
        # A debit card holds no money of its own to charge (D23).
        if card is None or card.mode == "DEBIT_MODE":
            raise Conflict("UNRESOLVED_INSTRUMENT")
        account = _Source(card.id, card.identity_id, card.currency, card.state, card.profile_id)
    if account.id is None:
        raise Conflict("UNRESOLVED_INSTRUMENT")
    if account.identity_id != identity_id:
        raise Conflict("IDENTITY_NOT_OWNER_OF_INSTRUMENT")
    # The identity's group when the fee type names it (even with no amounts), else DEFAULT.
    fee_amounts: dict[str, Any] = found.amounts
    amounts = fee_amounts.get(found.fee_group)
    if amounts is None:
        amounts = fee_amounts.get("DEFAULT", {})
    amount = amounts.get(account.currency)
    if amount is None:
        raise Conflict("UNRESOLVED_CURRENCY")
    if account.state != "ACTIVE":
        raise Conflict("UNRESOLVED_INSTRUMENT")
    assert account.currency is not None and account.profile_id is not None  # found above
    details = {"chargeFeeType": fee_type, "profileId": str(account.profile_id)}
    tx = await _post(ctx, account.id, account.currency, int(amount), details)
    await events.fee(
        ctx,
        tx.id,
        fee_type,
        account.id,
        account.currency,
        int(amount),
        account.profile_id,
        source_type,
    )
    return FeeCharge(
        tx, account.profile_id, fee_type, account.id, account.currency, int(amount), source_type
    )
