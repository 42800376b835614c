"""The `idempotency-ref` store of D6: one effect per (programme, caller, operation, ref).

The first request inserts a placeholder row before doing anything else, in its own transaction,
and fills in the response before that transaction commits. A duplicate either waits on the unique
index (PostgreSQL) or on the write lock (SQLite) and then replays the stored response; if the
first request failed and rolled back, the placeholder vanished with it and the duplicate runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

from sqlalchemy import (
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
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel import direct, tokens
from multibank.kernel.db import ID, Base
from multibank.kernel.direct import Deferred, Direct, Fold, Prepared, Refusal
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
    # PostgreSQL, a claim held back with the commit (`hold_renew_and_claim`): its statement and
    # parameters, so that the answer goes in the same INSERT while it is still held back.
    held: tuple[Deferred, dict[str, Any]] | None = field(default=None, compare=False)
    # SQLite, a claim whose session and ref are checked by the INSERT of its answer
    # (`hold_renew_and_claim`, decision 0033).
    unchecked: Unchecked | None = field(default=None, compare=False)


@dataclass
class Unchecked:
    """SQLite: what `hold_renew_and_claim` left for the INSERT of the answer to check (or
    `Direct.send_held`, before a refusal is answered): the session is live (and is renewed, if
    `due`), and the ref is free. `done` once checked."""

    renewal: dict[str, Any]
    due: bool
    not_renewed: Exception
    forget: Callable[[], None]
    done: bool = False
    # Checked by the request's first write, which carried it (`Fold`, decision 0034): the
    # answer's INSERT needs check nothing (the session is still renewed if `due`).
    checked: bool = False


# The claim (one statement per dialect), the completion and the release: every write request
# with a ref sends two of them, so they run on the driver's connection (kernel/direct.py,
# decision 0021).
_TABLE = cast(Table, IdempotencyRecord.__table__)
_CLAIMED = ("id", "programme_id", "caller", "operation", "ref", "payload_hash", "created_at")
_CLAIM = Prepared(
    {
        "postgresql": pg_insert(_TABLE).on_conflict_do_nothing().returning(_TABLE.c.id),
        "sqlite": sqlite_insert(_TABLE).on_conflict_do_nothing().returning(_TABLE.c.id),
    },
    keys=_CLAIMED,
)
_COMPLETE = Prepared(
    update(_TABLE)
    .where(_TABLE.c.id == bindparam("b_id"))
    .values(
        status_code=bindparam("b_status_code"),
        content_type=bindparam("b_content_type"),
        body=bindparam("b_body"),
    )
)
_RELEASE = Prepared(delete(_TABLE).where(_TABLE.c.id == bindparam("b_id")))
# The row of a ref (D6: one per programme, caller, operation and ref), its values named as
# `claim_values` names them.
_SAME_REF = and_(
    _TABLE.c.programme_id == bindparam("programme_id"),
    _TABLE.c.caller == bindparam("caller"),
    _TABLE.c.operation == bindparam("operation"),
    _TABLE.c.ref == bindparam("ref"),
)
# An unwritten claim's row, inserted with its answer (`Claim.unwritten`).
_STORE = Prepared(_TABLE.insert(), keys=(*_CLAIMED, "status_code", "content_type", "body"))
# SQLite, a logged-in write's first statement: whether its session is live (the renewal's own
# guard), and the id of the row that took its ref, if one did (decision 0030).
_LIVE_AND_TAKEN = Prepared(
    select(
        exists(select(tokens.SESSIONS.c.id).where(tokens.LIVE)).label("live"),
        select(_TABLE.c.id).where(_SAME_REF).scalar_subquery().label("taken"),
    )
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
    """A parameter cast to its column's type (in a SELECT the database cannot infer it), without
    a length: a cast to VARCHAR(n) would cut a longer value where the INSERT refuses it."""
    kind = _TABLE.c[key].type
    return sql_cast(bindparam(key), String() if isinstance(kind, String) else kind)


def _renew_and_claim() -> Prepared:
    """PostgreSQL: a logged-in write's session renewal and its claim in one round trip
    (decision 0021). The claim is inserted only if the renewal updated the session.

    The outcome is the number of rows the statement answers, not their content: one for the
    renewal and two more for the claim (0: not renewed; 1: renewed, the ref was taken; 3: both).
    A count is what a simple query tells, and so the statement can go with the transaction's
    BEGIN in one (kernel/direct.py, decision 0023)."""
    renewed = tokens.RENEWAL.returning(tokens.SESSIONS.c.id).cte("renewed")
    row = select(*(_typed(key) for key in _CLAIMED)).where(exists(select(renewed.c.id)))
    claimed = (
        pg_insert(_TABLE)
        .from_select(list(_CLAIMED), row)
        .on_conflict_do_nothing()
        .returning(_TABLE.c.id)
        .cte("claimed")
    )
    return Prepared(
        {
            "postgresql": union_all(
                select(renewed.c.id),
                select(claimed.c.id),
                select(claimed.c.id),
            )
        },
        renewal=True,
    )


_RENEW_AND_CLAIM = _renew_and_claim()
_RENEWED_AND_CLAIMED = 3


class ClaimTaken(Exception):
    """A held-back claim (`hold_renew_and_claim`) found its ref taken when it was sent: the
    request's transaction rolls back, and the stored answer is replayed
    (`IdempotencyStore.taken`)."""

    def __init__(self, values: dict[str, Any]) -> None:
        super().__init__(values["ref"])
        self.values = values


_UNIQUE_REF = str(next(c.name for c in _TABLE.constraints if isinstance(c, UniqueConstraint)))
# A held-back claim says "not renewed" by a NULL here (`_renew_and_claim_held`).
_NOT_RENEWED = (_TABLE.name, "payload_hash")


_ANSWER = ("status_code", "content_type", "body")


def _renew_and_claim_held(keys: tuple[str, ...]) -> Prepared:
    """PostgreSQL: the renewal and the claim of a write whose outcome is learnt at its commit
    (decision 0024). Whatever does not go on is an error, not a row count: a session not
    renewed leaves the claim's payload hash NULL (a NOT NULL violation), and a ref taken is a
    unique violation, after waiting for the request that holds it, as the claim's own
    `ON CONFLICT` waits. With `_ANSWER` among `keys`, the row is inserted with its answer."""
    renewed = tokens.RENEWAL.returning(tokens.SESSIONS.c.id).cte("renewed")
    values = [_typed(key) for key in keys]
    values[keys.index("payload_hash")] = (
        select(_typed("payload_hash")).select_from(renewed).scalar_subquery()
    )
    statement = pg_insert(_TABLE).from_select(list(keys), select(*values)).add_cte(renewed)
    return Prepared({"postgresql": statement}, renewal=True)


_RENEW_AND_CLAIM_HELD = _renew_and_claim_held(_CLAIMED)
# The same with the answer: what the held claim becomes when the answer is known before it was
# sent (`complete_on`): one INSERT instead of an INSERT and an UPDATE (decision 0032).
_RENEW_AND_STORE_HELD = _renew_and_claim_held((*_CLAIMED, *_ANSWER))


# SQLite: the same row, inserted only if the session is live (`Claim.unchecked`); a ref taken
# is a unique violation.
_STORE_IF_LIVE = Prepared(
    {
        "sqlite": _TABLE.insert().from_select(
            [*_CLAIMED, *_ANSWER],
            select(
                *(bindparam(key, type_=_TABLE.c[key].type) for key in (*_CLAIMED, *_ANSWER))
            ).where(exists(select(tokens.SESSIONS.c.id).where(tokens.LIVE))),
        )
    }
)


# SQLite: the same check as a condition of another write (`Fold`): the session is live and
# the ref is free.
_LIVE_AND_FREE = and_(
    exists(select(tokens.SESSIONS.c.id).where(tokens.LIVE)),
    ~exists(select(_TABLE.c.id).where(_SAME_REF)),
)


def _checked(unchecked: Unchecked) -> None:
    unchecked.checked = True


def _check_now(unchecked: Unchecked, values: dict[str, Any], d: Direct) -> None:
    """`Claim.unchecked`, checked on its own (`Direct.send_held`)."""
    if unchecked.done or unchecked.checked:
        return
    unchecked.done = True
    found = d.first(_LIVE_AND_TAKEN, {**unchecked.renewal, **values})
    if found is None or not found.live:
        unchecked.forget()
        raise unchecked.not_renewed
    if found.taken is not None:
        raise ClaimTaken(values)
    if unchecked.due and d.execute(tokens.RENEW, unchecked.renewal) != 1:  # pragma: no cover
        unchecked.forget()  # (checked live just now, under the same write lock)
        raise unchecked.not_renewed


def _store_checked(d: Direct, claim: Claim, answer: dict[str, Any]) -> None:
    """The INSERT of an unchecked claim's answer, which checks it (`Claim.unchecked`)."""
    unchecked, values = claim.unchecked, claim.unwritten
    assert unchecked is not None and values is not None
    unchecked.done = True
    try:
        if unchecked.due:  # renewed (its guard: live), then stored
            if d.execute(tokens.RENEW, unchecked.renewal) != 1:
                unchecked.forget()
                raise unchecked.not_renewed
            d.execute(_STORE, {**values, **answer})
        elif unchecked.checked:  # by the request's first write (decision 0034)
            d.execute(_STORE, {**values, **answer})
        elif d.execute(_STORE_IF_LIVE, {**unchecked.renewal, **values, **answer}) != 1:
            unchecked.forget()
            raise unchecked.not_renewed
    except IntegrityError:  # the ref's row, inserted by a request that ran first
        raise ClaimTaken(values) from None


def _hold_renew_and_claim_on(
    d: Direct,
    renewal: dict[str, Any],
    values: dict[str, Any],
    not_renewed: Exception,
    forget: Callable[[], None],
    due: bool,
) -> Claim | None:
    if d.dialect.name != "postgresql":
        unchecked = Unchecked(renewal, due, not_renewed, forget)
        fold = Fold("claim", _LIVE_AND_FREE, {**renewal, **values}, partial(_checked, unchecked))
        d.hold_check(partial(_check_now, unchecked, values), fold)
        return Claim(int(values["id"]), values, unchecked=unchecked)
    refusals = (
        Refusal(not_renewed, null=_NOT_RENEWED, then=forget),
        Refusal(ClaimTaken(values), unique=_UNIQUE_REF),
    )
    params = {**renewal, **values}
    held = d.defer(_RENEW_AND_CLAIM_HELD, params, refusals, before_reads=True)
    return None if held is None else Claim(int(values["id"]), held=(held, params))


async def hold_renew_and_claim(
    db: AsyncSession,
    renewal: dict[str, Any],
    values: dict[str, Any],
    not_renewed: Exception,
    forget: Callable[[], None],
    due: bool = True,
) -> Claim | None:
    """`renew_and_claim` held back until the request's commit. On PostgreSQL its BEGIN goes
    with it (`Direct.defer(before_reads=True)`): the request's reads run before, outside its
    transaction. On SQLite (decision 0033) the INSERT of the answer checks the session and the
    ref (`Claim.unchecked`), one statement instead of a SELECT first and an INSERT last; the
    session is renewed then only if `due` (`tokens.confirm_or_renew`). At the commit
    `not_renewed` is raised (after `forget`) if the session was not renewed, `ClaimTaken` if
    the ref was taken; so they are where a refusal is answered instead (`Direct.send_held`).
    The claim, or None: not held back; `renew_and_claim` then."""
    return await direct.run(db, _hold_renew_and_claim_on, renewal, values, not_renewed, forget, due)


def _renew_and_claim_on(
    d: Direct, renewal: dict[str, Any], values: dict[str, Any], due: bool
) -> tuple[bool, Claim | None]:
    if d.dialect.name == "postgresql":
        rows = d.execute(_RENEW_AND_CLAIM, {**renewal, **values})
        if rows < 1:
            return False, None
        return True, Claim(int(values["id"])) if rows == _RENEWED_AND_CLAIMED else None
    found = d.first(_LIVE_AND_TAKEN, {**renewal, **values})
    if found is None or not found.live:
        return False, None
    if due and d.execute(tokens.RENEW, renewal) != 1:  # pragma: no cover - checked just now
        return False, None
    return True, None if found.taken is not None else Claim(int(values["id"]), values)


async def renew_and_claim(
    db: AsyncSession, renewal: dict[str, Any], values: dict[str, Any], due: bool = True
) -> tuple[bool, Claim | None]:
    """A logged-in write's session renewal (`tokens.renewal_params`) and, if it renewed, its
    claim of a ref (`claim_values`): whether the session was renewed (or, on SQLite when it is
    not `due`, found live: `tokens.confirm_or_renew`), and the claim (None if the ref was taken:
    `IdempotencyStore.taken` says what to answer)."""
    return await direct.run(db, _renew_and_claim_on, renewal, values, due)


def complete_on(
    d: Direct, claim: Claim, status_code: int, content_type: str | None, body: bytes
) -> None:
    """Stores the answer of the request that owns `claim`, in its transaction."""
    answer = {"status_code": status_code, "content_type": content_type, "body": body}
    if claim.unchecked is not None and not claim.unchecked.done:
        _store_checked(d, claim, answer)
        return
    if claim.unwritten is not None:
        d.execute(_STORE, {**claim.unwritten, **answer})
        return
    if claim.held is not None:
        held, claimed = claim.held
        if d.amend(held, _RENEW_AND_STORE_HELD, {**claimed, **answer}):
            return  # the held claim now inserts the answer too, where it was
    params = {
        "b_id": claim.id,
        "b_status_code": status_code,
        "b_content_type": content_type,
        "b_body": body,
    }
    d.execute(_COMPLETE, params)


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
        claimed = await direct.fetch(self.session, _CLAIM, values)
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
        await direct.run(self.session, complete_on, claim, status_code, content_type, body)

    async def release(self, claim: Claim) -> None:
        """The placeholder goes: a retry of the ref runs again."""
        if claim.unwritten is None:  # an unwritten one never was
            await direct.execute(self.session, _RELEASE, {"b_id": claim.id})

    async def purge(self, older_than_ms: int) -> int:
        result = await self.session.execute(
            delete(IdempotencyRecord).where(IdempotencyRecord.created_at < older_than_ms)
        )
        return int(getattr(result, "rowcount", 0) or 0)
