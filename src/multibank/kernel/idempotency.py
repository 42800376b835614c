"""The `idempotency-ref` store of D6: one effect per (programme, caller, operation, ref).

The first request inserts a placeholder row before doing anything else, in its own transaction,
and fills in the response before that transaction commits. A duplicate either waits on the unique
index (PostgreSQL) or on the write lock (SQLite) and then replays the stored response; if the
first request failed and rolled back, the placeholder vanished with it and the duplicate runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import (
    CTE,
    Integer,
    LargeBinary,
    String,
    Table,
    UniqueConstraint,
    and_,
    bindparam,
    delete,
    exists,
    select,
    union_all,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel import tokens
from multibank.kernel.db import ID, Base, changed, dialect_name
from multibank.kernel.errors import BadRequest, PayloadTooLarge
from multibank.kernel.ids import new_id

MAX_REF_LENGTH = 255
PAYLOAD_MISMATCH = "Payloads do not match for the same idempotency-ref."


class IdempotencyRecord(Base):
    __tablename__ = "idempotency_records"
    __table_args__ = (UniqueConstraint("programme_id", "caller", "operation", "ref"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int]  # the unique constraint's first column: no index of its own
    caller: Mapped[str] = mapped_column(String(64))
    operation: Mapped[str] = mapped_column(String(200))
    ref: Mapped[str] = mapped_column(String(MAX_REF_LENGTH))
    payload_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    content_type: Mapped[str | None] = mapped_column(String(100), nullable=True)
    body: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    created_at: Mapped[int] = mapped_column(index=True)


@dataclass(frozen=True)
class StoredResponse:
    status_code: int
    content_type: str | None
    body: bytes


class Replay(Exception):
    """Raised by the idempotency dependency: answer with the stored first response."""

    def __init__(self, stored: StoredResponse) -> None:
        self.stored = stored


_UNPARSED: Any = object()
# `json.dumps(sort_keys=True, separators=...)` makes an encoder per call (its arguments are not
# the defaults): this one is made once.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def payload_hash(body: bytes, context: str = "", parsed: Any = _UNPARSED) -> str:
    """Hash of the request body, insensitive to JSON key order and white space; `context`
    (the interface version) is part of what must match. `parsed`: the body as JSON, if the
    caller has decoded it already (None is JSON's null)."""
    try:
        if parsed is _UNPARSED:
            parsed = json.loads(body)
        canonical = _CANONICAL.encode(parsed).encode()
    except ValueError:
        canonical = body
    if context:
        canonical = context.encode() + b"\0" + canonical
    return hashlib.sha256(canonical).hexdigest()


def check_ref(ref: str) -> None:
    if len(ref) > MAX_REF_LENGTH:
        raise PayloadTooLarge("idempotency-ref is longer than 255 characters")
    if not ref.strip():
        raise BadRequest(
            "idempotency-ref must not be blank",
            [{"fieldName": "idempotency-ref", "error": "HAS_TEXT", "params": []}],
        )


@dataclass(frozen=True)
class Claim:
    """The placeholder row a request owns: completed with its answer before its transaction
    commits, or released when its refusal is not the answer the ref keeps.

    `unwritten`: SQLite, a logged-in write (`renew_and_claim`): the row is not inserted until
    the answer is known, and then inserted with it, in one statement instead of two. The
    request holds SQLite's one write lock from the statement that found the ref free to its
    commit, so no other request can take the ref meanwhile (decision 0030)."""

    id: int
    unwritten: dict[str, Any] | None = field(default=None, compare=False)


# The claim (one statement per dialect), the completion and the release, built once.
_TABLE = cast(Table, IdempotencyRecord.__table__)
_CLAIMED = ("id", "programme_id", "caller", "operation", "ref", "payload_hash", "created_at")
_CLAIM = {
    "postgresql": pg_insert(_TABLE).on_conflict_do_nothing().returning(_TABLE.c.id),
    "sqlite": sqlite_insert(_TABLE).on_conflict_do_nothing().returning(_TABLE.c.id),
}
_COMPLETE = (
    update(_TABLE)
    .where(_TABLE.c.id == bindparam("b_id"))
    .values(
        status_code=bindparam("b_status_code"),
        content_type=bindparam("b_content_type"),
        body=bindparam("b_body"),
    )
)
_RELEASE = delete(_TABLE).where(_TABLE.c.id == bindparam("b_id"))
# The row of a ref (D6: one per programme, caller, operation and ref), its values named as
# `claim_values` names them.
_SAME_REF = and_(
    _TABLE.c.programme_id == bindparam("programme_id"),
    _TABLE.c.caller == bindparam("caller"),
    _TABLE.c.operation == bindparam("operation"),
    _TABLE.c.ref == bindparam("ref"),
)
# An unwritten claim's row, inserted with its answer (`Claim.unwritten`).
_STORE = _TABLE.insert()
# SQLite, a logged-in write's first statement: whether its session is live (the renewal's own
# guard), and the id of the row that took its ref, if one did (decision 0030).
_LIVE_AND_TAKEN = select(
    exists(select(tokens.SESSIONS.c.id).where(tokens.LIVE)).label("live"),
    select(_TABLE.c.id).where(_SAME_REF).scalar_subquery().label("taken"),
)


def claim_values(
    programme_id: int, caller: str, operation: str, ref: str, body_hash: str, now_ms: int
) -> dict[str, Any]:
    """The row a claim inserts (413 or 400 for a ref too long or blank)."""
    check_ref(ref)
    return {
        "id": new_id(),
        "programme_id": programme_id,
        "caller": caller,
        "operation": operation,
        "ref": ref,
        "payload_hash": body_hash,
        "created_at": now_ms,
    }


def _typed(key: str) -> Any:
    """A parameter (`c_` and its column's name) cast to its column's type (in a SELECT the
    database cannot infer it), without a length: a cast to VARCHAR(n) would cut a longer value
    where the INSERT refuses it. Not the column's own name: in a statement with an UPDATE, a
    parameter named after one of its table's columns would be a value for it to SET."""
    kind = _TABLE.c[key].type
    return sql_cast(bindparam(f"c_{key}"), String() if isinstance(kind, String) else kind)


def _renew_and_claim() -> Any:
    """PostgreSQL: a logged-in write's session renewal and its claim in one statement
    (decision 0021). The claim is inserted only if the renewal updated the session.

    The outcome is the number of rows the statement answers: one for the renewal and two more
    for the claim (0: not renewed; 1: renewed, the ref was taken; 3: both)."""
    renewed = tokens.RENEWAL.returning(tokens.SESSIONS.c.id).cte("renewed")
    row = select(*(_typed(key) for key in _CLAIMED)).where(exists(select(renewed.c.id)))
    claimed = (
        pg_insert(_TABLE)
        .from_select(list(_CLAIMED), row)
        .on_conflict_do_nothing()
        .returning(_TABLE.c.id)
        .cte("claimed")
    )
    return union_all(select(renewed.c.id), select(claimed.c.id), select(claimed.c.id))


_RENEW_AND_CLAIM = _renew_and_claim()
_RENEWED_AND_CLAIMED = 3


async def renew_and_claim(
    db: AsyncSession, renewal: dict[str, Any], values: dict[str, Any], due: bool = True
) -> tuple[bool, Claim | None]:
    """A logged-in write's session renewal (`tokens.renewal_params`) and, if it renewed, its
    claim of a ref (`claim_values`): whether the session was renewed (or, on SQLite when it is
    not `due`, found live: `tokens.renew_session`), and the claim (None if the ref was taken:
    `IdempotencyStore.taken` says what to answer)."""
    if dialect_name(db) == "postgresql":
        params = {**renewal, **{f"c_{key}": value for key, value in values.items()}}
        rows = len((await db.execute(_RENEW_AND_CLAIM, params)).all())
        if rows < 1:
            return False, None
        return True, Claim(int(values["id"])) if rows == _RENEWED_AND_CLAIMED else None
    found = (await db.execute(_LIVE_AND_TAKEN, {**renewal, **values})).first()
    if found is None or not found.live:
        return False, None
    if due and changed(await db.execute(tokens.RENEWAL, renewal)) != 1:
        return False, None  # pragma: no cover - checked live just now, under the write lock
    return True, None if found.taken is not None else Claim(int(values["id"]), values)


# A logged-in write's session check held for its operation's own first statement (decision
# 0064), in its session's `info`.
_HELD = "multibank.held_session_check"


@dataclass(frozen=True)
class HeldCheck:
    """A logged-in write's session renewal (`tokens.renewal_params`) and the claim of its ref
    (`claim_values`, or None), not sent by the dependency that made them: the operation sends
    them in its first statement (`held_ctes`, `held_params`, then `settle_held`), or
    `send_held` sends them alone, which the request's route does before any answer while one
    is still held. `settle`: what the dependency does with the outcome, whether the session
    was renewed and the claim, or None where the ref was taken (a 401, a replay, a 400, or the
    claim recorded as the request's own)."""

    renewal: dict[str, Any]
    claim: dict[str, Any] | None
    settle: Callable[[bool, Claim | None], Awaitable[None]]


def hold(db: AsyncSession, check: HeldCheck) -> None:
    """PostgreSQL only: SQLite keeps checking first (`renew_and_claim`)."""
    db.info[_HELD] = check


def take_held(db: AsyncSession) -> HeldCheck | None:
    """The check held for this operation, now its to send (`held_ctes`)."""
    held: HeldCheck | None = db.info.pop(_HELD, None)
    return held


async def send_held(db: AsyncSession) -> None:
    """Sends what is held (if anything) alone, and settles it: what a dependency would have
    sent first. May raise what the settlement raises (401, a replay)."""
    held = take_held(db)
    if held is None:
        return
    if held.claim is None:
        renewed, claimed = changed(await db.execute(tokens.RENEWAL, held.renewal)) == 1, None
    else:
        renewed, claimed = await renew_and_claim(db, held.renewal, held.claim)
    await held.settle(renewed, claimed)


def held_ctes(with_claim: bool) -> list[CTE]:
    """PostgreSQL: a held check as CTEs of an operation's statement (`held_params`): the
    renewal (`renewed`, the session's id if it renewed) and, `with_claim`, the claim
    (`claimed`, its id if it took the ref), inserted only if the renewal renewed; the last
    is what the operation's writes must wait for (`EXISTS`), so that they are written only
    once the session was found live and the ref free, after the session's row lock."""
    renewed = tokens.RENEWAL.returning(tokens.SESSIONS.c.id).cte("renewed")
    if not with_claim:
        return [renewed]
    row = select(*(_typed(key) for key in _CLAIMED)).where(exists(select(renewed.c.id)))
    claimed = (
        pg_insert(_TABLE)
        .from_select(list(_CLAIMED), row)
        .on_conflict_do_nothing()
        .returning(_TABLE.c.id)
        .cte("claimed")
    )
    return [renewed, claimed]


def held_params(held: HeldCheck) -> dict[str, Any]:
    claim = held.claim or {}
    return {**held.renewal, **{f"c_{key}": value for key, value in claim.items()}}


async def settle_held(held: HeldCheck, renewed: int, claimed: int) -> None:
    """Settles a check sent by `held_ctes`: the rows its `renewed` and `claimed` returned."""
    owned = Claim(int(held.claim["id"])) if held.claim is not None and claimed else None
    await held.settle(renewed == 1, owned)


class IdempotencyStore:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def _find(self, values: dict[str, Any]) -> IdempotencyRecord | None:
        """The row that took the ref of `values` (`claim_values`)."""
        keys = ("programme_id", "caller", "operation", "ref")
        params = {key: values[key] for key in keys}
        stmt = select(IdempotencyRecord).where(_SAME_REF)
        return (await self.session.execute(stmt, params)).scalar_one_or_none()

    async def begin(
        self,
        *,
        programme_id: int,
        caller: str,
        operation: str,
        ref: str,
        body_hash: str,
        now_ms: int,
    ) -> StoredResponse | Claim:
        """Returns the stored response to replay, or the new placeholder this request now owns."""
        return await self.claim(
            claim_values(programme_id, caller, operation, ref, body_hash, now_ms)
        )

    async def claim(self, values: dict[str, Any]) -> StoredResponse | Claim:
        """`begin` for a claim already made up (`claim_values`)."""
        # One statement claims the ref; a concurrent holder makes it wait on the unique index
        # (PostgreSQL) or the write lock (SQLite) and then insert nothing.
        statement = _CLAIM[dialect_name(self.session)]
        claimed = (await self.session.execute(statement, values)).all()
        if claimed:
            return Claim(int(claimed[0].id))
        return await self.taken(values)

    async def taken(self, values: dict[str, Any]) -> StoredResponse:
        """What a claim that inserted nothing finds: the stored response to replay, or a 400 if
        the payloads differ."""
        existing = await self._find(values)
        if existing is None:  # pragma: no cover - the winner's row must be visible now
            raise RuntimeError("idempotency-ref conflict without a visible row")
        if existing.payload_hash != values["payload_hash"]:
            raise BadRequest(PAYLOAD_MISMATCH)
        if existing.status_code is None:  # pragma: no cover - only visible inside its own txn
            raise BadRequest("A request with this idempotency-ref is still running.")
        return StoredResponse(existing.status_code, existing.content_type, existing.body or b"")

    async def complete(
        self, claim: Claim, status_code: int, content_type: str | None, body: bytes
    ) -> None:
        if claim.unwritten is not None:
            answer = {"status_code": status_code, "content_type": content_type, "body": body}
            await self.session.execute(_STORE, {**claim.unwritten, **answer})
            return
        params = {
            "b_id": claim.id,
            "b_status_code": status_code,
            "b_content_type": content_type,
            "b_body": body,
        }
        await self.session.execute(_COMPLETE, params)

    async def release(self, claim: Claim) -> None:
        """The placeholder goes: a retry of the ref runs again."""
        if claim.unwritten is None:  # an unwritten one never was
            await self.session.execute(_RELEASE, {"b_id": claim.id})

    async def purge(self, older_than_ms: int) -> int:
        result = await self.session.execute(
            delete(IdempotencyRecord).where(IdempotencyRecord.created_at < older_than_ms)
        )
        return int(getattr(result, "rowcount", 0) or 0)
