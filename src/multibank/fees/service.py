"""Fee charges (D4, D5): the fee type's amount for the identity's fee group, in the source
account's currency, moves from that account to the programme's revenue account."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, select

from multibank.accounts.models import ManagedAccount
from multibank.cards import repository as cards
from multibank.identities.models import Identity
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
# row of NULLs, and a missing identity no row at all.
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


async def charge(
    ctx: Ctx, identity_id: int, fee_type: str, source_type: str, source_id: str
) -> FeeCharge:
    instrument_id = parse_id(source_id)  # None (not an id) matches no instrument
    on_card = source_type == "managed_cards"
    programme_id = ctx.programme.id
    params = {
        "programme_id": programme_id,
        "identity_id": identity_id,
        "fee_type": fee_type,
        "account_id": None if on_card else instrument_id,
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
        )
    except ledger.InsufficientFunds:
        raise Conflict("FUNDS_INSUFFICIENT") from None
    await webhooks.fee(
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
