"""Transfers on the 3.63 line (v3.63.md §5, D35, D40): the 3.29.1 operations on the same
transfers, with `scheduledTimestamp` on create, the states `SCHEDULED` and `CANCELLED`, the
scheduling fields and filters, and the bulk cancel."""

from __future__ import annotations

from typing import Any

from multibank.api.deps import conflicts
from multibank.api.openapi import not_found
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29.payments_common import PaymentOperations, add_payment_operations
from multibank.api.v3_29.transfers import (
    CREATE_CONFLICTS,
    TRANSFER_QUERY,
    transfer_body,
    transfer_filters_of,
)
from multibank.api.v3_63.scheduling import (
    EVERY_STATE,
    add_bulk_cancel,
    due_first,
    scheduling,
    with_executed,
)
from multibank.payments import service
from multibank.payments.models import TRANSFER, Payment
from multibank.payments.schemas import (
    TRANSFER_STATES_3_63,
    TransferCreate3_63,
    TransferRead3_63,
    TransfersPage3_63,
)
from multibank.programmes.context import Ctx

router = UnitOfWorkRouter(tags=["Transfers"])


def transfer_body_3_63(p: Payment) -> dict[str, Any]:
    return {**transfer_body(p), **scheduling(p)}


async def create(ctx: Ctx, who: service.Owner, data: TransferCreate3_63) -> Payment:
    at = service.scheduled_time(ctx, data.scheduledTimestamp)
    return await service.create_transfer(ctx, who, data, at)


add_payment_operations(
    router,
    PaymentOperations(
        kind=TRANSFER,
        path="/transfers",
        key="transfer",
        prefix="transfer",
        what="transfer",
        body=transfer_body_3_63,
        read_model=TransferRead3_63,
        page_model=TransfersPage3_63,
        create_model=TransferCreate3_63,
        create=create,
        create_doc="""Moves `destinationAmount` from `source` to `destination`, two instruments
        of the logged-in identity (accounts or prepaid cards) in the same currency; a debit
        card holds no money and is refused. The source also pays the transfer profile's fee in
        that currency. Answers the transfer, `COMPLETED`: the money has moved.

        With `scheduledTimestamp` it is `SCHEDULED` instead: nothing moves or is held until
        the programme's clock reaches that time; then the checks of a create run again and it
        is `COMPLETED`, or `FAILED` (the funds, or an instrument, no longer allow it). Until
        then `POST /transfers/bulk/cancel` stops it.""",
        create_responses={
            **conflicts(*CREATE_CONFLICTS, "SCHEDULED_TIMESTAMP_INVALID"),
            **not_found("no transfer profile of the programme has this profileId"),
        },
        filters=with_executed(transfer_filters_of(TRANSFER_STATES_3_63)),
        query=TRANSFER_QUERY,
        list_doc="""The logged-in identity's transfers in every state of the line, newest
        first, in pages of at most 100; `instrumentId[id]` with `instrumentId[type]` (or
        `instrumentId.id` with `instrumentId.type`) keeps those from or to that instrument;
        `executedFrom` and `executedTo` (epoch ms) those executed then. A query key shaped like
        a filter that this list does not have is a 400, never ignored.""",
        challenges=False,
        hidden=EVERY_STATE,
        on_read=due_first,
    ),
)
add_bulk_cancel(router, "/transfers", TRANSFER, "transferCancel", "transfer")
