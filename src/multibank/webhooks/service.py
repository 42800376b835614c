"""The operator's view of webhook deliveries (D16): every event with its attempts, filtered by
event type and state, and redelivery of one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.kernel.errors import NotFound
from multibank.programmes.context import Ctx
from multibank.webhooks.models import PENDING, WebhookAttempt, WebhookEvent


def attempt_body(a: WebhookAttempt) -> dict[str, Any]:
    return {
        "attemptedAt": a.attempted_at,
        "url": a.url,
        "outcome": a.outcome,
        "statusCode": a.status_code,
        "error": a.error,
        "responseExcerpt": a.excerpt,
        "durationMs": a.duration_ms,
    }


def delivery_body(e: WebhookEvent, attempts: Sequence[WebhookAttempt]) -> dict[str, Any]:
    return {
        "id": str(e.id),
        "eventType": e.event_type,
        "path": e.path,
        "resource": e.resource,
        "callRef": e.call_ref,
        "state": e.state,
        "attemptCount": e.attempts,
        "nextAttemptAt": e.next_attempt_at,
        "createdAt": e.created_at,
        "deliveredAt": e.delivered_at,
        "lastStatusCode": e.last_status,
        "lastError": e.last_error,
        "payload": json.loads(e.payload),
        "attempts": [attempt_body(a) for a in attempts],
    }


async def _attempts(db: AsyncSession, ids: list[int]) -> dict[int, list[WebhookAttempt]]:
    out: dict[int, list[WebhookAttempt]] = {i: [] for i in ids}
    if not ids:
        return out
    stmt = (
        select(WebhookAttempt)
        .where(WebhookAttempt.event_id.in_(ids))
        .order_by(WebhookAttempt.attempted_at, WebhookAttempt.id)
    )
    for a in (await db.execute(stmt)).scalars():
        out[a.event_id].append(a)
    return out


async def page(
    db: AsyncSession,
    programme_id: int,
    event_type: str | None,
    state: str | None,
    offset: int,
    limit: int,
) -> dict[str, Any]:
    """Newest first. `event_type` matches a whole type (`managed_accounts.CREATED`) or a topic
    (`managed_accounts`)."""
    stmt = select(WebhookEvent).where(WebhookEvent.programme_id == programme_id)
    if event_type:
        stmt = stmt.where(
            (WebhookEvent.event_type == event_type)
            | (WebhookEvent.event_type.startswith(f"{event_type}.", autoescape=True))
        )
    if state:
        stmt = stmt.where(WebhookEvent.state == state)
    total = (await db.execute(select(func.count()).select_from(stmt.subquery()))).scalar_one()
    rows = list(
        (
            await db.execute(stmt.order_by(WebhookEvent.id.desc()).offset(offset).limit(limit))
        ).scalars()
    )
    attempts = await _attempts(db, [e.id for e in rows])
    return {
        "deliveries": [delivery_body(e, attempts[e.id]) for e in rows],
        "count": int(total),
        "responseCount": len(rows),
    }


async def _event(db: AsyncSession, programme_id: int, event_id: int) -> WebhookEvent:
    stmt = select(WebhookEvent).where(
        WebhookEvent.programme_id == programme_id, WebhookEvent.id == event_id
    )
    event = (await db.execute(stmt.with_for_update())).scalar_one_or_none()
    if event is None:
        raise NotFound("Webhook delivery not found")
    return event


async def get(db: AsyncSession, programme_id: int, event_id: int) -> dict[str, Any]:
    event = await _event(db, programme_id, event_id)
    return delivery_body(event, (await _attempts(db, [event.id]))[event.id])


async def event_types(db: AsyncSession, programme_id: int) -> list[str]:
    """The event types the programme has recorded, sorted: what a filter can usefully offer."""
    stmt = (
        select(WebhookEvent.event_type)
        .where(WebhookEvent.programme_id == programme_id)
        .distinct()
        .order_by(WebhookEvent.event_type)
    )
    return list((await db.execute(stmt)).scalars())


async def redeliver(ctx: Ctx, event_id: int) -> dict[str, Any]:
    """Sends the event again, with the same call-ref and payload, as a new series of attempts
    due now, whatever its state. A pending one keeps its lease: a send already under way
    finishes and is recorded, and no second process sends the event at the same time."""
    event = await _event(ctx.db, ctx.programme.id, event_id)
    if event.state != PENDING:
        event.lease_until = None
    event.state = PENDING
    event.attempts = 0
    event.next_attempt_at = ctx.now
    event.delivered_at = None
    await ctx.db.flush()
    return delivery_body(event, (await _attempts(ctx.db, [event.id]))[event.id])


async def by_call_ref(db: AsyncSession, call_ref: str) -> WebhookEvent | None:
    """The event sent under `call-ref` (unique across programmes); the caller checks whose."""
    stmt = select(WebhookEvent).where(WebhookEvent.call_ref == call_ref[:64])
    return (await db.execute(stmt)).scalar_one_or_none()
