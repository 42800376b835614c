"""Passwords and login: the rules of the interface and D7. Flushes, never commits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import BigInteger, Table, bindparam, false, insert, literal, null, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.access import events
from multibank.access.passwords import complexity_error
from multibank.kernel import notify
from multibank.kernel.db import Database
from multibank.kernel.errors import Conflict, DomainError, Forbidden, Locked, NotFound
from multibank.kernel.hashing import PasswordHasher
from multibank.kernel.ids import new_id
from multibank.kernel.tokens import AuthSession, end_session, end_user_sessions, open_session
from multibank.kernel.validation import parse_id
from multibank.programmes.context import Ctx
from multibank.programmes.models import Programme
from multibank.users import repository as users
from multibank.users import service as users_service
from multibank.users.models import ROOT, User

PASSWORD_UPDATE = "PASSWORD_UPDATE"
LOST_PASSWORD = "LOST_PASSWORD"
LOST_PASSWORD_TTL_MS = 60 * 60 * 1000
HISTORY = 5  # the current password and the four before it may not be used again
ROOT_LOCK_MS = 30 * 60 * 1000
DAY_MS = 86_400_000


@dataclass(frozen=True)
class LoginResult:
    session: AuthSession
    user: User


class PasswordExpired(DomainError):
    """409 `{token}`: the login's temporary session, usable only for `POST /passwords/update`."""

    status_code = 409

    def __init__(self, session: AuthSession) -> None:
        super().__init__("password expired")
        self.session = session
        self.token = ""  # signed by the HTTP layer, which holds the keys

    def body(self) -> dict[str, Any]:
        return {"token": self.token}


def check_complexity(password: str) -> None:
    error = complexity_error(password)
    if error is not None:
        raise Conflict(error)


async def set_password(ctx: Ctx, hasher: PasswordHasher, user: User, password: str) -> None:
    """Stores a new password: complexity rules, none of the last five, expiry from settings."""
    check_complexity(password)
    if await hasher.matches_any(list(user.password_history or []), password):
        raise Conflict("PASSWORD_ALREADY_USED")
    encoded = await hasher.hash(password)
    user.password_hash = encoded
    user.password_history = [encoded, *(user.password_history or [])][:HISTORY]
    days = ctx.programme.password_expiry_days
    user.password_expires_at = ctx.now + days * DAY_MS if days else 0
    user.failed_logins = 0
    await ctx.db.flush()


async def open_user_session(
    ctx: Ctx, user: User, token_type: str = "AUTH", started_at: int | None = None
) -> AuthSession:
    """A new session of `user`. `started_at`: a session derived from another (delegated access)
    keeps the other's start, so a chain of them never outlives the 12-hour limit (D7)."""
    return await open_session(
        ctx.db,
        programme_id=ctx.programme.id,
        user_id=user.id,
        credential_type=user.role,
        identity_type=user.identity_type,
        identity_id=user.identity_id,
        token_type=token_type,
        now_ms=ctx.now,
        started_at=started_at,
    )


async def create_password(
    ctx: Ctx, hasher: PasswordHasher, user_id: str, password: str
) -> LoginResult:
    """`POST /passwords/{user_id}/create`: a root user's first password; logs the user in."""
    uid = parse_id(user_id)
    user = None if uid is None else await users.get(ctx.db, ctx.programme.id, uid)
    if user is None:
        raise NotFound("User not found")
    if user.role != ROOT:
        # Authorised users set their first password by consuming their invite (interface rule).
        raise Conflict("PASSWORD_PROFILE_NOT_CONFIGURED_FOR_CREDENTIAL_TYPE")
    if user.password_hash is not None:
        raise Conflict("PASSWORD_ALREADY_CREATED")
    await set_password(ctx, hasher, user, password)
    return LoginResult(await open_user_session(ctx, user), user)


@dataclass(frozen=True)
class PasswordCheck:
    """A login's password checked before its transaction (`check_password`)."""

    user_id: int | None
    password_hash: str | None
    ok: bool
    email_key: str = ""


class KnownCredentials:
    """The password hashes of users who logged in on this process lately, by programme and
    e-mail: the next login of one of them checks its password without reading the user first
    (decision 0025).

    Only ever a hint. The login's one write opens the session only if the user still has that
    e-mail and that hash (and may log in: `_OPEN_IF_PLAIN`), else the login takes the full path,
    which reads the user; a password the remembered hash refuses is checked against the user
    read afresh. So a password changed, an e-mail changed or a user deactivated, here or in
    another process, counts at once. Bounded: forgotten all at once when full, as the auth
    cache is (api/authcache.py)."""

    LIMIT = 10_000

    def __init__(self) -> None:
        self._known: dict[tuple[int, str], tuple[int, str]] = {}

    def get(self, programme_id: int, email_key: str) -> tuple[int, str] | None:
        return self._known.get((programme_id, email_key))

    def remember(self, programme_id: int, email_key: str, user_id: int, encoded: str) -> None:
        if len(self._known) >= self.LIMIT:
            self._known.clear()
        self._known[(programme_id, email_key)] = (user_id, encoded)

    def forget(self, programme_id: int, email_key: str) -> None:
        self._known.pop((programme_id, email_key), None)


async def check_password(
    db: AsyncSession,
    hasher: PasswordHasher,
    known: KnownCredentials,
    programme_id: int,
    email: str,
    password: str,
) -> PasswordCheck:
    """Checks the password against the hash remembered for the e-mail (`KnownCredentials`), or
    else reads the user on `db` (a read session of its own, closed here once read) and checks
    it against what it read: Argon2id takes tens of milliseconds, and no database connection or
    lock may be held meanwhile (issue 11). An unknown e-mail and a wrong password cost the same
    work: a read and a hash (D7)."""
    key = users.email_key(email)
    remembered = known.get(programme_id, key)
    if remembered is not None:
        if await hasher.verify(remembered[1], password):
            return PasswordCheck(remembered[0], remembered[1], True, key)
        known.forget(programme_id, key)
    found = await users.credential_by_email(db, programme_id, email)
    await db.close()  # the connection goes back to the pool before the hash is computed
    user_id, encoded = found if found is not None else (None, None)
    if remembered is not None and encoded == remembered[1]:
        ok = False  # the hash read is the one that refused this password just now
    else:
        ok = await hasher.verify(encoded, password)
    if ok and user_id is not None and encoded is not None:
        known.remember(programme_id, key, user_id, encoded)
    return PasswordCheck(user_id, encoded, ok, key)


@dataclass(frozen=True, slots=True)
class Opened:
    """A new session, as a login's answer names it."""

    session_id: int
    token_type: str
    identity_type: str
    identity_id: int
    role: str
    user_id: int

    @classmethod
    def of(cls, result: LoginResult) -> Opened:
        session, user = result.session, result.user
        return cls(
            session.id, session.token_type, user.identity_type, user.identity_id, user.role, user.id
        )


_USERS = cast(Table, User.__table__)
_SESSIONS = cast(Table, AuthSession.__table__)
_NOW = bindparam("now", type_=BigInteger)
# A plain successful login in one statement (decision 0020): the new session is written only if
# the user is as the password check found it (same hash), active, not locked, with no failed
# logins to reset and a password that has not expired. Anything else writes nothing, and the
# login takes the full path, which decides it exactly as before.
_OPEN_IF_PLAIN = (
    insert(_SESSIONS)
    .from_select(
        [
            "id",
            "programme_id",
            "user_id",
            "credential_type",
            "identity_type",
            "identity_id",
            "token_type",
            "stepped_up",
            "created_at",
            "last_seen_at",
            "ended_at",
        ],
        select(
            bindparam("session_id", type_=BigInteger),
            _USERS.c.programme_id,
            _USERS.c.id,
            _USERS.c.role,
            _USERS.c.identity_type,
            _USERS.c.identity_id,
            literal("AUTH"),
            false(),
            _NOW,
            _NOW,
            null(),
        ).where(
            _USERS.c.programme_id == bindparam("programme_id"),
            _USERS.c.id == bindparam("user_id"),
            _USERS.c.email_key == bindparam("email_key"),
            _USERS.c.password_hash == bindparam("password_hash"),
            _USERS.c.active.is_(True),
            _USERS.c.failed_logins == 0,
            _USERS.c.locked_until.is_(None),
            or_(_USERS.c.password_expires_at == 0, _USERS.c.password_expires_at > _NOW),
        ),
    )
    .returning(
        _SESSIONS.c.id,
        _SESSIONS.c.token_type,
        _SESSIONS.c.identity_type,
        _SESSIONS.c.identity_id,
        _SESSIONS.c.credential_type,
        _SESSIONS.c.user_id,
    )
)


async def login_at_once(
    db: Database,
    known: KnownCredentials,
    programme: Programme,
    checked: PasswordCheck,
    now_ms: int,
) -> Opened | None:
    """The common login, a right password and nothing else to do, as one statement that
    commits on its own: no transaction of the request's, and no ORM objects. None when it does
    not apply (a programme with webhooks has an event to record with it) or did not write: the
    caller then runs `login`, which reads the user afresh (and so the e-mail's remembered hash is
    forgotten here: it may be what no longer matches)."""
    if not checked.ok or checked.user_id is None or programme.webhook_url:
        return None
    params = {
        "session_id": new_id(),
        "programme_id": programme.id,
        "user_id": checked.user_id,
        "email_key": checked.email_key,
        "password_hash": checked.password_hash,
        "now": now_ms,
    }
    for row in await db.at_once(_OPEN_IF_PLAIN, params):
        return Opened(*tuple(row))  # RETURNING names `Opened`'s fields, in its order
    known.forget(programme.id, checked.email_key)
    return None


async def login(
    ctx: Ctx,
    hasher: PasswordHasher,
    email: str,
    password: str,
    checked: PasswordCheck | None = None,
) -> LoginResult:
    """D7: unknown e-mail and wrong password are the same 403 after the same work; failures
    count, and at the programme's limit a user is deactivated and a root user locked (423).

    With `checked` (the password checked before the transaction) the hash is not computed again,
    unless the user's password changed in between."""
    user = await users.by_email(ctx.db, ctx.programme.id, email)
    encoded = user.password_hash if user else None
    if (
        checked is not None
        and checked.user_id == (user.id if user else None)
        and (checked.password_hash == encoded)
    ):
        ok = checked.ok
    else:
        ok = await hasher.verify(encoded, password)
    if user is None:
        raise Forbidden()
    if user.locked_until is not None and user.locked_until > ctx.now:
        raise Locked()
    if not ok:
        if await users.count_failed_login(ctx.db, user.id, ctx.programme.failed_login_limit):
            if user.role == ROOT:
                user.locked_until = ctx.now + ROOT_LOCK_MS
            else:
                # Deactivated users cannot execute operations: their sessions end too, as with
                # userDeactivate.
                user.active = False
                await end_user_sessions(ctx.db, ctx.programme.id, user.id, ctx.now)
        await ctx.db.flush()
        await events.login(ctx, user, "DECLINED")
        raise Forbidden().keeping_changes()
    if not user.active:
        raise Forbidden()
    # Only when they change: a no-op assignment would still send the next statement through
    # the unit of work's flush.
    if user.failed_logins:
        user.failed_logins = 0
    if user.locked_until is not None:
        user.locked_until = None
    if user.password_expires_at and user.password_expires_at <= ctx.now:
        # Interface: an expired password yields a token good only for updating the password.
        temporary = await open_user_session(ctx, user, PASSWORD_UPDATE)
        raise PasswordExpired(temporary).keeping_changes()
    await events.login(ctx, user, "VERIFIED")
    return LoginResult(await open_user_session(ctx, user), user)


async def update_password(
    ctx: Ctx, hasher: PasswordHasher, caller: AuthSession, old: str, new: str
) -> LoginResult:
    """`POST /passwords/update`: the old password proves the caller; the session that asked
    (possibly the temporary one of an expired password) is replaced by a fresh one."""
    user = await users.get(ctx.db, ctx.programme.id, caller.user_id)
    if user is None:  # pragma: no cover - a live session names an existing user
        raise NotFound("User not found")
    check_complexity(new)
    if not await hasher.verify(user.password_hash, old):
        raise Conflict("PASSWORD_INCORRECT")
    await set_password(ctx, hasher, user, new)
    await end_session(ctx.db, caller.id, ctx.now)
    return LoginResult(await open_user_session(ctx, user), user)


async def start_lost_password(ctx: Ctx, email: str) -> None:
    """Sends an active user a link carrying a nonce. An e-mail with no active user: a sandbox
    programme answers ACCOUNT_NOT_FOUND as the reference does; a live one answers as for an
    account, so a live server never tells which addresses have accounts (D11a)."""
    user = await users.by_email(ctx.db, ctx.programme.id, email)
    if user is None or not user.active:
        if ctx.sandbox:
            raise Conflict("ACCOUNT_NOT_FOUND")
        return
    issued = await ctx.issue_code(f"user:{user.id}", LOST_PASSWORD, LOST_PASSWORD_TTL_MS)
    await notify.record(
        ctx.db,
        programme_id=ctx.programme.id,
        sandbox=ctx.sandbox,
        channel="EMAIL",
        recipient=user.email,
        subject="Reset your password",
        body=(
            "Reset your password within an hour: "
            f"/passwords/lost_password/resume?email={user.email}&nonce={issued.code}"
        ),
        now_ms=ctx.now,
    )


async def resume_lost_password(
    ctx: Ctx, hasher: PasswordHasher, email: str, nonce: str, new: str
) -> LoginResult:
    """Sets the new password, ends every other session of the user and logs them in."""
    user = await users.by_email(ctx.db, ctx.programme.id, email)
    if user is None or not user.active:
        raise Conflict("INVALID_NONCE_OR_EMAIL")
    check_complexity(new)
    # Used up here; a refused new password rolls the request back, so the nonce survives it.
    await ctx.check_code(f"user:{user.id}", LOST_PASSWORD, nonce, "INVALID_NONCE_OR_EMAIL")
    await set_password(ctx, hasher, user, new)
    user.locked_until = None
    await end_user_sessions(ctx.db, ctx.programme.id, user.id, ctx.now)
    return LoginResult(await open_user_session(ctx, user), user)


async def identities_of(ctx: Ctx, caller: AuthSession) -> list[tuple[str, int, str]]:
    """(type, id, name) of every identity the caller's login reaches: one, as e-mails are
    unique per programme (docs/decisions/0004)."""
    from multibank.identities import service as identities

    identity, root = await identities.load(ctx, caller.identity_id, caller.identity_type)
    name = (identity.company or {}).get("name") or f"{root.name} {root.surname}"
    return [(identity.type, identity.id, str(name))]


async def access_token(
    ctx: Ctx, caller: AuthSession, identity_type: str, identity_id: str
) -> LoginResult:
    """Delegated access: a new ACCESS session bound to an identity the caller may act for."""
    reachable = {(t, i) for t, i, _ in await identities_of(ctx, caller)}
    iid = parse_id(identity_id)
    if iid is None or (identity_type, iid) not in reachable:
        raise Forbidden()
    user = await users.get(ctx.db, ctx.programme.id, caller.user_id)
    if user is None or not user.active:
        raise Forbidden()
    if user.locked_until is not None and user.locked_until > ctx.now:
        raise Locked()
    return LoginResult(
        await open_user_session(ctx, user, "ACCESS", started_at=caller.created_at), user
    )


async def consume_invite(
    ctx: Ctx, hasher: PasswordHasher, user_id: str, code: str, password: str
) -> AuthSession:
    """An authorised user's invite consumed: sets the first password and logs the user in."""
    user = await users_service.invitee(ctx, user_id)
    if not user.active:
        # Consuming logs the user in, which a deactivated user may not (as login's 403); the
        # invite stays usable for when the user is activated again.
        raise Forbidden()
    check_complexity(password)
    await users_service.check_invite(ctx, user, code, keep=False)
    await set_password(ctx, hasher, user, password)
    await users_service.invite_consumed(ctx, user)
    return await open_user_session(ctx, user)
