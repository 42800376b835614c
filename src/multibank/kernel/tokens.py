"""Auth tokens: HS256 JWTs with a key id, naming a server-side session (D7).

The JWT only says which session; whether it is still alive (idle and absolute limits, logout)
is decided by the session row, so logout and expiry take effect in every process at once.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any, cast

import jwt
from jwt.algorithms import HMACAlgorithm
from jwt.api_jws import PyJWS
from sqlalchemy import (
    Boolean,
    ForeignKey,
    String,
    Table,
    and_,
    bindparam,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base, changed, dialect_name
from multibank.kernel.ids import new_id

ISSUER = "multibank"
VERIFIED_TOKENS_KEPT = 50_000
# An HS256 secret shorter than its 256-bit hash is guessable sooner (RFC 7518, 3.2).
MIN_SECRET_CHARS = 32


class AuthSession(Base):
    __tablename__ = "auth_sessions"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"), index=True)
    user_id: Mapped[int] = mapped_column(index=True)
    credential_type: Mapped[str] = mapped_column(String(10))  # ROOT | USER
    identity_type: Mapped[str] = mapped_column(String(10))  # CORPORATE | CONSUMER
    identity_id: Mapped[int]
    token_type: Mapped[str] = mapped_column(String(20))  # AUTH | ACCESS | PASSWORD_UPDATE
    stepped_up: Mapped[bool] = mapped_column(Boolean, default=False)
    # When the session last stepped up (programme clock, ms); None until it does (decision 0059).
    stepped_up_at: Mapped[int | None] = mapped_column(nullable=True)
    created_at: Mapped[int]
    last_seen_at: Mapped[int]
    ended_at: Mapped[int | None] = mapped_column(nullable=True)


class _KeyCheckedOnce(HMACAlgorithm):
    """HS256 whose checks of a key (not a PEM, SSH or DER key, long enough) run once per key
    rather than for every token: parsing the secret as each kind of public key cost PyJWT a
    third of a signature (decision 0025). The signature is PyJWT's own."""

    def __init__(self) -> None:
        super().__init__(HMACAlgorithm.SHA256)
        self._prepared: dict[str | bytes, bytes] = {}
        self._length: dict[bytes, str | None] = {}

    def prepare_key(self, key: str | bytes) -> bytes:
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = super().prepare_key(key)
            if len(self._prepared) < 64:  # the keyring's few keys
                self._prepared[key] = prepared
        return prepared

    def check_key_length(self, key: bytes) -> str | None:
        if key in self._length:
            return self._length[key]
        found = super().check_key_length(key)
        if len(self._length) < 64:
            self._length[key] = found
        return found


_SIGNER = PyJWS()
_SIGNER.unregister_algorithm("HS256")
_SIGNER.register_algorithm("HS256", _KeyCheckedOnce())


@dataclass(frozen=True)
class TokenKeyring:
    """Signing keys by id; the first signs, all verify, so keys can be rotated without logouts."""

    keys: tuple[tuple[str, str], ...]
    # Tokens this keyring verified, and what they name. A token carries no expiry (the session
    # row decides), so a signature checked once stays checked for this keyring: a read pays a
    # dict lookup instead of base64, JSON and HMAC again. Bounded like api/authcache.py.
    _verified: dict[str, tuple[int, int]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def parse(cls, spec: str) -> TokenKeyring:
        """Reads "kid:secret,kid2:secret2". A refusal says which pair is wrong in one line that
        never shows a secret (`Settings` checks MULTIBANK_JWT_KEYS with it)."""
        pairs = []
        for n, part in enumerate(spec.split(","), 1):
            kid, colon, secret = part.strip().partition(":")
            if not kid or not colon:
                raise ValueError(f"pair {n} is not kid:secret (kid:secret,kid2:secret2...)")
            if len(secret) < MIN_SECRET_CHARS:
                raise ValueError(
                    f"the secret of key {kid!r} has {len(secret)} characters; "
                    f"at least {MIN_SECRET_CHARS} are needed"
                )
            pairs.append((kid, secret))
        return cls(tuple(pairs))

    @staticmethod
    def generate_spec() -> str:
        return f"k{secrets.token_hex(4)}:{secrets.token_urlsafe(48)}"

    def sign(self, session_id: int, programme_id: int) -> str:
        kid, secret = self.keys[0]
        claims = {"iss": ISSUER, "sid": str(session_id), "pid": str(programme_id)}
        # The claims as `jwt.encode` lays them out, signed by `_SIGNER`.
        payload = json.dumps(claims, separators=(",", ":")).encode()
        return _SIGNER.encode(payload, secret, algorithm="HS256", headers={"kid": kid})

    def verify(self, token: str) -> tuple[int, int] | None:
        """(session id, programme id) of a well-signed token, or None."""
        known = self._verified.get(token)
        if known is not None:
            return known
        decoded = self._decode(token)
        if decoded is not None:
            if len(self._verified) >= VERIFIED_TOKENS_KEPT:
                self._verified.clear()
            self._verified[token] = decoded
        return decoded

    def _decode(self, token: str) -> tuple[int, int] | None:
        try:
            kid = jwt.get_unverified_header(token).get("kid")
            secret = dict(self.keys).get(str(kid))
            if secret is None:
                return None
            claims = jwt.decode(
                token, secret, algorithms=["HS256"], issuer=ISSUER, options={"require": ["sid"]}
            )
            return int(claims["sid"]), int(claims["pid"])
        except (jwt.PyJWTError, ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class SessionLimits:
    idle_ms: int
    absolute_ms: int


# Over 8 parameters: a session row's columns, named at every call.
async def open_session(
    db: AsyncSession,
    *,
    programme_id: int,
    user_id: int,
    credential_type: str,
    identity_type: str,
    identity_id: int,
    token_type: str,
    now_ms: int,
    started_at: int | None = None,
) -> AuthSession:
    values: dict[str, Any] = {
        "id": new_id(),
        "programme_id": programme_id,
        "user_id": user_id,
        "credential_type": credential_type,
        "identity_type": identity_type,
        "identity_id": identity_id,
        "token_type": token_type,
        "stepped_up": False,
        "stepped_up_at": None,
        # The absolute limit counts from `created_at`.
        "created_at": now_ms if started_at is None else min(started_at, now_ms),
        "last_seen_at": now_ms,
        "ended_at": None,
    }
    # One prepared INSERT rather than the unit of work's flush (decision 0019); the row is
    # returned as a detached snapshot of what was written.
    await db.execute(_OPEN, values)
    return AuthSession(**values)


async def touch_session(
    db: AsyncSession, session_id: int, programme_id: int, now_ms: int, limits: SessionLimits
) -> AuthSession | None:
    """The live session a token names, renewed; None if it ended, idled out or grew too old."""
    if not await renew_session(db, session_id, programme_id, now_ms, limits):
        return None
    return await read_session(db, session_id)


def alive(
    row: AuthSession, last_seen_ms: int, programme_id: int, now_ms: int, limits: SessionLimits
) -> bool:
    """Whether a session is live at `now_ms`, its last activity being `last_seen_ms` (D7)."""
    return (
        row.programme_id == programme_id
        and row.ended_at is None
        and last_seen_ms >= now_ms - limits.idle_ms
        and row.created_at >= now_ms - limits.absolute_ms
    )


# Built once with bound parameters: these run on the request path (decision 0014).
SESSIONS = cast(Table, AuthSession.__table__)
_OPEN = insert(SESSIONS)
_READ = select(*SESSIONS.c).where(SESSIONS.c.id == bindparam("session_id"))
# A session's renewal (its parameters: `renewal_params`), sent by every write request. A Core
# statement on the table: the auth cache records a renewal itself (api/deps.py), so no ORM
# event drops what it remembers.
# The renewal's guard: the session is live (D7).
LIVE = and_(
    SESSIONS.c.id == bindparam("b_session_id"),
    SESSIONS.c.programme_id == bindparam("b_programme_id"),
    SESSIONS.c.ended_at.is_(None),
    SESSIONS.c.last_seen_at >= bindparam("idle_since"),
    SESSIONS.c.created_at >= bindparam("started_since"),
)
RENEWAL = update(SESSIONS).where(LIVE).values(last_seen_at=bindparam("b_now_ms"))
# The same guard, read without writing (`renew_session` not due, SQLite).
_CONFIRM = select(SESSIONS.c.id).where(LIVE)


async def read_session(db: AsyncSession, session_id: int) -> AuthSession | None:
    """The session row as the database holds it now (never a stale copy of this session), as a
    detached snapshot: it is shared read-only (api/authcache.py), and changed only by
    statements by id."""
    row = (await db.execute(_READ, {"session_id": session_id})).first()
    return None if row is None else AuthSession(**row._asdict())


# A session that has not stepped up, and the sessions of its user that stepped up since `since`
# (decision 0059), in one statement.
_OWN_AND_STEPPED_UP_SINCE = select(*SESSIONS.c).where(
    SESSIONS.c.programme_id == bindparam("programme_id"),
    SESSIONS.c.user_id == bindparam("user_id"),
    or_(SESSIONS.c.id == bindparam("session_id"), SESSIONS.c.stepped_up_at >= bindparam("since")),
)


async def own_and_stepped_up_since(
    db: AsyncSession, session: AuthSession, since_ms: int
) -> tuple[AuthSession | None, list[AuthSession]]:
    """`session`'s row as the database holds it now, and the other sessions of its user (same
    programme) whose last step-up was at `since_ms` or later, ended ones included."""
    params = {
        "programme_id": session.programme_id,
        "user_id": session.user_id,
        "session_id": session.id,
        "since": since_ms,
    }
    own: AuthSession | None = None
    others: list[AuthSession] = []
    for row in (await db.execute(_OWN_AND_STEPPED_UP_SINCE, params)).all():
        found = AuthSession(**row._asdict())
        if found.id == session.id:
            own = found
        else:
            others.append(found)
    return own, others


def ends_at(row: AuthSession, limits: SessionLimits) -> int:
    """When a session ended or will end if nothing renews it (D7): its logout, or its idle or
    absolute limit, whichever comes first."""
    end = min(row.last_seen_at + limits.idle_ms, row.created_at + limits.absolute_ms)
    return end if row.ended_at is None else min(end, row.ended_at)


async def renew_session(
    db: AsyncSession,
    session_id: int,
    programme_id: int,
    now_ms: int,
    limits: SessionLimits,
    due: bool = True,
) -> bool:
    """Records activity at `now_ms`, in one guarded statement: False if, meanwhile, the session
    ended or ran out (two processes racing cannot revive a session the other found expired).

    `due`: whether this process's last renewal is old enough to write another (a write's
    `_live_session`). On SQLite one not due is only confirmed: the same guard read without
    writing (decision 0030). On PostgreSQL a write always renews: the row lock it takes is what
    serialises a session's concurrent writes (factors/service.py); on SQLite every write holds
    the one write lock from its first statement to its commit already, and a renewal written at
    most once a second keeps the idle limit as exact as a read's (decision 0013)."""
    params = renewal_params(session_id, programme_id, now_ms, limits)
    if due or dialect_name(db) == "postgresql":
        return changed(await db.execute(RENEWAL, params)) == 1
    return (await db.execute(_CONFIRM, params)).first() is not None


def renewal_params(
    session_id: int, programme_id: int, now_ms: int, limits: SessionLimits
) -> dict[str, Any]:
    return {
        "b_session_id": session_id,
        "b_programme_id": programme_id,
        "idle_since": now_ms - limits.idle_ms,
        "started_since": now_ms - limits.absolute_ms,
        "b_now_ms": now_ms,
    }


async def end_session(db: AsyncSession, session_id: int, now_ms: int) -> None:
    await db.execute(
        update(AuthSession)
        .where(AuthSession.id == session_id, AuthSession.ended_at.is_(None))
        .values(ended_at=now_ms)
    )


async def end_user_sessions(
    db: AsyncSession, programme_id: int, user_id: int, now_ms: int, keep: int | None = None
) -> None:
    stmt = update(AuthSession).where(
        AuthSession.programme_id == programme_id,
        AuthSession.user_id == user_id,
        AuthSession.ended_at.is_(None),
    )
    if keep is not None:
        stmt = stmt.where(AuthSession.id != keep)
    await db.execute(stmt.values(ended_at=now_ms))
