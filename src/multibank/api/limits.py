"""Rate-limit dependencies of D7 for login, code sending and code verifying.

Each operation class is counted on its own, against three kinds of key at once:

- the API key (a hash of it, never the key itself), with `rate_limit_api_key`;
- the client IP, with `rate_limit_ip` (`X-Forwarded-For` only when `trust_forwarded_for`);
- whose account the call is about, with the operation's own limit (`rate_limit_login`,
  `rate_limit_code_send`, `rate_limit_code_verify`): the e-mail the body names, else the user the
  path names (invites); for logged-in operations (mobile, step-up, enrolment, invite sending,
  password update) the caller's own user, counted only after the token is checked, so a forged
  or foreign token cannot use up another user's budget. This is the tight one: it stops
  guessing one user's password or code however many IPs and keys the guesser has.

A refused call answers 429 with no body and the `x-ratelimit-*` headers, before the operation
does anything: it changes nothing, and a refused login is not a failed login. When the counters'
store (Redis) cannot be reached, calls are let through and the failure is logged (fail open).

The dependency resolves the programme first, so a missing or unknown `api-key` still answers
400 / 401 and the per-account counts belong to one programme (one tenant cannot throttle another
tenant's users).

Use: `dependencies=[LoginLimited, Idempotent]` (the limit first, so a refused call never reaches
the idempotency store).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, Request

from multibank.api.deps import AppContainer, CurrentCaller, CurrentProgramme
from multibank.api.openapi import answers
from multibank.container import Container
from multibank.kernel.errors import TooManyRequests
from multibank.programmes.models import Programme

log = logging.getLogger("multibank.ratelimit")

LOGIN = "login"
CODE_SEND = "code-send"
CODE_VERIFY = "code-verify"


def _digest(value: str) -> str:
    # surrogatepass: the body is counted before it is validated, lone surrogates and all.
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def client_ip(request: Request, trust_forwarded_for: bool) -> str:
    """The caller's IP: the last `X-Forwarded-For` entry (the one our own proxy appended; those
    before it are whatever the client claimed) when trusted, else the socket's peer."""
    if trust_forwarded_for:
        forwarded = request.headers.get("x-forwarded-for", "")
        hops = [h.strip() for h in forwarded.split(",") if h.strip()]
        if hops:
            return hops[-1][:64]
    return request.client.host if request.client else ""


async def body_email(request: Request) -> str:
    """The `email` of a JSON object body, normalised; "" when there is none. Never raises: a
    malformed body is the body validation's to answer (400), not ours."""
    try:
        # Starlette keeps the decoded body: the body's own validation does not decode it again.
        data: Any = await request.json() if await request.body() else None
    except (ValueError, RecursionError):
        return ""
    if not isinstance(data, dict):
        return ""
    email = data.get("email")
    if not isinstance(email, str):
        return ""
    return email.strip().lower()[:320]


async def _hit(container: Container, name: str, checks: list[tuple[str, str, str]]) -> None:
    try:
        await container.limiter.hit_each(name, checks)
    except TooManyRequests:
        raise
    except Exception:
        # The counters' store (Redis) is unreachable. Fail open: refusing every login and
        # code while it is away would be an outage, and the per-user defences (lockout after
        # failed logins, codes dead after 5 wrong tries) do not depend on it.
        log.exception("rate-limit storage unavailable; %s call let through uncounted", name)


def _front(request: Request, container: Container) -> list[tuple[str, str, str]]:
    s = container.settings
    api_key = request.headers.get("api-key", "").strip()
    return [
        (s.rate_limit_api_key, "key", _digest(api_key) if api_key else ""),
        (s.rate_limit_ip, "ip", client_ip(request, s.trust_forwarded_for)),
    ]


def _limited(name: str, setting: str) -> Callable[..., Awaitable[None]]:
    """Operations with only the api-key: every limit before the operation runs."""

    @answers(429)
    async def limit(request: Request, container: AppContainer, programme: CurrentProgramme) -> None:
        subject = await _subject(request, container, programme)
        checks = [(getattr(container.settings, setting), "subject", subject)]
        await _hit(container, name, [*checks, *_front(request, container)])

    limit.__name__ = f"rate_limit_{name.replace('-', '_')}"
    return limit


def _caller_limited(name: str, setting: str) -> list[Any]:
    """Logged-in operations: the api-key and IP limits stay in front; the per-account limit is
    counted only once the token has been checked, and against the caller's own user, so a
    forged token, or another identity's, cannot use up someone else's budget."""

    @answers(429)
    async def front(request: Request, container: AppContainer, _: CurrentProgramme) -> None:
        await _hit(container, name, _front(request, container))

    @answers(429)
    async def own(request: Request, container: AppContainer, caller: CurrentCaller) -> None:
        subject = f"{caller.programme.id}:user:{caller.session.user_id}"
        invitee = request.path_params.get("user_id")
        if invitee is not None:  # invites: per invited user, of this caller
            subject += f":for:{str(invitee)[:32]}"
        await _hit(container, name, [(getattr(container.settings, setting), "subject", subject)])

    front.__name__ = f"rate_limit_{name.replace('-', '_')}_front"
    own.__name__ = f"rate_limit_{name.replace('-', '_')}_caller"
    return [Depends(front), Depends(own)]


async def _subject(request: Request, container: Container, programme: Programme) -> str:
    """Whose account the call is about, within the programme; "" when nothing names it (the IP
    and key limits still apply)."""
    email = await body_email(request)
    if email:
        return f"{programme.id}:email:{_digest(email)}"
    user_id = request.path_params.get("user_id")
    if user_id is not None:
        return f"{programme.id}:user:{str(user_id)[:32]}"
    return ""


LoginLimited = Depends(_limited(LOGIN, "rate_limit_login"))
CodeSendLimited = Depends(_limited(CODE_SEND, "rate_limit_code_send"))
CodeVerifyLimited = Depends(_limited(CODE_VERIFY, "rate_limit_code_verify"))
# Use as `dependencies=[*CallerCodeSendLimited, CallerIdempotent]`.
CallerCodeSendLimited = _caller_limited(CODE_SEND, "rate_limit_code_send")
CallerCodeVerifyLimited = _caller_limited(CODE_VERIFY, "rate_limit_code_verify")
