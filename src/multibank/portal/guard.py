"""The admin token's check, shared by the operator API, the portal's sign-in and /metrics, with a
limit on wrong guesses per client address (decision 0038).

Only failures are counted (`rate_limit_admin_auth`, in the server's RateLimiter: memory, or Redis
when configured, so every process of a deployment shares the count). Once an address has spent
its failures, every admin authentication from it answers 429 with `Retry-After` before the token
is compared, the right token included: otherwise the answers (401 or 200) would keep telling a
guesser which guess was right. A request that sends no token guesses nothing and is not counted.
When the counters' store is unreachable the check fails open and says so in the log, as the
other limits do (api/limits.py).
"""

from __future__ import annotations

import logging
import secrets

from starlette.requests import Request

from multibank.api.limits import client_ip
from multibank.kernel.context import Container
from multibank.kernel.errors import TooManyRequests

log = logging.getLogger("multibank.ratelimit")

ADMIN_AUTH = "admin-auth"


class AdminThrottled(TooManyRequests):
    """429 for an address that sent too many wrong admin tokens: the limit headers and
    `Retry-After`."""

    def __init__(self, refused: TooManyRequests) -> None:
        super().__init__(refused.limit_header, refused.reset_seconds)

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "retry-after": str(max(1, self.reset_seconds))}


def token_matches(expected: str | None, given: str) -> bool:
    return bool(expected) and secrets.compare_digest(given.encode(), (expected or "").encode())


async def _counted(container: Container, address: str, failed: bool) -> None:
    limits = container.settings.rate_limit_admin_auth
    try:
        if failed:
            await container.limiter.hit_each(ADMIN_AUTH, [(limits, "ip", address)])
        else:
            await container.limiter.check(ADMIN_AUTH, limits, "ip", address)
    except TooManyRequests as refused:
        raise AdminThrottled(refused) from None
    except Exception:
        log.exception("rate-limit storage unavailable; admin authentication not counted")


async def admin_authenticated(container: Container, request: Request, given: str) -> bool:
    """Whether `given` is the admin token. Raises `AdminThrottled` (429) when the caller's address
    has already spent its wrong guesses (or concurrent guesses took the last ones)."""
    if not given:
        return False
    address = client_ip(request, container.settings.trust_forwarded_for)
    await _counted(container, address, failed=False)
    if token_matches(container.admin_token, given):
        return True
    await _counted(container, address, failed=True)
    return False
