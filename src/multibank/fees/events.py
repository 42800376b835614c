"""The fee webhooks of D16 (money-movement.md §2.2): a fee charged to an account or a prepaid
card, written in the transaction of the charge (`webhooks.events.emit`). The one place its
payload's shape is decided."""

from __future__ import annotations

from multibank.programmes.context import Ctx
from multibank.webhooks.events import emit, ms, register, unsigned_money

FEES = "/fees/watch"
PATHS = register(FEES)


async def fee(
    ctx: Ctx,
    transaction_id: int,
    fee_type: str,
    source_id: int,
    currency: str,
    amount: int,
    profile_id: int,
    source_type: str = "managed_accounts",
) -> None:
    """A fee charged to an account or a prepaid card (`fees/charge`)."""
    if not ctx.programme.webhook_url:  # nothing recorded (`emit`): the body is not built
        return
    await emit(
        ctx,
        FEES,
        "COMPLETED",
        f"{source_type}:{source_id}",
        {
            "chargeFee": {
                "id": {"type": "fees", "id": str(transaction_id)},
                "feeType": "CUSTOM",
                "feeSubType": fee_type,
                "note": "",
                "source": {"type": source_type, "id": str(source_id)},
                "feeSpec": {"type": "FLAT", "flatAmount": [unsigned_money(currency, amount)]},
                "profileId": str(profile_id),
            },
            "publishedTimestamp": ms(ctx.now),
            "type": "COMPLETED",
        },
    )
