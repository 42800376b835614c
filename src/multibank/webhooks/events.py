"""The events of D16, written in the transaction of the change that causes them (`emit`), only
for a programme with a webhook URL, and the registry of the event paths the slices emit.

Each slice owns its payloads (issue 42 §1): `accounts/events.py`, `cards/events.py`,
`factors/events.py`, `payments/events.py`... build them, in the shapes of money-movement.md §2.2
and cards.md §7, and call `emit`; each registers its paths (`register`), and `emit` refuses a
path no slice registered. The webhooks slice imports no slice above it.

Webhook payloads are the reference's legacy shapes, not the REST ones: amounts are strings, ids
nest as `{type, id}` with lower-case plural types (`send` is singular), `publishedTimestamp` is a
string of epoch ms (the helpers below).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from multibank.kernel.ids import new_id
from multibank.programmes.context import Ctx
from multibank.webhooks.models import PENDING, WebhookEvent

# The event paths (`{url}{path}`) the slices emit, as each registered them.
_registered: set[str] = set()


def register(*paths: str) -> tuple[str, ...]:
    """Declares the event paths a slice emits (its `PATHS`, returned as given): `emit` records
    only those."""
    _registered.update(paths)
    return paths


def paths() -> frozenset[str]:
    """Every path registered: those of the slices imported (the application imports them all)."""
    return frozenset(_registered)


# While set, `emit` records nothing: `multibank webhooks trigger` sets the stage (a customer,
# an account, a card) without events, so the developer's receiver gets the event asked for and
# what that event cannot happen without, no more (decision 0068). Set in one task's context
# only: the requests of every other task record as always.
_staging: ContextVar[bool] = ContextVar("multibank_webhooks_staging", default=False)


@contextmanager
def staging(on: bool = True) -> Iterator[None]:
    """Within it, this task's changes record no event (`on`), or record them again (not `on`)."""
    token = _staging.set(on)
    try:
        yield
    finally:
        _staging.reset(token)


def topic(path: str) -> str:
    """`/managed_accounts/deposits/watch` → `managed_accounts/deposits`."""
    return path.removesuffix("/watch").lstrip("/")


async def emit(ctx: Ctx, path: str, kind: str, resource: str, body: dict[str, Any]) -> None:
    """Records one event of `path` for delivery after commit; nothing without a webhook URL.
    `resource` names what the event is about: its events are delivered in the order written.
    `path` must be registered (`register`)."""
    if path not in _registered:
        raise ValueError(f"webhook path {path!r} was not registered")
    if not ctx.programme.webhook_url or _staging.get():
        return
    ctx.db.add(
        WebhookEvent(
            id=new_id(),
            programme_id=ctx.programme.id,
            path=path,
            event_type=f"{topic(path)}.{kind}",
            resource=resource[:80],
            call_ref=secrets.token_hex(16),
            payload=json.dumps(body, separators=(",", ":"), ensure_ascii=False),
            state=PENDING,
            attempts=0,
            next_attempt_at=ctx.now,
            created_at=ctx.now,
        )
    )


# The legacy shapes every slice's payloads share.


def ms(value: int) -> str:
    """A timestamp: a string of epoch ms."""
    return str(value)


def unsigned_money(currency: str, amount: int) -> dict[str, str]:
    """A legacy amount of money-movement.md: an unsigned digit string."""
    return {"currency": currency, "amount": str(abs(amount))}


def ref(kind: str, resource_id: int) -> dict[str, str]:
    """A nested id, `{type, id}`."""
    return {"type": kind, "id": str(resource_id)}
