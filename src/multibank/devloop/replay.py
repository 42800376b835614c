"""`multibank webhooks replay EVENT_ID`: sends a stored event again, as delivery sends it.

The same payload bytes under the same `call-ref` (a receiver that dedupes on it sees a
repeat), a `published-timestamp` of the programme's clock now, and both signatures computed by
`webhooks.delivery.signatures` with the programme's secret, posted by `webhooks.delivery.send`
(the same redirect and, for a live programme, address rules) to `{url}{path}`: the programme's
webhook URL, or the base URL given (a `multibank webhooks listen` prints its own). The event's
delivery state is left as it is: a replay is the developer's, not the delivery's."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.kernel.errors import NotFound
from multibank.programmes.models import ARCHIVED
from multibank.programmes.repository import get_programme
from multibank.webhooks.delivery import TIMEOUT_SECONDS, Claimed, Result, secret_of, send
from multibank.webhooks.models import WebhookEvent
from multibank.webhooks.service import by_call_ref


class ReplayError(Exception):
    """Why the event was not sent, in one line."""


@dataclass(frozen=True)
class Replayed:
    url: str
    event_type: str
    call_ref: str
    result: Result
    event_id: int


async def replay(db: Database, event_id: str, to: str | None, allow_private: bool) -> Replayed:
    """Sends the event `event_id` names, by its id or by its `call-ref` (what a receiver logs)."""
    number = int(event_id) if event_id.isdigit() and len(event_id) <= 19 else None
    async with db.transaction() as session:
        event = None if number is None else await session.get(WebhookEvent, number)
        if event is None and event_id:
            event = await by_call_ref(session, event_id)
        programme = None if event is None else await get_programme(session, event.programme_id)
        if event is None or programme is None or programme.mode == ARCHIVED:
            raise NotFound(f"Webhook event {event_id!r} not found (by id or call-ref)")
        secret = await secret_of(session, programme)
        base = (to or programme.webhook_url or "").rstrip("/")
        claimed = Claimed(
            event.id,
            f"{base}{event.path}" if base else "",
            secret,
            event.call_ref,
            event.payload.encode(),
            programme.clock_offset_ms,
            programme.mode != "sandbox",
        )
        kind, found_id = event.event_type, event.id
    if not base:
        raise ReplayError("the programme has no webhook URL: give one with --to")
    published = Clock().now_ms(claimed.clock_offset_ms)
    async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS, follow_redirects=False) as client:
        result = await send(client, claimed, published, allow_private)
    return Replayed(claimed.url, kind, claimed.call_ref, result, found_id)
