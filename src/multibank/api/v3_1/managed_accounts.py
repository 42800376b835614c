"""3.1.0 managed accounts: the same operations plus remove (irreversible, empty accounts only)."""

from __future__ import annotations

from fastapi import Response

from multibank.accounts import service
from multibank.api.deps import CallerIdempotent, LoggedIn, conflicts
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29.managed_accounts import AccountId, owner
from multibank.cards.service import linked_cards_block_removal

router = UnitOfWorkRouter(tags=["Managed Accounts"])


@router.post(
    "/managed_accounts/{id}/remove",
    operation_id="managedAccountRemove",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=conflicts(
        "BALANCE_NOT_ZERO", "INSTRUMENT_ALREADY_REMOVED", "INSTRUMENT_HAS_LINKED_CARDS"
    ),
)
async def managed_account_remove(id: AccountId, session: LoggedIn) -> Response:
    """Destroys an empty account (state DESTROYED, reason USER); it cannot be undone."""
    await service.remove(session.ctx, owner(session), id, rules=[linked_cards_block_removal])
    return Response(status_code=204)
