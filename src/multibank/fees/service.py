"""Fee charges (D4, D5): the fee type's amount for the identity's fee group, in the source
account's currency, moves from that account to the programme's revenue account."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import partial
from typing import Any, cast
from weakref import WeakKeyDictionary

from sqlalchemy import BigInteger, String, Table, Text, and_, bindparam, exists, select
from sqlalchemy import cast as sql_cast

from multibank.accounts.models import ManagedAccount
from multibank.identities.models import Identity
from multibank.kernel import direct
from multibank.kernel.direct import FRESH_READS, Prepared, StaleRead
from multibank.kernel.errors import Conflict
from multibank.kernel.validation import parse_id
from multibank.ledger import service as ledger
from multibank.ledger.models import REVENUE
from multibank.programmes.context import Ctx
from multibank.programmes.models import FeeType
from multibank.webhooks import events as webhooks


@dataclass(frozen=True)
class FeeCharge:
    transaction: ledger.Movement
    profile_id: int
    fee_type: str
    source_id: int
    currency: str
    amount: int


_IDENTITIES = cast(Table, Identity.__table__)
_FEE_TYPES = cast(Table, FeeType.__table__)
_ACCOUNTS = cast(Table, ManagedAccount.__table__)
# What a charge reads, in one statement (issue 11): the identity's fee group, the fee type's
# amounts and the source account, each within the programme; a missing fee type or account is a
# row of NULLs, and a missing identity no row at all. On the driver's connection (decision 0021).
_LOOKUP = Prepared(
    select(
        _IDENTITIES.c.fee_group,
        _FEE_TYPES.c.amounts,
        sql_cast(_FEE_TYPES.c.amounts, Text).label("amounts_text"),  # as stored (`_STILL`)
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
                _FEE_TYPES.c.name == bindparam("fee_type"),
            ),
        ).outerjoin(
            _ACCOUNTS,
            and_(
                _ACCOUNTS.c.programme_id == _IDENTITIES.c.programme_id,
                _ACCOUNTS.c.id == bindparam("account_id"),
            ),
        )
    )
    .where(
        _IDENTITIES.c.programme_id == bindparam("programme_id"),
        _IDENTITIES.c.id == bindparam("identity_id"),
    )
)


# What a charge's lookup found, remembered per database and (programme, identity, fee type,
# account), so that the next charge of the same kind needs no lookup: on PostgreSQL no round
# trip before its one query (decision 0024), on SQLite no statement (decision 0033). The
# movement checks it still holds (`_STILL`, in its one query or its first INSERT): the
# identity's fee group, the fee type's amounts and the account (its owner, ACTIVE); if not, the
# request runs again and looks afresh (`StaleRead`). Only what passed every check is remembered.
_REMEMBERED: WeakKeyDictionary[object, OrderedDict[tuple[int, int, str, int], Any]] = (
    WeakKeyDictionary()
)
_REMEMBER_AT_MOST = 10_000
_STILL = exists(
    select(_IDENTITIES.c.id)
    .select_from(
        _IDENTITIES.join(
            _FEE_TYPES,
            and_(
                _FEE_TYPES.c.programme_id == _IDENTITIES.c.programme_id,
                _FEE_TYPES.c.name == bindparam("c_fee_type", type_=String()),
            ),
        ).join(
            _ACCOUNTS,
            and_(
                _ACCOUNTS.c.programme_id == _IDENTITIES.c.programme_id,
                _ACCOUNTS.c.id == bindparam("c_account_id", type_=BigInteger()),
            ),
        )
    )
    .where(
        _IDENTITIES.c.programme_id == bindparam("c_programme_id", type_=BigInteger()),
        _IDENTITIES.c.id == bindparam("c_identity_id", type_=BigInteger()),
        _IDENTITIES.c.fee_group == bindparam("c_fee_group", type_=String()),
        sql_cast(_FEE_TYPES.c.amounts, Text) == bindparam("c_amounts", type_=Text()),
        _ACCOUNTS.c.identity_id == bindparam("c_identity_id", type_=BigInteger()),
        _ACCOUNTS.c.state == "ACTIVE",
    )
)


def _remembered(ctx: Ctx) -> OrderedDict[tuple[int, int, str, int], Any] | None:
    """This database's remembered lookups (None if the session has no engine)."""
    engine = getattr(ctx.db.bind, "sync_engine", None)
    if engine is None:
        return None
    found = _REMEMBERED.get(engine)
    if found is None:
        found = _REMEMBERED[engine] = OrderedDict()
    return found


async def charge(
    ctx: Ctx, identity_id: int, fee_type: str, source_type: str, source_id: str
) -> FeeCharge:
    account_id = parse_id(source_id)  # None (not an id) matches no account
    programme_id = ctx.programme.id
    remembered = _remembered(ctx)
    key = (programme_id, identity_id, fee_type, account_id or 0)
    found = None
    condition = None
    if remembered is not None and not FRESH_READS.get():
        found = remembered.get(key)
    if remembered is not None and found is not None:
        condition = ledger.Condition(
            "fee lookup",
            _STILL,
            {
                "c_programme_id": programme_id,
                "c_identity_id": identity_id,
                "c_fee_type": fee_type,
                "c_account_id": found.id,
                "c_fee_group": found.fee_group,
                "c_amounts": found.amounts_text,
            },
            StaleRead(),
            partial(remembered.pop, key, None),
        )
    else:
        params = {
            "programme_id": programme_id,
            "identity_id": identity_id,
            "fee_type": fee_type,
            "account_id": account_id,
        }
        found = await direct.first(ctx.db, _LOOKUP, params)
    if found is None or found.amounts is None:  # no such identity, or no such fee type
        raise Conflict("UNRESOLVED_FEE_TYPE")
    if source_type != "managed_accounts":
        raise Conflict("UNRESOLVED_INSTRUMENT")  # cards are not an instrument this server issues
    account = found  # the source account's columns (NULL when there is no such account)
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
    if remembered is not None and condition is None and found.fee_group is not None:
        remembered[key] = found  # it passed every check
        if len(remembered) > _REMEMBER_AT_MOST:
            remembered.popitem(last=False)
    revenue = await ledger.system_account(
        ctx.db,
        ctx.programme.id,
        REVENUE,
        account.currency,
        ctx.now,
        shard=ledger.revenue_shard(account.id),
    )
    try:
        tx = await ledger.post(
            ctx.db,
            programme_id=ctx.programme.id,
            type_="CHARGE_FEE",
            legs=[
                ledger.Leg(account.id, account.currency, -int(amount), -int(amount)),
                ledger.Leg(revenue, account.currency, int(amount), int(amount), guarded=False),
            ],
            now_ms=ctx.now,
            state="COMPLETED",
            details={"chargeFeeType": fee_type, "profileId": str(account.profile_id)},
            # Nothing after depends on the movement: on PostgreSQL it may go with the commit.
            refused=Conflict("FUNDS_INSUFFICIENT"),
            condition=condition,
            # Nothing after refuses a charge: its webhook event and its answer are recorded.
            last_refusal=True,
        )
    except ledger.InsufficientFunds:
        raise Conflict("FUNDS_INSUFFICIENT") from None
    await webhooks.fee(
        ctx, tx.id, fee_type, account.id, account.currency, int(amount), account.profile_id
    )
    return FeeCharge(tx, account.profile_id, fee_type, account.id, account.currency, int(amount))
