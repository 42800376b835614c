"""What a programme sent out: its webhook deliveries (filtered by event type and state, each
one's payload and its receiver's answer, sent again when the operator asks) and, in a sandbox,
its inbox: every e-mail and SMS it would have sent."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import Query, Request, Response
from sqlalchemy import select

from multibank.kernel.errors import DomainError
from multibank.kernel.notify import OutboxMessage
from multibank.kernel.validation import parse_id
from multibank.portal.web.actions import Flash, act, show
from multibank.portal.web.common import (
    PAGE,
    Offset,
    count_rows,
    db_of,
    find_programme,
    not_found,
    open_programme,
    pager,
    portal_router,
    posted_programme,
    programme_ctx,
    signed_in,
    to_login,
)
from multibank.programmes import service
from multibank.webhooks import service as webhooks

pages = portal_router()


@pages.get("/programmes/{programme_id}/webhooks")
async def webhooks_page(
    request: Request,
    programme_id: str,
    eventType: Annotated[str | None, Query(max_length=80)] = None,
    state: Annotated[str | None, Query(pattern="^(|PENDING|DELIVERED|FAILED)$")] = None,
    offset: Offset = 0,
) -> Response:
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    db = db_of(request)
    page = await webhooks.page(db, programme.id, eventType or None, state or None, offset, PAGE)
    return await show(
        request,
        signed,
        "webhooks.html",
        title="Webhooks",
        programme=programme,
        settings=service.settings_of(programme),
        deliveries=page["deliveries"],
        event_types=await webhooks.event_types(db, programme.id),
        event_type=eventType,
        state=state,
        pager=pager(request, offset, PAGE, page["count"]),
    )


EXCERPT_SHOWN = 200  # characters of a receiver's answer shown; the store keeps no more either


@pages.get("/programmes/{programme_id}/webhooks/{event_id}")
async def webhook_page(request: Request, programme_id: str, event_id: str) -> Response:
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    number = parse_id(event_id)
    if number is None:
        return not_found("delivery")
    try:
        delivery = await webhooks.get(db_of(request), programme.id, number)
    except DomainError:
        return not_found("delivery")
    return await show(
        request,
        signed,
        "webhook.html",
        title=f"Delivery {delivery['id']}",
        programme=programme,
        d=delivery,
        payload=json.dumps(delivery["payload"], indent=2, sort_keys=True, ensure_ascii=False),
        excerpt_shown=EXCERPT_SHOWN,
    )


@pages.post("/programmes/{programme_id}/webhooks/{event_id}/redeliver")
async def webhook_redeliver(request: Request, programme_id: str, event_id: str) -> Response:
    opened = await posted_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, form, programme = opened
    number = parse_id(event_id)
    if number is None:
        return not_found("delivery")
    ctx = programme_ctx(request, programme)

    async def work() -> Flash:
        await webhooks.redeliver(ctx, number)
        return Flash("Sent again shortly.")

    back = f"/portal/programmes/{programme.id}/webhooks"
    if form.get("back") == "detail":
        back = f"{back}/{number}"
    return await act(request, signed, back, work)


# A sandbox's e-mails and SMS, kept instead of sent.


@pages.get("/programmes/{programme_id}/inbox")
async def inbox_page(request: Request, programme_id: str, offset: Offset = 0) -> Response:
    signed = await signed_in(request)
    if signed is None:
        return to_login()
    programme = await find_programme(request, programme_id)
    if programme is None or programme.mode != "sandbox":
        return not_found("sandbox programme")
    db = db_of(request)
    stmt = select(OutboxMessage).where(OutboxMessage.programme_id == programme.id)
    count = await count_rows(db, stmt)
    rows = await db.execute(
        stmt.order_by(OutboxMessage.created_at.desc(), OutboxMessage.id.desc())
        .offset(offset)
        .limit(PAGE)
    )
    return await show(
        request,
        signed,
        "inbox.html",
        title="Inbox",
        programme=programme,
        messages=list(rows.scalars()),
        pager=pager(request, offset, PAGE, count),
    )
