"""Fixtures of the delivery service's tests, on the database under test (`MULTIBANK_TEST_DB`):
a receiver on 127.0.0.1, a sandbox programme whose webhook URL it is, and its events written
straight into the database, pending, as `events.emit` writes them."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import insert, update

from multibank.container import Container
from multibank.kernel.ids import new_id
from multibank.programmes.models import Programme
from multibank.programmes.schemas import ProgrammeCreate
from multibank.programmes.service import create_programme
from multibank.webhooks.delivery import deliver_due
from multibank.webhooks.models import DELIVERED, FAILED, PENDING, WebhookEvent
from tests.api.webhook_support import Receiver, receiving


def event_rows(
    programme_id: int, resources: int, per_resource: int, now: int, state: str = PENDING
) -> list[dict[str, Any]]:
    """The rows of `per_resource` events of each of `resources` resources (`tests:r0`...),
    written in turn; each payload says its resource and its place (`seq`) among the
    resource's events."""
    rows = []
    for seq in range(per_resource):
        for r in range(resources):
            body = {"resource": f"r{r}", "seq": seq}
            rows.append(
                {
                    "id": new_id(),
                    "programme_id": programme_id,
                    "path": "/managed_accounts/watch",
                    "event_type": "managed_accounts.UPDATED",
                    "resource": f"tests:r{r}",
                    "call_ref": secrets.token_hex(16),
                    "payload": json.dumps(body, separators=(",", ":")),
                    "state": state,
                    "attempts": 0 if state == PENDING else 1,
                    "next_attempt_at": now if state == PENDING else None,
                    "delivered_at": now if state == DELIVERED else None,
                    "created_at": now,
                }
            )
    return rows


@dataclass
class Hooked:
    """A programme whose events go to `receiver`."""

    programme: Programme
    receiver: Receiver
    container: Container

    async def write(self, resources: int, per_resource: int, state: str = PENDING) -> None:
        """`per_resource` events of each of `resources` resources, as `event_rows` makes them."""
        now = self.container.clock.now_ms(self.programme.clock_offset_ms)
        rows = event_rows(self.programme.id, resources, per_resource, now, state)
        async with self.container.db.transaction() as s:
            for start in range(0, len(rows), 1000):
                await s.execute(insert(WebhookEvent), rows[start : start + 1000])

    def arrived(self) -> dict[str, list[int]]:
        """Per resource, the `seq` of each event that arrived, in arrival order."""
        out: dict[str, list[int]] = {}
        for got in list(self.receiver.received):
            out.setdefault(got.json["resource"], []).append(got.json["seq"])
        return out

    async def round(self, **kw: Any) -> int:
        """One delivery round, as a server process's worker runs it."""
        async with httpx.AsyncClient(timeout=10, follow_redirects=False) as http:
            return await deliver_due(self.container.db, self.container.clock, http, **kw)

    async def advance(self, ms: int) -> None:
        """The programme's clock `ms` later."""
        async with self.container.db.transaction() as s:
            await s.execute(
                update(Programme)
                .where(Programme.id == self.programme.id)
                .values(clock_offset_ms=Programme.clock_offset_ms + ms)
            )
        self.programme.clock_offset_ms += ms


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as r:
        yield r


@pytest.fixture
async def hooked(container: Container, receiver: Receiver) -> AsyncIterator[Hooked]:
    """A sandbox programme whose webhook URL is `receiver`; its events still pending afterwards
    are ended, so that later tests' delivery rounds do not send them. A round claims the oldest
    due resources of every programme, so the events other tests left pending (their receivers
    long gone) are ended first: this test's rounds see its own events only."""
    async with container.db.transaction() as s:
        await s.execute(
            update(WebhookEvent)
            .where(WebhookEvent.state == PENDING)
            .values(state=FAILED, lease_until=None)
        )
        data = ProgrammeCreate(name=f"hooks{secrets.token_hex(6)}", webhookUrl=receiver.url)
        programme, _ = await create_programme(s, container.clock, data)
    yield Hooked(programme, receiver, container)
    async with container.db.transaction() as s:
        await s.execute(
            update(WebhookEvent)
            .where(WebhookEvent.programme_id == programme.id, WebhookEvent.state == PENDING)
            .values(state=FAILED, lease_until=None)
        )
