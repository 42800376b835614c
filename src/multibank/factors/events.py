"""The factor webhooks of D16 (money-movement.md §2.2): a step-up challenge's end and a factor's
state, written in the transaction of the change (`webhooks.events.emit`). The one place their
payloads' shapes are decided."""

from __future__ import annotations

from multibank.programmes.context import Ctx
from multibank.users import events as users
from multibank.users.models import User
from multibank.webhooks.events import emit, ms, register

STEPUP = "/stepup/watch"
FACTORS = "/authentication_factors/watch"
PATHS = register(STEPUP, FACTORS)


async def stepup(ctx: Ctx, user: User, challenge_id: int | str, channel: str, status: str) -> None:
    """A step-up challenge's end: VERIFIED, DECLINED or EXPIRED."""
    await emit(
        ctx,
        STEPUP,
        status,
        f"users:{user.id}",
        {
            "credential": users.credential(user),
            "identity": users.identity(user),
            "challengeId": str(challenge_id),
            "type": "SMS_OTP" if channel == "SMS" else channel,
            "status": status,
            "publishedTimestamp": ms(ctx.now),
        },
    )


async def factor(ctx: Ctx, user_id: int, channel: str, status: str) -> None:
    """An authentication factor became ACTIVE or INACTIVE."""
    await emit(
        ctx,
        FACTORS,
        status,
        f"users:{user_id}",
        {
            "credentialId": str(user_id),
            "type": "SMS_OTP" if channel == "SMS" else channel,
            "status": status,
            "publishedTimestamp": ms(ctx.now),
        },
    )
