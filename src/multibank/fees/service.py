"""Fee charges (D4, D5): the fee type's amount for the identity's fee group, in the source
account's currency, moves from that account to the programme's revenue account."""

from __future__ import annotations

from dataclasses import dataclass

from multibank.accounts import repository as accounts
from multibank.identities import repository as identities
from multibank.kernel.errors import Conflict
from multibank.kernel.validation import parse_id
from multibank.ledger import service as ledger
from multibank.ledger.models import REVENUE, LedgerTransaction
from multibank.programmes import repository as programmes
from multibank.programmes.context import Ctx
from multibank.webhooks import events as webhooks


@dataclass(frozen=True)
class FeeCharge:
    transaction: LedgerTransaction
    profile_id: int
    fee_type: str
    source_id: int
    currency: str
    amount: int


async def charge(
    ctx: Ctx, identity_id: int, fee_type: str, source_type: str, source_id: str
) -> FeeCharge:
    identity = await identities.get(ctx.db, ctx.programme.id, identity_id)
    fee = await programmes.get_fee_type(ctx.db, ctx.programme.id, fee_type)
    if identity is None or fee is None:
        raise Conflict("UNRESOLVED_FEE_TYPE")
    if source_type != "managed_accounts":
        raise Conflict("UNRESOLVED_INSTRUMENT")  # cards are not an instrument this server issues
    sid = parse_id(source_id)
    account = (
        None if sid is None else await accounts.get_in_programme(ctx.db, ctx.programme.id, sid)
    )
    if account is None:
        raise Conflict("UNRESOLVED_INSTRUMENT")
    if account.identity_id != identity.id:
        raise Conflict("IDENTITY_NOT_OWNER_OF_INSTRUMENT")
    # The identity's group when the fee type names it (even with no amounts), else DEFAULT.
    amounts = fee.amounts.get(identity.fee_group)
    if amounts is None:
        amounts = fee.amounts.get("DEFAULT", {})
    amount = amounts.get(account.currency)
    if amount is None:
        raise Conflict("UNRESOLVED_CURRENCY")
    if account.state != "ACTIVE":
        raise Conflict("UNRESOLVED_INSTRUMENT")
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
        ctx, tx.id, fee_type, account.id, account.currency, int(amount), account.profile_id
    )
    return FeeCharge(tx, account.profile_id, fee_type, account.id, account.currency, int(amount))
