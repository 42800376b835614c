"""The linked-account webhook of the 3.63 line (v3.63.md §4.4, D39, D43):
`POST {url}/linked_accounts/watch`, written in the transaction of the change."""

from __future__ import annotations

from typing import Any

from multibank.linked_accounts.models import LinkedAccount
from multibank.programmes.context import Ctx
from multibank.webhooks.events import emit, ms, register

LINKED_ACCOUNTS = "/linked_accounts/watch"
PATHS = register(LINKED_ACCOUNTS)


def body(account: LinkedAccount) -> dict[str, Any]:
    """The `LinkedAccount` of v3.63.md §4.2: the REST answer and the event's `linkedAccount`."""
    out: dict[str, Any] = {
        "id": str(account.id),
        "profileId": str(account.profile_id),
        "tag": account.tag,
        "friendlyName": account.friendly_name,
        "name": account.name,
        "type": account.type,
        "currency": account.currency,
        "country": account.country,
        "accountReference": dict(account.account_reference),
        "state": account.state,
        "creationTimestamp": account.created_at,
        "owner": {"type": account.identity_type, "id": str(account.identity_id)},
    }
    return {k: v for k, v in out.items() if v is not None}


async def changed(ctx: Ctx, kind: str, account: LinkedAccount) -> None:
    """PENDING_VERIFICATION, VERIFIED, BLOCKED, UNBLOCKED, REMOVED or REJECTED."""
    await emit(
        ctx,
        LINKED_ACCOUNTS,
        kind,
        f"linked_accounts:{account.id}",
        {"linkedAccount": body(account), "publishedTimestamp": ms(ctx.now), "eventType": kind},
    )
