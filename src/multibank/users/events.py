"""How the webhook payloads of the access and factor events (`access/events.py`,
`factors/events.py`) name a user: its credential and its identity, in the legacy shapes of
money-movement.md §2.2."""

from __future__ import annotations

from multibank.users.models import User
from multibank.webhooks.events import ref


def credential(user: User) -> dict[str, str]:
    return {"type": "ROOT" if user.role == "ROOT" else "USER", "id": str(user.id)}


def identity(user: User) -> dict[str, str]:
    return ref(user.identity_type, user.identity_id)
