"""Dependencies every version shares: the database session, the caller's programme and session,
the programme's clock, and the idempotency-ref handling of D6. What they learn of a request is
kept in its `RequestScope` (api/scope.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.api.authcache import AuthCache, SessionEntry, cache_of
from multibank.api.openapi import IDEMPOTENCY_REF, STEP_UP, STEP_UP_BODY, answers, secured
from multibank.api.routing import container_of
from multibank.api.scope import Caller, RequestScope, scope_of
from multibank.container import Container
from multibank.kernel.clock import ProgrammeClock
from multibank.kernel.db import dialect_name
from multibank.kernel.errors import BadRequest, Forbidden, Unauthorized
from multibank.kernel.idempotency import (
    Claim,
    HeldCheck,
    IdempotencyStore,
    Replay,
    StoredResponse,
    claim_values,
    hold,
    payload_hash,
    renew_and_claim,
)
from multibank.kernel.tokens import (
    AuthSession,
    SessionLimits,
    alive,
    ends_at,
    own_and_stepped_up_since,
    read_session,
    renew_session,
    renewal_params,
)
from multibank.programmes.context import Ctx
from multibank.programmes.models import Programme
from multibank.programmes.repository import programme_for_key_hash
from multibank.programmes.service import hash_api_key

# A read renews its session at most once a second (decision 0013): the idle limit stays exact to
# the second, and reads of one session do not each write.
RENEW_EVERY_MS = 1000

# The credentials' OpenAPI security schemes. No operation solves them as dependencies: the
# dependencies below read the two headers themselves (`credentials`), and declare the schemes
# with `secured`, so each operation's document says what it did when these were dependencies.
api_key_scheme = APIKeyHeader(name="api-key", scheme_name="api_key", auto_error=False)
bearer_scheme = HTTPBearer(scheme_name="auth_token", bearerFormat="JWT", auto_error=False)


def api_key_of(request: Request) -> str | None:
    """The `api-key` header, None when absent or empty (as `APIKeyHeader(auto_error=False)`)."""
    return request.headers.get("api-key") or None


def bearer_of(request: Request) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (scheme in any case), None
    otherwise: what `HTTPBearer(auto_error=False)` gives as its credentials."""
    authorization = request.headers.get("authorization")
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if not scheme or not token or scheme.lower() != "bearer":
        return None
    return token


async def get_container(request: Request) -> Container:
    return container_of(request)


async def get_db(request: Request) -> AsyncSession:
    """The request's session (made now if nothing asked for it before)."""
    return scope_of(request).session


Db = Annotated[AsyncSession, Depends(get_db)]
AppContainer = Annotated[Container, Depends(get_container)]


def _limits(container: Container) -> SessionLimits:
    """The session limits of the server's settings, built once per settings object."""
    settings = container.settings
    found: tuple[Any, SessionLimits] | None = container.caches.get("session_limits")
    if found is None or found[0] is not settings:
        limits = SessionLimits(
            idle_ms=settings.session_idle_seconds * 1000,
            absolute_ms=settings.session_absolute_seconds * 1000,
        )
        found = (settings, limits)
        container.caches["session_limits"] = found
    return found[1]


async def authenticate_programme(request: Request, api_key: str | None) -> Programme:
    """D7: a missing or empty key is 400, an unknown or revoked one 401.

    Once per request: a request that already holds its transaction's connection must not look
    the key up again on a second one (a full pool would then wait on itself)."""
    scope = scope_of(request)
    known = scope.programme
    if known is not None:
        return known
    if not api_key or not api_key.strip():
        raise BadRequest(
            "api-key header is required",
            [{"fieldName": "api-key", "error": "REQUIRED", "params": []}],
        )
    container = container_of(request)
    cache = cache_of(container)
    key_hash = hash_api_key(api_key.strip())
    programme = cache.programme(key_hash)
    if programme is None:
        if scope.in_transaction():
            # It holds its transaction's connection: it does not wait for a shared load, which
            # may itself wait for a connection (`_live_session`).
            programme = await _load_programme(container, cache, key_hash)
        else:
            programme = await cache.load_once(
                ("programme", key_hash), lambda: _load_programme(container, cache, key_hash)
            )
        if programme is None:
            raise Unauthorized()
    scope.programme = programme
    return programme


async def _load_programme(
    container: Container, cache: AuthCache, key_hash: str
) -> Programme | None:
    # On a read session of its own, so a write request's transaction does not begin here (a
    # login hashes before it begins). Closed, the row is a detached snapshot, shared read-only
    # (api/authcache.py). Closed without `async with`, whose close runs in a task of its own:
    # no transaction is open, so closing does no I/O (as a read request's session, decision
    # 0019), and the loop does not turn while this request holds a connection.
    own = container.db.read_sessionmaker()
    try:
        programme = await programme_for_key_hash(own, key_hash)
    finally:
        await own.close()
    if programme is not None:
        cache.remember_programme(key_hash, programme)
    return programme


@secured(api_key_scheme)
@answers(400, 401)
async def current_programme(request: Request) -> Programme:
    return await authenticate_programme(request, api_key_of(request))


CurrentProgramme = Annotated[Programme, Depends(current_programme)]


async def programme_clock(container: AppContainer, programme: CurrentProgramme) -> ProgrammeClock:
    return ProgrammeClock(container.clock, programme.clock_offset_ms)


Now = Annotated[ProgrammeClock, Depends(programme_clock)]


# The dependencies of logged-in operations (`CurrentCaller`, `LoggedIn`, `StepUpRequired`,
# `CorporateSession`, ...) are flat: each is one dependency that reads the two credential headers
# and calls `authenticate` itself, instead of a chain of dependencies each depending on the last
# (and on the security schemes). Each level FastAPI solves cost a read about as much as its
# database lookup (decisions 0014, 0063).
@secured(bearer_scheme)
async def bearer_token(request: Request) -> str | None:
    """The optional Bearer token, for an operation that also takes the key on its own."""
    return bearer_of(request)


BearerHeader = Annotated[str | None, Depends(bearer_token)]


ClaimOf = Callable[[AuthSession, Programme, int], Awaitable[dict[str, Any] | None]]


async def authenticate(
    request: Request,
    api_key: str | None,
    token: str | None,
    claim: ClaimOf | None = None,
) -> Caller:
    """The logged-in caller: a live session of this programme, renewed by this call (D7).

    The api-key is checked first (400, 401); a token of another programme is refused with 403
    after it (contract §2). Once per request, however many dependencies ask: the session is
    renewed once. `claim`: the idempotency claim a write sends with its renewal
    (`caller_idempotency`); its outcome is kept as the scope's `claim_outcome`.
    """
    scope = scope_of(request)
    known = scope.caller
    if known is not None:
        return known
    programme = await authenticate_programme(request, api_key)
    if not token:
        raise Unauthorized()
    container = container_of(request)
    decoded = container.tokens().verify(token)
    if decoded is None:
        raise Unauthorized()
    session_id, token_programme = decoded
    if token_programme != programme.id:
        raise Forbidden()
    now_ms = ProgrammeClock(container.clock, programme.clock_offset_ms).now_ms()
    limits = _limits(container)
    session = await _live_session(
        request, scope, cache_of(container), session_id, programme, now_ms, limits, claim
    )
    route_path = str(getattr(request.scope.get("route"), "path", ""))
    if session.token_type == "PASSWORD_UPDATE" and route_path != "/passwords/update":
        # The temporary token of an expired password opens `POST /passwords/update` only.
        raise Unauthorized()
    caller = scope.caller = Caller(programme, session, now_ms)
    return caller


@secured(api_key_scheme, bearer_scheme)
@answers(400, 401, 403)
async def current_caller(request: Request) -> Caller:
    return await authenticate(request, api_key_of(request), bearer_of(request))


CurrentCaller = Annotated[Caller, Depends(current_caller)]


async def _live_session(
    request: Request,
    scope: RequestScope,
    cache: AuthCache,
    session_id: int,
    programme: Programme,
    now_ms: int,
    limits: SessionLimits,
    claim: ClaimOf | None = None,
) -> AuthSession:
    """The live session `session_id`, renewed (D7); 401 if it is not live.

    A read trusts what this process remembers of the session (at most half a second old, and a
    refusal is decided on a fresh read) and writes the renewal at most once a second. A write
    renews in its own transaction on every call, as before: that row lock is what serialises a
    session's concurrent writes (factors/service.py), and a refused write renews nothing. A
    write's idempotency claim, if any, goes with its renewal (one round trip on PostgreSQL).
    """
    programme_id = programme.id
    entry = cache.session(session_id)
    if entry is None and claim is not None and _checks_session_in_transaction(request):
        # Its transaction checks the session live (renewal or claim, guarded like `alive`),
        # and it reads only what never changes of it (user, identity, programme, token type):
        # what this process remembers serves however old, and a refusal is still decided on
        # the database's row, in that check. Spread over many sessions, reading each again
        # twice a second was a statement in every thirty charges (decision 0034).
        entry = cache.session_however_old(session_id)
    if entry is None or not alive(entry.row, entry.last_seen_ms, programme_id, now_ms, limits):
        if scope.in_transaction():
            # It holds its transaction's connection: it reads there, alone. Waiting for another
            # request's read, which may itself wait for a connection, could wait on itself.
            entry = await _load_session(scope.session, cache, session_id)
        else:
            container = container_of(request)
            entry = await cache.load_once(
                ("session", session_id), lambda: _load_session_apart(container, cache, session_id)
            )
        if entry is None or not alive(entry.row, entry.last_seen_ms, programme_id, now_ms, limits):
            cache.forget_session(session_id)
            raise Unauthorized()
    if request.method in ("GET", "HEAD"):
        if now_ms - entry.last_seen_ms >= RENEW_EVERY_MS:
            await _renew_for_a_read(scope, cache, entry, programme_id, now_ms, limits)
    else:
        values = None if claim is None else await claim(entry.row, programme, now_ms)
        # On SQLite a write renews at most once a second too, and otherwise confirms the session
        # is live in its transaction (`tokens.confirm_or_renew`, decision 0030).
        due = now_ms - entry.last_seen_ms >= RENEW_EVERY_MS
        db = scope.session
        if _checks_session_in_transaction(request) and dialect_name(db) == "postgresql":
            # Held for the operation's own first statement (decision 0064), settled as below.
            renewal = renewal_params(session_id, programme_id, now_ms, limits)
            settle = _settle(request, db, cache, entry, values, now_ms, due)
            hold(db, HeldCheck(renewal, values, settle))
            return entry.row
        if values is None:
            renewed = await renew_session(db, session_id, programme_id, now_ms, limits, due)
        else:
            renewal = renewal_params(session_id, programme_id, now_ms, limits)
            renewed, claimed = await renew_and_claim(db, renewal, values, due)
            if renewed:
                scope.claim_outcome = (values, claimed)
        if not renewed:
            cache.forget_session(session_id)
            raise Unauthorized()
        if due:
            # Written in this request's transaction: what the database holds once it commits
            # (if it does not, the next write renews again a second later, at the latest).
            entry.last_seen_ms = max(entry.last_seen_ms, now_ms)
    return entry.row


async def _renew_for_a_read(
    scope: RequestScope,
    cache: AuthCache,
    entry: SessionEntry,
    programme_id: int,
    now_ms: int,
    limits: SessionLimits,
) -> None:
    """A read's renewal, at most once a second (the caller saw it due); 401 if the session
    ended meanwhile. Marked before the statement: the reads of this session that come while it
    runs do not each renew it too. Put back if the statement fails."""
    session_id = entry.row.id
    previous, entry.last_seen_ms = entry.last_seen_ms, now_ms
    try:
        renewed = await renew_session(scope.session, session_id, programme_id, now_ms, limits)
    except BaseException:
        entry.last_seen_ms = min(entry.last_seen_ms, previous)
        raise
    if not renewed:
        cache.forget_session(session_id)
        raise Unauthorized()


def _settle(
    request: Request,
    db: AsyncSession,
    cache: AuthCache,
    entry: SessionEntry,
    values: dict[str, Any] | None,
    now_ms: int,
    due: bool,
) -> Callable[[bool, Claim | None], Awaitable[None]]:
    """What `_live_session` and `caller_idempotency` do with a held check's outcome."""

    async def settle(renewed: bool, claimed: Claim | None) -> None:
        if not renewed:
            cache.forget_session(entry.row.id)
            raise Unauthorized()
        if due:
            entry.last_seen_ms = max(entry.last_seen_ms, now_ms)
        if values is not None:
            _own(request, claimed or await IdempotencyStore(db).taken(values))

    return settle


_CHECKS_SESSION_IN_TRANSACTION = "_multibank_checks_session_in_transaction"
E = TypeVar("E", bound=Callable[..., Any])


def checks_session_in_transaction(endpoint: E) -> E:
    """An operation that reads only what never changes of its session (user, identity,
    programme, token type) and whose transaction checks the session live anyway (its guarded
    renewal, or the claim of its ref, `_live_session`): what this process remembers of the
    session serves however old, and a refusal is still decided on the database's row, in that
    check (decision 0034)."""
    setattr(endpoint, _CHECKS_SESSION_IN_TRANSACTION, True)
    return endpoint


def _checks_session_in_transaction(request: Request) -> bool:
    endpoint = getattr(request.scope.get("route"), "endpoint", None)
    return getattr(endpoint, _CHECKS_SESSION_IN_TRANSACTION, False) is True


async def _load_session(db: AsyncSession, cache: AuthCache, session_id: int) -> SessionEntry | None:
    row = await read_session(db, session_id)
    return None if row is None else cache.remember_session(row)


async def _load_session_apart(
    container: Container, cache: AuthCache, session_id: int
) -> SessionEntry | None:
    """The session read on a read connection of its own, as the key's programme is: the load
    is shared (`AuthCache.load_once`), so it must not be one request's transaction. A write
    that then renews it still does so in its own transaction, with the guarded statement."""
    own = container.db.read_sessionmaker()
    try:
        return await _load_session(own, cache, session_id)
    finally:
        await own.close()


async def begin_idempotent(
    request: Request,
    db: AsyncSession | RequestScope,
    programme: Programme,
    now_ms: int,
    caller: str,
) -> None:
    """Claims the request's `idempotency-ref`, if it sent one, on `db` (or on its scope's
    session, asked for only then)."""
    values = await _claim_of(request, programme, now_ms, caller)
    if values is not None:
        session = db.session if isinstance(db, RequestScope) else db
        _own(request, await IdempotencyStore(session).claim(values))


def _own(request: Request, outcome: StoredResponse | Claim) -> None:
    """The request owns its claim; or the ref was taken, and its stored answer is replayed."""
    if isinstance(outcome, StoredResponse):
        raise Replay(outcome)
    scope_of(request).idempotency_record = outcome


async def _claim_of(
    request: Request, programme: Programme, now_ms: int, caller: str
) -> dict[str, Any] | None:
    """The claim of this request's `idempotency-ref` (D6), or None without one."""
    ref = request.headers.get("idempotency-ref")
    method = request.method
    if ref is None or method not in ("POST", "PATCH"):
        return None
    route = request.scope.get("route")
    params = request.path_params
    path_params = ",".join(f"{k}={v}" for k, v in sorted(params.items())) if params else ""
    # Not getattr's default: building `request.url` cost more than the rest of this line.
    path = getattr(route, "path", None) or request.url.path
    operation = f"{method} {path} {path_params}"
    # The same ref on another interface version is the same operation (one effect, whatever the
    # base URL), but it must not replay the other version's answer shape (a 3.29.1 fee charge is
    # 200 with a body, a 3.1.0 one 204): the version is part of the payload, so it is refused.
    version = getattr(request.scope.get("app"), "version", "")
    body = await request.body()
    try:
        # Decoded once: a JSON body field has been by now, and Starlette keeps it.
        parsed = await request.json()
    except ValueError:  # not JSON: `payload_hash` hashes the bytes themselves
        body_hash = payload_hash(body, version)
    else:
        body_hash = payload_hash(body, version, parsed)
    return claim_values(programme.id, caller, operation[:200], ref, body_hash, now_ms)


@answers(400, 413, IDEMPOTENCY_REF)
async def idempotency(request: Request, programme: CurrentProgramme, clock: Now) -> None:
    """D6 for operations without a logged-in caller (`api-key` only)."""
    await begin_idempotent(request, scope_of(request), programme, clock.now_ms(), "anonymous")


@secured(api_key_scheme, bearer_scheme)
@answers(400, 413, IDEMPOTENCY_REF)
async def caller_idempotency(request: Request) -> None:
    """D6 for logged-in operations: refs are scoped to the user who sent them. The claim goes
    with the session's renewal (`_live_session`): on PostgreSQL one round trip for both."""

    async def claim(
        session: AuthSession, programme: Programme, now_ms: int
    ) -> dict[str, Any] | None:
        return await _claim_of(request, programme, now_ms, f"user:{session.user_id}")

    scope = scope_of(request)
    already = scope.caller is not None
    caller = await authenticate(request, api_key_of(request), bearer_of(request), claim)
    outcome = scope.claim_outcome
    if outcome is not None:
        values, owned = outcome
        taken = owned if owned is not None else await IdempotencyStore(scope.session).taken(values)
        _own(request, taken)
    elif already:  # authenticated by an earlier dependency: the claim goes alone
        user = f"user:{caller.session.user_id}"
        await begin_idempotent(request, scope, caller.programme, caller.now_ms, user)


# D6: accepted on every POST and PATCH; other methods accept the header and ignore it.
Idempotent = Depends(idempotency)
CallerIdempotent = Depends(caller_idempotency)


async def anonymous_ctx(request: Request, programme: CurrentProgramme, clock: Now) -> Ctx:
    """Operations that need only the `api-key` (sign-up, e-mail codes, login, invites). The
    session is asked for once the key is accepted: a refused key makes none."""
    return Ctx(scope_of(request).session, programme, clock.now_ms())


AnonCtx = Annotated[Ctx, Depends(anonymous_ctx)]


@dataclass(frozen=True)
class Session:
    """A logged-in caller with the context its services need."""

    ctx: Ctx
    auth: AuthSession

    @property
    def identity_id(self) -> int:
        return self.auth.identity_id


async def logged_in(request: Request) -> Session:
    """The logged-in caller of the request's two credential headers, with its context."""
    caller = await authenticate(request, api_key_of(request), bearer_of(request))
    ctx = Ctx(scope_of(request).session, caller.programme, caller.now_ms)
    return Session(ctx, caller.session)


@secured(api_key_scheme, bearer_scheme)
@answers(400, 401, 403)
async def caller_ctx(request: Request) -> Session:
    return await logged_in(request)


LoggedIn = Annotated[Session, Depends(caller_ctx)]


def _of_type(kind: str) -> Callable[..., Awaitable[Session]]:
    @secured(api_key_scheme, bearer_scheme)
    @answers(400, 401, 403)
    async def check(request: Request) -> Session:
        session = await logged_in(request)
        # A consumer's token on a corporate operation (or the reverse) is refused outright.
        if session.auth.identity_type != kind:
            raise Forbidden()
        return session

    return check


CorporateSession = Annotated[Session, Depends(_of_type("CORPORATE"))]
ConsumerSession = Annotated[Session, Depends(_of_type("CONSUMER"))]


def conflicts(*codes: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` naming the 409 errorCodes an operation can answer."""
    return {
        409: {
            "description": "Refused by a business rule: " + ", ".join(codes),
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {"errorCode": {"type": "string", "enum": list(codes)}},
                    }
                }
            },
        }
    }


# Step-up (D7, contract §2): operations that demand a stepped-up session.

# D11a: the official demo app routes to its step-up page only when `message` is exactly this.
STEP_UP_MESSAGE = "STEP_UP_REQUIRED"


def step_up_pending(session: Session) -> bool:
    """Whether the caller's programme demands step-up and this session has not done it yet."""
    return session.ctx.programme.step_up_required and not session.auth.stepped_up


def require_step_up(session: Session) -> None:
    """403 `{"errorCode": "STEP_UP_REQUIRED", "message": ...}` unless the session may go on."""
    if step_up_pending(session):
        raise Forbidden("STEP_UP_REQUIRED", STEP_UP_MESSAGE)


@secured(api_key_scheme, bearer_scheme)
@answers(400, 401, 403, STEP_UP)
async def stepped_up_session(request: Request) -> Session:
    session = await logged_in(request)
    if step_up_pending(session):
        # The session may have stepped up in another process since it was remembered.
        row = await read_session(session.ctx.db, session.auth.id)
        if row is not None and row.stepped_up:
            session = Session(session.ctx, row)
    require_step_up(session)
    return session


# A logged-in session that passed the step-up check: use it in place of `LoggedIn`, e.g.
# `async def op(session: StepUpRequired) -> ...`. A step-up lasts for the rest of the session.
StepUpRequired = Annotated[Session, Depends(stepped_up_session)]


# A card statement read by a session that has not stepped up (cards.md §8.1, decision 0059): a
# step-up of the same user at most this long ago lets it read the entries posted while that
# step-up was in force (from the step-up to the end of its session), and nothing older.
RECENT_STEP_UP_MS = 60_000


@dataclass(frozen=True)
class StepUpWindow:
    """From a step-up of the caller's user (ms, programme clock, inclusive) to the end of its
    session (exclusive: what is posted at or after a logout is not covered)."""

    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class StatementReader:
    """The caller of a card statement. `windows` is None when it may read every entry (its
    session stepped up, or its programme does not ask for step-up); otherwise the entries it
    may read are those posted within one of them (`require_posted_within`)."""

    session: Session
    windows: tuple[StepUpWindow, ...] | None = None

    def require_posted_within(self, posted_ms: Iterable[int]) -> None:
        """403 STEP_UP_REQUIRED, as for any session that has not stepped up, unless every time
        is within a recent step-up's window."""
        windows = self.windows
        if windows is None:
            return
        for t in posted_ms:
            if not any(w.start_ms <= t < w.end_ms for w in windows):
                raise Forbidden("STEP_UP_REQUIRED", STEP_UP_MESSAGE)


@secured(api_key_scheme, bearer_scheme)
@answers(400, 401, 403, STEP_UP)
async def statement_reader(request: Request) -> StatementReader:
    """`stepped_up_session`, unchanged for a stepped-up session or a programme without step-up;
    a session that has not stepped up passes only if its user stepped up recently in another
    session, with the windows of those step-ups (one more read, on this path only)."""
    session = await logged_in(request)
    if not step_up_pending(session):
        return StatementReader(session)
    now = session.ctx.now
    own, others = await own_and_stepped_up_since(
        session.ctx.db, session.auth, now - RECENT_STEP_UP_MS
    )
    if own is not None and own.stepped_up:  # stepped up in another process meanwhile
        return StatementReader(Session(session.ctx, own))
    limits = _limits(container_of(request))
    windows = tuple(
        StepUpWindow(row.stepped_up_at, ends_at(row, limits))
        for row in others
        if row.stepped_up_at is not None and row.stepped_up_at <= now
    )
    if not windows:
        raise Forbidden("STEP_UP_REQUIRED", STEP_UP_MESSAGE)
    return StatementReader(session, windows)


StatementCaller = Annotated[StatementReader, Depends(statement_reader)]

# OpenAPI `responses` entry of the operations that use it.
STEP_UP_RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {
        "description": "STEP_UP_REQUIRED: the programme demands a stepped-up session; other "
        "403s (a token of another programme) have no body",
        "content": {"application/json": {"schema": STEP_UP_BODY}},
    }
}
