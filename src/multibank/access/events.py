"""The access webhooks of D16 (money-movement.md §2.2): a password login, written in the
transaction of the login (`webhooks.events.emit`). The one place its payload's shape is
decided."""

from __future__ import annotations

from multibank.programmes.context import Ctx
from multibank.users import events as users
from multibank.users.models import User
from multibank.webhooks.events import emit, ms, register

LOGIN = "/login/watch"
PATHS = register(LOGIN)


async def login(ctx: Ctx, user: User, status: str) -> None:
    """A password login: VERIFIED, or DECLINED for a wrong password."""
    await emit(
        ctx,
        LOGIN,
        status,
        f"users:{user.id}",
        {
            "credential": users.credential(user),
            "identity": users.identity(user),
            "type": "PASSWORD",
            "status": status,
            "publishedTimestamp": ms(ctx.now),
        },
    )
