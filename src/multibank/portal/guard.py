"""The admin token's check, shared by the operator API, the portal's sign-in and /metrics, with a
limit on wrong guesses per client address (decisions 0038 and 0074).

Only failures are counted (`rate_limit_admin_auth`), in the database every process of the
deployment shares (`kernel/guesses.py`): the limit holds across processes and restarts without
Redis. Once an address has spent its failures, every admin authentication from it answers 429
with `Retry-After` before the token is compared, the right token included: otherwise the answers
(401 or 200) would keep telling a guesser which guess was right. A request that sends no token
guesses nothing and is not counted. When the database cannot count, the check fails closed: 429
with `Retry-After: 5`, and the token is not compared (an uncounted guess is a free one).
"""

from __future__ import annotations

import logging
import secrets

from starlette.requests import Request

from multibank.api.limits import client_ip
from multibank.container import Container
from multibank.kernel.errors import TooManyRequests
from multibank.kernel.guesses import GuessLimit
from multibank.kernel.ratelimit import limit_header

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


UNCOUNTED_RETRY_SECONDS = 5


def _limit(container: Container) -> GuessLimit:
    """The admin-auth limit of this server's settings, made once per container."""
    limits = container.settings.rate_limit_admin_auth
    found = container.caches.get(ADMIN_AUTH)
    if not isinstance(found, GuessLimit) or found.limits != limits:
        found = container.caches[ADMIN_AUTH] = GuessLimit(ADMIN_AUTH, limits)
    return found


async def admin_authenticated(container: Container, request: Request, given: str) -> bool:
    """Whether `given` is the admin token. Raises `AdminThrottled` (429) when the caller's address
    has already spent its wrong guesses, or when they cannot be counted."""
    if not given:
        return False
    address = client_ip(request, container.settings.trust_forwarded_for)
    limit = _limit(container)
    try:
        return await limit.attempt(
            container.db, address, lambda: token_matches(container.admin_token, given)
        )
    except TooManyRequests as refused:
        raise AdminThrottled(refused) from None
    except Exception as exc:
        log.warning(
            "admin authentication refused (429): wrong guesses cannot be counted (%s: %s)",
            type(exc).__name__,
            str(exc).splitlines()[0][:200] if str(exc) else "",
        )
        header = limit_header(limit.items, limit.items[0])
        raise AdminThrottled(TooManyRequests(header, UNCOUNTED_RETRY_SECONDS)) from None
