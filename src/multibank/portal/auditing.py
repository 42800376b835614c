"""Where operator actions are recorded in the audit log (issue 35 §4, decision 0057).

- The portal: `act` runs every form's action through `portal_action`, which names it from the
  URL it was posted to; signing in and out, and a refused sign-in, are recorded by the sign-in
  routes (`signed_in`, `sign_in_refused`, `signed_out`).
- The operator API: its routers' `AuditedRoute` records each write that answers below 400,
  named from the route's operation id.

Each record is written in the action's own transaction, after the action: a refused action is
rolled back with its record. What the action changed of the programme's settings (profiles, fees,
card fees, API keys, the clock's offset) is the difference between a snapshot before and one
after (`audit.snapshot`); a secret is never in one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Depends
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session
from starlette.requests import Request
from starlette.responses import Response

from multibank.api.limits import client_ip
from multibank.api.routing import UnitOfWorkRoute, container_of
from multibank.api.scope import scope_of
from multibank.audit import service as audit
from multibank.audit.service import Target
from multibank.kernel.validation import parse_id
from multibank.portal import sessions
from multibank.programmes.models import Programme

T = TypeVar("T")

# A path's segment (portal) or parameter (operator API) and the kind of thing it names.
KINDS = {
    "api_keys": "api_key",
    "key_id": "api_key",
    "profiles": "profile",
    "profile_id": "profile",
    "customers": "customer",
    "accounts": "account",
    "account_id": "account",
    "wire": "payment",
    "payments": "payment",
    "webhooks": "webhook_event",
    "delivery_id": "webhook_event",
    "cards": "card",
    "card_id": "card",
    "name": "fee_type",
}
# The portal's programme forms (`POST /portal/programmes/{id}/{form}`) by their action's name.
PORTAL_FORMS = {
    "": "programme.create",
    "settings": "programme.settings",
    "api_keys": "api_key.create",
    "movement_fee": "movement_fee.set",
    "fee_type": "fee_type.set",
    "clock": "clock.advance",
    "card_fee": "card_fee.set",
    "webhook_secret": "webhook_secret.rotate",
    "profiles": "profile.update",
}
# The operator API's writes by operation id; another is named by its operation id.
OPERATIONS = {
    "programmeCreate": "programme.create",
    "programmeSettingsUpdate": "programme.settings",
    "apiKeyCreate": "api_key.create",
    "apiKeyRevoke": "api_key.revoke",
    "profileCreate": "profile.create",
    "profileUpdate": "profile.update",
    "feeTypeCreate": "fee_type.create",
    "feeTypeReplace": "fee_type.set",
    "cardFeesUpdate": "card_fee.set",
    "managedAccountSystemBlock": "account.block",
    "managedAccountSystemUnblock": "account.unblock",
    "managedCardSystemBlock": "card.block",
    "managedCardSystemUnblock": "card.unblock",
    "webhookSecretRotate": "webhook_secret.rotate",
    "webhookDeliveryRedeliver": "webhook_event.redeliver",
    "cardPoolCreate": "card_pool.create",
}


def session_actor(signed: sessions.Signed) -> str:
    """A portal session as the log names it: the start of its keyed hash (not the cookie)."""
    return f"portal session {signed.token_hash[:8]}"


def portal_names(path: str) -> tuple[str, int | None, Target | None]:
    """The action, programme and target a portal form's URL names:
    `/portal/programmes/3/api_keys/5/revoke` is `api_key.revoke` of API key 5 in programme 3."""
    parts = [p for p in path.split("/") if p][2:]  # after "portal", "programmes"
    programme_id = parse_id(parts[0]) if parts else None
    rest = parts[1:]
    words = [p for p in rest if parse_id(p) is None]
    ids = [p for p in rest if parse_id(p) is not None]
    form = "/".join(words)
    if form in PORTAL_FORMS:
        action = PORTAL_FORMS[form]
    else:
        action = ".".join([KINDS.get(words[0], words[0]), *words[1:]]) if words else "portal"
    target = Target(KINDS.get(words[0], words[0]), ids[0]) if words and ids else None
    return action, programme_id, target


@dataclass
class Watch:
    """What an action is about, and the programme's settings before it."""

    programme_id: int | None
    before: audit.Snapshot
    made: list[int]
    listener: Callable[[Session, Any], None]
    target: Target | None = None


async def _state(
    db: AsyncSession, programme_id: int | None, target: Target | None
) -> audit.Snapshot:
    """The programme's settings and what the action can change of its target."""
    return {
        **await audit.snapshot(db, programme_id),
        **await audit.subject(db, programme_id, target),
    }


async def watch(db: AsyncSession, programme_id: int | None, target: Target | None = None) -> Watch:
    made: list[int] = []

    def created(session: Session, flush_context: Any) -> None:
        made.extend(o.id for o in session.new if isinstance(o, Programme))

    event.listen(db.sync_session, "after_flush", created)
    before = await _state(db, programme_id, target)
    return Watch(programme_id, before, made, created, target)


async def recorded(
    db: AsyncSession, seen: Watch, at_ms: int, actor: str, action: str, target: Target | None
) -> None:
    """Records the watched action, once it is done, in its transaction."""
    stop_watching(db, seen)
    programme_id = seen.programme_id
    if programme_id is None and seen.made:  # a programme made by the action
        programme_id = seen.made[0]
        target = target or Target("programme", str(programme_id))
    changes = audit.diff(seen.before, await _state(db, programme_id, seen.target))
    if audit.changed_nothing(action, changes):
        return
    await audit.record(db, at_ms, actor, action, programme_id, target, changes)


def stop_watching(db: AsyncSession, seen: Watch) -> None:
    if event.contains(db.sync_session, "after_flush", seen.listener):
        event.remove(db.sync_session, "after_flush", seen.listener)


async def portal_action(
    request: Request, signed: sessions.Signed, work: Callable[[], Awaitable[T]]
) -> T:
    """Runs a portal form's `work` and records it (in its transaction) once it is done."""
    db = scope_of(request).session
    action, programme_id, target = portal_names(request.url.path)
    seen = await watch(db, programme_id, target)
    try:
        result = await work()
    except BaseException:
        stop_watching(db, seen)
        raise
    now = container_of(request).clock.system_ms()
    await recorded(db, seen, now, session_actor(signed), action, target)
    return result


# Signing in and out of the portal.


def _address(request: Request) -> str:
    return client_ip(request, container_of(request).settings.trust_forwarded_for)


async def signed_in(request: Request, token: str) -> None:
    """A sign-in, in its transaction; the session is named as its later actions name it."""
    container = container_of(request)
    db = scope_of(request).session
    signed = await sessions.current(db, token, container.clock.system_ms(), container.admin_token)
    actor = session_actor(signed) if signed else "portal"
    await audit.record(
        db,
        container.clock.system_ms(),
        actor,
        "portal.sign_in",
        note=f"from {_address(request)}",
    )


async def sign_in_refused(request: Request, token: str) -> None:
    """A sign-in refused for a wrong admin token, recorded on purpose in a transaction of its
    own (the request's is rolled back with its refusal); never the token itself. Only a guess
    is recorded: an empty form guesses nothing, and an address throttled for its wrong guesses
    (429) is not compared, so the wrong guesses recorded are at most what the admin-auth limit
    lets each address make."""
    if not token:
        return
    container = container_of(request)
    note = f"wrong admin token, from {_address(request)}"
    await audit.record_alone(
        container.db, container.clock.system_ms(), "portal", "portal.sign_in_refused", note=note
    )


async def signed_out(request: Request, signed: sessions.Signed) -> None:
    container = container_of(request)
    await audit.record(
        scope_of(request).session,
        container.clock.system_ms(),
        session_actor(signed),
        "portal.sign_out",
    )


# The operator API.


async def _watch_write(request: Request) -> None:
    """A dependency of every operator route, after the admin check: a write's settings before."""
    if request.method in ("GET", "HEAD"):
        return
    programme_id = parse_id(str(request.path_params.get("programme_id", "")))
    scope = scope_of(request)
    scope.audit_watch = await watch(scope.session, programme_id, api_target(request))


def api_target(request: Request) -> Target | None:
    """What an operator API write acts on, from its path: a parameter naming a thing (`card_id`),
    or the programme's card pool."""
    for name, value in request.path_params.items():
        if name in KINDS:
            return Target(KINDS[name], str(value))
    if request.url.path.endswith("/card_pool"):
        return Target("card_pool", str(request.path_params.get("programme_id", "")))
    return None


WATCHING = Depends(_watch_write)


class AuditedRoute(UnitOfWorkRoute):
    """An operator API route: its unit of work, and a record of each write it answers below
    400 (by the admin token), in the same transaction."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        dependencies = list(kwargs.get("dependencies") or [])
        if not any(d.dependency is _watch_write for d in dependencies):
            dependencies.append(WATCHING)  # last: after the router's admin check
        kwargs["dependencies"] = dependencies
        super().__init__(path, endpoint, **kwargs)

    def wrap(
        self, handler: Callable[[Request], Coroutine[Any, Any, Response]]
    ) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        operation = self.operation_id or self.name

        async def run(request: Request) -> Response:
            response = await handler(request)
            scope = scope_of(request)
            seen = scope.audit_watch
            if not isinstance(seen, Watch):  # a read, or a write refused before it was watched
                return response
            db = scope.session
            if response.status_code >= 400:
                stop_watching(db, seen)
                return response
            target = api_target(request)
            now = container_of(request).clock.system_ms()
            action = OPERATIONS.get(operation, operation)
            await recorded(db, seen, now, audit.ADMIN_TOKEN, action, target)
            return response

        return super().wrap(run)
