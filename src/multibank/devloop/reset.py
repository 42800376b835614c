"""`multibank programme reset NAME`: a sandbox programme without customers or money, with the
same name, API keys, settings, profiles (and their ids), fee types and webhook URL.

The ledger is append-only (decision 0043: the database refuses to update or delete a posting),
and every posting names its programme, so a programme's money cannot be emptied in place.
Instead (decision 0051), in one transaction:

- a new programme row takes the old one's name and settings (its clock included);
- the API keys, profiles and fee types move to it (their rows keep their ids: a client's
  configured profile ids and API key keep working);
- the old row keeps everything else, customers, users, accounts, cards, ledger, payments and
  webhook events, under the mode `archived` and a name of its own: no API, portal or CLI
  answer shows it (`programmes.repository`), its sessions are ended and its events that were
  still waiting for delivery are failed, so nothing of the old data reaches anyone.

`ledger verify` stays clean: the archived programme's postings still sum to zero, and the new
programme starts with none.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import update

from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.kernel.ids import new_id
from multibank.kernel.tokens import AuthSession
from multibank.programmes.models import ARCHIVED, ApiKey, FeeType, Profile, Programme
from multibank.programmes.service import require_programme_by_name
from multibank.webhooks.models import FAILED, PENDING, WebhookEvent

NAME_LENGTH = 100  # programmes.name


class ResetError(Exception):
    """Why the programme was not reset, in one line."""


@dataclass(frozen=True)
class Reset:
    old_id: int
    new_id: int
    archived_as: str


def archived_name(name: str, programme_id: int) -> str:
    suffix = f"~archived-{programme_id}"
    return name[: NAME_LENGTH - len(suffix)] + suffix


async def reset(db: Database, name: str) -> Reset:
    """Resets the sandbox programme `name`; raises NotFound or ResetError."""
    clock = Clock()
    async with db.transaction() as session:
        old = await require_programme_by_name(session, name)
        if old.mode != "sandbox":
            raise ResetError(f"it is a {old.mode} programme; only sandbox programmes are reset")
        now = clock.system_ms()
        copied = {
            column.key: getattr(old, column.key)
            for column in Programme.__table__.columns
            if column.key not in ("id", "name", "created_at")
        }
        archived_as = archived_name(old.name, old.id)
        old.name = archived_as
        old.mode = ARCHIVED
        old.webhook_url = None
        old.webhook_secret = None
        await session.flush()  # the name is free before the new row takes it
        fresh = Programme(id=new_id(), name=name, created_at=now, **copied)
        session.add(fresh)
        await session.flush()
        for table in (ApiKey, Profile, FeeType):
            await session.execute(
                update(table).where(table.programme_id == old.id).values(programme_id=fresh.id)
            )
        await session.execute(
            update(AuthSession)
            .where(AuthSession.programme_id == old.id, AuthSession.ended_at.is_(None))
            .values(ended_at=now)
        )
        await session.execute(
            update(WebhookEvent)
            .where(WebhookEvent.programme_id == old.id, WebhookEvent.state == PENDING)
            .values(
                state=FAILED,
                next_attempt_at=None,
                lease_until=None,
                last_error="not sent: the programme was reset",
            )
        )
        return Reset(old.id, fresh.id, archived_as)
