"""Passwords and login: the rules of the interface and D7. Flushes, never commits."""

from __future__ import annotations

from dataclasses import dataclass

from multibank.access.passwords import complexity_error
from multibank.kernel.errors import Conflict, Forbidden, Locked, NotFound
from multibank.kernel.hashing import PasswordHasher
from multibank.kernel.tokens import AuthSession, end_user_sessions, open_session
from multibank.kernel.validation import parse_id
from multibank.programmes.context import Ctx
from multibank.users import repository as users
from multibank.users.models import ROOT, User

HISTORY = 5  # the current password and the four before it may not be used again
ROOT_LOCK_MS = 30 * 60 * 1000
DAY_MS = 86_400_000


@dataclass(frozen=True)
class LoginResult:
    session: AuthSession
    user: User


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


async def open_user_session(ctx: Ctx, user: User, token_type: str = "AUTH") -> AuthSession:
    return await open_session(
        ctx.db,
        programme_id=ctx.programme.id,
        user_id=user.id,
        credential_type=user.role,
        identity_type=user.identity_type,
        identity_id=user.identity_id,
        token_type=token_type,
        now_ms=ctx.now,
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


async def login(ctx: Ctx, hasher: PasswordHasher, email: str, password: str) -> LoginResult:
    """D7: unknown e-mail and wrong password are the same 403 after the same work; failures
    count, and at the programme's limit a user is deactivated and a root user locked (423)."""
    user = await users.by_email(ctx.db, ctx.programme.id, email)
    ok = await hasher.verify(user.password_hash if user else None, password)
    if user is None:
        raise Forbidden()
    if user.locked_until is not None and user.locked_until > ctx.now:
        raise Locked()
    if not ok:
        user.failed_logins += 1
        if user.failed_logins >= ctx.programme.failed_login_limit:
            user.failed_logins = 0
            if user.role == ROOT:
                user.locked_until = ctx.now + ROOT_LOCK_MS
            else:
                # Deactivated users cannot execute operations: their sessions end too, as with
                # userDeactivate.
                user.active = False
                await end_user_sessions(ctx.db, ctx.programme.id, user.id, ctx.now)
        await ctx.db.flush()
        raise Forbidden().keeping_changes()
    if not user.active:
        raise Forbidden()
    user.failed_logins = 0
    user.locked_until = None
    return LoginResult(await open_user_session(ctx, user), user)
