"""What the 3.63 line's payment operations share (v3.63.md §5, D40): the scheduling fields of
an answer, the `executedFrom`/`executedTo` list filters, a get that lets a scheduled payment whose
time has come go first, and the bulk cancel of scheduled payments."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from multibank.api.deps import LoggedIn, Session
from multibank.api.routing import container_of
from multibank.api.v3_29.payments_common import owner
from multibank.kernel.errors import Conflict, NotFound
from multibank.payments import repository, service, steps
from multibank.payments.models import SCHEDULED, Payment
from multibank.payments.schemas import BulkCancelBody, BulkCancelRead
from multibank.programmes import due

# Nothing is hidden from the line: its clients know every state a payment can be in.
EVERY_STATE: tuple[str, ...] = ()
Ms = Annotated[int | None, Query(ge=0, le=2**63 - 1)]


def scheduling(p: Payment) -> dict[str, Any]:
    """The answer's scheduling fields (strings of digits, as the line has them)."""
    return {
        "scheduledTimestamp": None if p.scheduled_at is None else str(p.scheduled_at),
        "executionTimestamp": (
            None if p.executed_at is None or p.scheduled_at is None else str(p.executed_at)
        ),
        "cancellationReason": p.cancellation_reason,
    }


def with_executed(
    base: Callable[..., Awaitable[repository.Filters]],
) -> Callable[..., Awaitable[repository.Filters]]:
    """A list's filters (`base`) with the line's `executedFrom` and `executedTo` (epoch ms)."""

    async def filters(
        given: repository.Filters, executedFrom: Ms = None, executedTo: Ms = None
    ) -> repository.Filters:
        return dataclasses.replace(given, executed_from=executedFrom, executed_to=executedTo)

    # `base` is this call's own: FastAPI reads the dependency from the signature's object, as a
    # string annotation could not name it.
    filters.__annotations__["given"] = Annotated[repository.Filters, Depends(base)]
    return filters


async def due_first(request: Request, session: Session, payment: Payment) -> Payment:
    """A scheduled payment whose time has come goes before it is answered (D40), in a
    transaction of its own as the scheduler takes it (`programmes.due`): a worker or another
    read that holds it decides, and the answer is what the database then holds."""
    if payment.state != SCHEDULED or (payment.due_at or 0) > session.ctx.now:
        return payment
    container = container_of(request)
    await due.alone(container.db, container.clock, steps.PAYMENTS, payment.id)
    await session.ctx.db.refresh(payment)
    return payment


def add_bulk_cancel(router: APIRouter, path: str, kind: str, operation_id: str, what: str) -> None:
    """`POST {path}/bulk/cancel`: each item's own result, in the order sent (D40)."""

    async def bulk_cancel(body: BulkCancelBody, session: LoggedIn) -> dict[str, Any]:
        who = owner(session)
        results: list[dict[str, Any]] = []
        for item in body.cancellations:
            try:
                payment = await service.load(session.ctx, who, kind, item.id, True, EVERY_STATE)
                await service.cancel_scheduled(session.ctx, payment, item.cancellationReason)
            except NotFound:
                results.append({"id": item.id, "state": "ERROR", "errorCode": "NOT_FOUND"})
            except Conflict as refused:
                results.append({"id": item.id, "state": "ERROR", "errorCode": refused.error_code})
            else:
                results.append({"id": item.id, "state": "SUCCESS"})
        return {"cancellations": results}

    bulk_cancel.__doc__ = (
        f"Cancels scheduled {what}s before their time: each item answers `SUCCESS` (now "
        "`CANCELLED`, with its `cancellationReason`) or `ERROR` with `NOT_FOUND` (unknown, or "
        "another identity's) or `TRANSACTION_NOT_SCHEDULED` (in any other state). The call "
        "answers 200 whatever each item's result; 1 to 100 items, else 400."
    )
    router.add_api_route(
        f"{path}/bulk/cancel",
        bulk_cancel,
        methods=["POST"],
        operation_id=operation_id,
        response_model=BulkCancelRead,
        response_model_exclude_none=True,
    )
