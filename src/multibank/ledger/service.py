"""Double-entry postings (D5). Every movement is one transaction whose postings sum to zero per
currency; balances change only here, through guarded UPDATEs in the caller's transaction, with
the accounts locked in id order so two movements never deadlock."""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NoReturn, cast
from weakref import WeakKeyDictionary

from sqlalchemy import (
    Select,
    String,
    Table,
    Update,
    bindparam,
    case,
    exists,
    func,
    insert,
    literal,
    select,
    union_all,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.kernel import direct
from multibank.kernel.direct import Direct, Fold, Prepared, Refusal
from multibank.kernel.ids import new_id
from multibank.ledger.models import (
    MANAGED_ACCOUNT,
    RESERVED,
    REVENUE,
    LedgerAccount,
    LedgerTransaction,
    Posting,
)
from multibank.observability import posting_counted


class InsufficientFunds(Exception):
    """A guarded debit found less than it needs; the caller's transaction must roll back."""

    def __init__(self, account_id: int) -> None:
        super().__init__(account_id)
        self.account_id = account_id


class Unbalanced(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Movement:
    """A ledger transaction as `post` wrote it (a snapshot: later changes are statements by
    id). Not an ORM instance: making one costs more than the INSERT (decision 0021)."""

    id: int
    programme_id: int
    type: str
    state: str
    details: dict[str, Any]
    external_id: int | None
    created_at: int


@dataclass(frozen=True)
class Leg:
    """One side of a movement: signed amounts (credit positive) on one account."""

    account_id: int
    currency: str
    available: int
    actual: int
    # Customer accounts may not go below zero; system accounts (settlement) may.
    guarded: bool = True


# The programme's revenue in a currency is kept on this many ledger accounts, each charge going to
# the one its source account's id picks: charges of different customers then rarely wait on one
# another's row lock (issue 11, decision 0013). Revenue is their sum (`revenue_balance`).
REVENUE_SHARDS = 8


@dataclass(frozen=True)
class Condition:
    """What a movement requires of what its caller read in an earlier request (decision
    0024): `clause`, a SQL condition on its own parameters (`params`, named `c_...`), is
    checked in the movement's statement (PostgreSQL, held back) or in its first, the
    transaction's INSERT (SQLite, decision 0033), as of that statement. When it does not hold
    nothing changes and `stale` is raised (after `then`): the caller's request runs again,
    reading afresh. `name` tells statements apart (one per kind of condition)."""

    name: str
    clause: Any
    params: dict[str, Any]
    stale: Exception
    then: Callable[[], None] | None = None


def revenue_shard(source_account_id: int) -> int:
    # Not the id's low bits: those are the sequence within a millisecond, nearly always 0.
    return zlib.crc32(str(source_account_id).encode()) % REVENUE_SHARDS


async def revenue_balance(db: AsyncSession, programme_id: int, currency: str) -> tuple[int, int]:
    """The programme's revenue in `currency` (available, actual): the sum of its shards."""
    keys = [_system_key(programme_id, REVENUE, currency, shard) for shard in range(REVENUE_SHARDS)]
    row = (
        await db.execute(
            select(
                func.coalesce(func.sum(LedgerAccount.available), 0),
                func.coalesce(func.sum(LedgerAccount.actual), 0),
            ).where(LedgerAccount.system_key.in_(keys))
        )
    ).one()
    return int(row[0]), int(row[1])


def _system_key(programme_id: int, kind: str, currency: str, shard: int) -> str:
    # Shard 0 keeps the key of the time before shards, so existing ledgers need no migration.
    base = f"{programme_id}:{kind}:{currency}"
    return base if shard == 0 else f"{base}:{shard}"


# Statements of every movement, built once with bound parameters: building them per request
# (coercing each comparison) cost a fee charge more than executing them (decision 0014).
_SYSTEM_ACCOUNT = select(LedgerAccount.id).where(LedgerAccount.system_key == bindparam("key"))

_ACCOUNTS = cast(Table, LedgerAccount.__table__)
_POSTINGS = cast(Table, Posting.__table__)
_TRANSACTIONS = cast(Table, LedgerTransaction.__table__)


def _apply_statement(guard_available: bool, guard_actual: bool) -> Update:
    a = _ACCOUNTS.c
    stmt = update(_ACCOUNTS).where(
        a.id == bindparam("b_id"),
        a.programme_id == bindparam("b_programme_id"),
        a.currency == bindparam("b_currency"),
    )
    if guard_available:
        stmt = stmt.where(a.available >= bindparam("b_need_available"))
    if guard_actual:
        stmt = stmt.where(a.actual >= bindparam("b_need_actual"))
    return stmt.values(
        available=a.available + bindparam("b_available"),
        actual=a.actual + bindparam("b_actual"),
        posting_count=a.posting_count + 1,
        movement_count=a.movement_count + bindparam("b_movement"),
    ).returning(a.available, a.actual, a.posting_count)


# A movement's statements run on the driver's connection of the caller's transaction, all of
# one movement in one hand-over (kernel/direct.py, decision 0021): every fee charge, payment and
# deposit sends them.
_APPLY = {(a, b): Prepared(_apply_statement(a, b)) for a in (False, True) for b in (False, True)}
_POSTING_KEYS = (
    "id",
    "programme_id",
    "transaction_id",
    "account_id",
    "currency",
    "available_amount",
    "actual_amount",
    "available_after",
    "actual_after",
    "created_at",
    "seq",  # the account's posting_count that the posting's own update left
)
_TRANSACTION_KEYS = ("id", "programme_id", "type", "state", "details", "external_id", "created_at")
_INSERT_POSTINGS = Prepared(insert(_POSTINGS), keys=_POSTING_KEYS)
_INSERT_TRANSACTION = Prepared(insert(_TRANSACTIONS), keys=_TRANSACTION_KEYS)
# SQLite: the transaction's INSERT that writes it only where a condition holds (`Condition`),
# one per kind of condition.
_INSERT_TRANSACTION_IF: dict[str, Prepared] = {}


def _insert_transaction_if(condition: Condition) -> Prepared:
    found = _INSERT_TRANSACTION_IF.get(condition.name)
    if found is None:
        row = select(
            *(bindparam(key, type_=_TRANSACTIONS.c[key].type) for key in _TRANSACTION_KEYS)
        ).where(condition.clause)
        statement = insert(_TRANSACTIONS).from_select(list(_TRANSACTION_KEYS), row)
        found = _INSERT_TRANSACTION_IF[condition.name] = Prepared({"sqlite": statement})
    return found


def _unsized(kind: Any) -> Any:
    return String() if isinstance(kind, String) else kind


def _movement_statement(
    guards: tuple[tuple[bool, bool], ...], failing: bool = False, condition: Any = None
) -> Prepared:
    """PostgreSQL: a whole movement in one statement, one round trip (decisions 0021, 0024):
    each leg's guarded balance update, the transaction and all its postings. The legs come in
    account id order and each update after the first runs only once the one before it has
    returned its row (`EXISTS` on it), so the row locks are still taken in id order and two
    movements cannot deadlock. A guard that fails updates nothing and stops the legs after it:
    the statement inserts fewer postings than legs, the caller raises InsufficientFunds and the
    transaction rolls back. Each posting's balances are what its own update returns.

    `failing`: a refused leg makes the statement fail instead, with a NOT NULL violation on
    `postings.available_after` (its posting's balance is that of an update that did not
    happen): how a movement whose outcome is learnt later says it (`Direct.defer`).

    `condition` (with `failing`): the transaction is written first, its details NULL where the
    condition does not hold (a NOT NULL violation before any balance changes: `STALE`)."""
    values: dict[str, Any] = {key: bindparam(f"t_{key}") for key in _TRANSACTION_KEYS}
    if condition is not None:
        details = _TRANSACTIONS.c.details
        values["details"] = case((condition, bindparam("t_details", type_=details.type)))
    written_: Any = insert(_TRANSACTIONS).values(values)
    if condition is not None:
        written_ = written_.returning(_TRANSACTIONS.c.id)
    written = written_.cte("written")
    moved: list[Any] = []
    for i, (guard_available, guard_actual) in enumerate(guards):
        a = _ACCOUNTS.c
        update_ = update(_ACCOUNTS).where(
            a.id == bindparam(f"b{i}_id"),
            a.programme_id == bindparam(f"b{i}_programme_id"),
            a.currency == bindparam(f"b{i}_currency"),
        )
        if guard_available:
            update_ = update_.where(a.available >= bindparam(f"b{i}_need_available"))
        if guard_actual:
            update_ = update_.where(a.actual >= bindparam(f"b{i}_need_actual"))
        if moved:
            update_ = update_.where(exists(select(moved[-1].c.available)))
        elif condition is not None:  # the condition's check comes first
            update_ = update_.where(exists(select(written.c.id)))
        moved.append(
            update_.values(
                available=a.available + bindparam(f"b{i}_available"),
                actual=a.actual + bindparam(f"b{i}_actual"),
                posting_count=a.posting_count + 1,
                movement_count=a.movement_count + bindparam(f"b{i}_movement"),
            )
            .returning(a.available, a.actual, a.posting_count)
            .cte(f"moved{i}")
        )

    def posting(i: int) -> Select[Any]:
        # Typed casts: in a SELECT the database cannot infer a parameter's type from a column
        # (without a length: a cast to VARCHAR(n) would cut what the INSERT refuses).
        values: list[Any] = [
            sql_cast(bindparam(f"p{i}_{key}"), _unsized(_POSTINGS.c[key].type))
            for key in _POSTING_KEYS
        ]
        if failing:  # NULL, not no row, where the update did not happen
            values[7] = select(moved[i].c.available).scalar_subquery()
            values[8] = select(moved[i].c.actual).scalar_subquery()
            values[10] = select(moved[i].c.posting_count).scalar_subquery()
            return select(*values)
        # the `..._after` columns and the posting's place in the account's chain
        values[7], values[8] = moved[i].c.available, moved[i].c.actual
        values[10] = moved[i].c.posting_count
        return select(*values).select_from(moved[i])

    rows = union_all(*(posting(i) for i in range(len(guards))))
    statement = insert(_POSTINGS).from_select(list(_POSTING_KEYS), rows).add_cte(written)
    for cte in moved:
        statement = statement.add_cte(cte)
    return Prepared({"postgresql": statement})


_MOVEMENT: dict[tuple[tuple[tuple[bool, bool], ...], bool, str], Prepared] = {}
# What a refused leg of a held-back movement looks like (`_movement_statement(failing=True)`).
REFUSED_LEG = ("postings", "available_after")
STALE = ("ledger_transactions", "details")


# The ids of system accounts, per engine (per database). A system account is never removed or
# renumbered, so once one is seen committed its id is known for good: a fee charge or payment
# then needs no statement to find its revenue or reserve account (issue 11).
_KNOWN_SYSTEM_ACCOUNTS: WeakKeyDictionary[object, dict[str, int]] = WeakKeyDictionary()
# Keys of the system accounts a session created: uncommitted until it commits, so not known yet.
_CREATED_HERE = "multibank.ledger.created_system_accounts"


async def system_account(
    db: AsyncSession, programme_id: int, kind: str, currency: str, now_ms: int, shard: int = 0
) -> int:
    """The programme's revenue or settlement account in `currency` (revenue: one of its
    shards), created on first use."""
    key = _system_key(programme_id, kind, currency, shard)
    database = getattr(db.bind, "sync_engine", None)  # the engine, or the session's connection's
    known = _KNOWN_SYSTEM_ACCOUNTS.get(database) if database is not None else None
    if known is not None and key in known:
        return known[key]
    found = (await db.execute(_SYSTEM_ACCOUNT, {"key": key})).scalar_one_or_none()
    if found is not None:
        if database is not None and key not in db.info.get(_CREATED_HERE, ()):
            # Not this session's own: another transaction's, which has committed it.
            _KNOWN_SYSTEM_ACCOUNTS.setdefault(database, {})[key] = int(found)
        return int(found)
    account = LedgerAccount(
        id=new_id(),
        programme_id=programme_id,
        kind=kind,
        currency=currency,
        system_key=key,
        available=0,
        actual=0,
        created_at=now_ms,
    )
    try:
        async with db.begin_nested():
            db.add(account)
            await db.flush()
    except IntegrityError:  # another request created it first; theirs is the one
        return int((await db.execute(_SYSTEM_ACCOUNT, {"key": key})).scalar_one())
    db.info.setdefault(_CREATED_HERE, set()).add(key)
    return account.id


async def open_account(
    db: AsyncSession, programme_id: int, currency: str, now_ms: int, account_id: int | None = None
) -> LedgerAccount:
    account = LedgerAccount(
        id=account_id or new_id(),
        programme_id=programme_id,
        kind=MANAGED_ACCOUNT,
        currency=currency,
        available=0,
        actual=0,
        created_at=now_ms,
    )
    db.add(account)
    await db.flush()
    return account


async def post(
    db: AsyncSession,
    *,
    programme_id: int,
    type_: str,
    legs: Sequence[Leg],
    now_ms: int,
    state: str = "COMPLETED",
    details: dict[str, Any] | None = None,
    external_id: int | None = None,
    transaction_id: int | None = None,
    refused: Exception | None = None,
    condition: Condition | None = None,
    last_refusal: bool = False,
) -> Movement:
    """Writes one transaction. Raises Unbalanced when the legs do not sum to zero per currency,
    InsufficientFunds when a guarded debit would take a balance below zero.

    `transaction_id` names the transaction after the resource it moves money for (a payment's
    statement entry has the payment's id); `details` may hold `byAccount`, each account's own
    statement `additionalFields` and fee (`account_details`).

    `refused`: what the caller raises when a guarded debit lacks the funds, given when nothing
    it does next depends on the movement. On PostgreSQL the movement may then go with the
    transaction's next round trip (its next statement, or its COMMIT: `Direct.defer`, decision
    0024), and `refused` is raised there; otherwise InsufficientFunds is raised here.
    `condition` (with `refused`): see `Condition`; where the movement cannot be held back, its
    `stale` is raised at once. `last_refusal`: nothing the request does after the movement can
    refuse it (nor fail, but for a fault): on SQLite the movement's first write may then carry
    every check of the request and write without a savepoint (`_post_checked_first`)."""
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for leg in legs:
        sums[leg.currency][0] += leg.available
        sums[leg.currency][1] += leg.actual
    if any(a or b for a, b in sums.values()):
        raise Unbalanced(f"postings of {type_} do not sum to zero: {dict(sums)}")
    values: dict[str, Any] = {
        "id": transaction_id or new_id(),
        "programme_id": programme_id,
        "type": type_,
        "state": state,
        "details": details or {},
        "external_id": external_id,
        "created_at": now_ms,
    }
    # A prepared INSERT, not the unit of work's flush (decision 0019): the transaction is
    # returned as a detached snapshot of what was written; later changes are statements by id.
    await direct.run(db, _post, values, legs, refused, condition, last_refusal)
    return Movement(**values)


def _post(
    d: Direct,
    values: dict[str, Any],
    legs: Sequence[Leg],
    refused: Exception | None = None,
    condition: Condition | None = None,
    last_refusal: bool = False,
) -> None:
    sqlite = d.dialect.name != "postgresql"
    if condition is not None and not legs:
        _stale(condition)  # a movement checks a condition; nothing moves here
    if sqlite or not legs:
        unsaved = last_refusal and legs and d.lazy_savepoint is not None
        if unsaved and _post_checked_first(d, values, legs, condition):
            return
        if condition is None:
            d.execute(_INSERT_TRANSACTION, values)
        elif d.execute(_insert_transaction_if(condition), {**values, **condition.params}) != 1:
            # SQLite holds its one write lock: what the condition read cannot change before the
            # commit. Nothing was written yet.
            _stale(condition)
        _write(d, values["programme_id"], values["id"], legs, values["created_at"])
        return
    if condition is not None and (refused is None or not d.defers):
        _stale(condition)  # only a held-back movement checks a condition on PostgreSQL
    # PostgreSQL: every round trip costs the event loop and the database; the whole movement
    # goes in one.
    programme_id, now_ms = values["programme_id"], values["created_at"]
    ordered = sorted(legs, key=_by_id)
    params: dict[str, Any] = {f"t_{key}": value for key, value in values.items()}
    guards = []
    for i, leg in enumerate(ordered):
        for key, value in _posting(programme_id, values["id"], leg, (0, 0, 0), now_ms).items():
            params[f"p{i}_{key}"] = value
        leg_params = _leg_params(programme_id, leg)
        guards.append(_guards(leg_params))
        for key, value in leg_params.items():
            params[f"b{i}_{key[2:]}"] = value
    shape = tuple(guards)
    if refused is not None and d.defers:
        refusals = [Refusal(refused, null=REFUSED_LEG)]
        name = ""
        if condition is not None:
            name = condition.name
            params.update(condition.params)
            refusals.insert(0, Refusal(condition.stale, null=STALE, then=condition.then))
        held_back = _MOVEMENT.get((shape, True, name))
        if held_back is None:
            clause = None if condition is None else condition.clause
            held_back = _movement_statement(shape, failing=True, condition=clause)
            _MOVEMENT[shape, True, name] = held_back
        if d.defer(held_back, params, refusals, partial(_counted, ordered)):
            return
        if condition is not None:
            _stale(condition)
    statement = _MOVEMENT.get((shape, False, ""))
    if statement is None:
        statement = _MOVEMENT[shape, False, ""] = _movement_statement(shape)
    written = d.execute(statement, params)
    if written != len(ordered):  # the legs before the refused one were applied, then stopped
        raise InsufficientFunds(ordered[written].account_id)
    _counted(ordered)


# SQLite: a movement's one guarded leg carrying every check that could refuse its request (its
# condition, and what `Direct.hold_check` holds: `Fold`), by (guards, names of what it carries).
_CHECKED_APPLY: dict[tuple[tuple[bool, bool], tuple[str, ...]], Prepared] = {}
# Whether a condition holds, alone: by its name.
_CONDITION_HOLDS: dict[str, Prepared] = {}


def _post_checked_first(
    d: Direct, values: dict[str, Any], legs: Sequence[Leg], condition: Condition | None
) -> bool:
    """SQLite, a request in a group that has not written yet (decision 0034): its first write
    is the movement's one guarded leg, whose WHERE also carries the movement's condition and the
    request's held checks (its session live, its ref free). If it changes nothing, nothing was
    written, so the request needs no savepoint: what refused it is found by reads (401 or the
    ref's answer first, then a stale condition, else the funds). If it writes, nothing after
    can refuse the request. False (nothing sent) where that cannot be: a movement with more than
    one guarded leg, a held check that cannot be carried, or parameters that disagree."""
    folds = d.folds()
    if folds is None:
        return False
    programme_id = values["programme_id"]
    guarded = [(leg, p) for leg in legs if any(_guards(p := _leg_params(programme_id, leg)))]
    if len(guarded) != 1:
        return False
    first, params = guarded[0]
    guards = _guards(params)  # the leg's own: what is carried below guards no balance
    carried: list[Fold | Condition] = [*folds]
    if condition is not None:
        carried.insert(0, condition)
    for each in carried:
        extra = each.params
        shared = params.keys() & extra.keys()
        if shared and any(params[name] != extra[name] for name in shared):
            return False
        params.update(extra)
    key = (guards, tuple(each.name for each in carried))
    statement = _CHECKED_APPLY.get(key)
    if statement is None:
        built = _apply_statement(*guards).where(*(each.clause for each in carried))
        statement = _CHECKED_APPLY[key] = Prepared({"sqlite": built})
    row = d.first_checked(statement, params)
    if row is None:
        d.send_held()  # a session no longer live or a ref taken is the answer first
        if condition is not None and d.first(_condition_holds(condition), condition.params) is None:
            _stale(condition)
        raise InsufficientFunds(first.account_id)
    d.folded()
    d.execute(_INSERT_TRANSACTION, values)
    applied = first, (int(row.available), int(row.actual), int(row.posting_count))
    _write(d, programme_id, values["id"], legs, values["created_at"], applied)
    return True


def _condition_holds(condition: Condition) -> Prepared:
    found = _CONDITION_HOLDS.get(condition.name)
    if found is None:
        found = _CONDITION_HOLDS[condition.name] = Prepared(
            select(literal(1).label("holds")).where(condition.clause)
        )
    return found


def _stale(condition: Condition) -> NoReturn:
    """A condition that could not be checked: the caller reads afresh."""
    if condition.then is not None:
        condition.then()
    raise condition.stale


def _counted(legs: Sequence[Leg]) -> None:
    for leg in legs:
        posting_counted(leg.currency)


def _by_id(leg: Leg) -> int:
    return leg.account_id


def _write(
    d: Direct,
    programme_id: int,
    transaction_id: int,
    legs: Sequence[Leg],
    now_ms: int,
    applied: tuple[Leg, tuple[int, int, int]] | None = None,
) -> None:
    """Applies each leg to its balance (in account id order) and records its posting.
    `applied`: a leg whose update ran already, and the balances it left."""
    if not legs:
        return
    postings = []
    for leg in sorted(legs, key=_by_id):
        if applied is not None and leg is applied[0]:
            after = applied[1]
        else:
            after = _apply(d, programme_id, leg)
        postings.append(_posting(programme_id, transaction_id, leg, after, now_ms))
        posting_counted(leg.currency)
    # The postings in one statement, without the unit of work: nothing reads them as objects.
    d.execute_many(_INSERT_POSTINGS, postings)


def _posting(
    programme_id: int, transaction_id: int, leg: Leg, after: tuple[int, int, int], now_ms: int
) -> dict[str, Any]:
    """A posting's row; `after`: the balances and posting count its leg's update left."""
    return {
        "id": new_id(),
        "programme_id": programme_id,
        "transaction_id": transaction_id,
        "account_id": leg.account_id,
        "currency": leg.currency,
        "available_amount": leg.available,
        "actual_amount": leg.actual,
        "available_after": after[0],
        "actual_after": after[1],
        "created_at": now_ms,
        "seq": after[2],
    }


def _apply(d: Direct, programme_id: int, leg: Leg) -> tuple[int, int, int]:
    """One guarded UPDATE: the balance changes only if it stays non-negative where guarded."""
    params = _leg_params(programme_id, leg)
    statement = _APPLY[_guards(params)]
    row = d.first(statement, params)
    if row is None:
        raise InsufficientFunds(leg.account_id)
    return int(row.available), int(row.actual), int(row.posting_count)


def _guards(params: dict[str, Any]) -> tuple[bool, bool]:
    """Which balances a leg's update guards (`_leg_params`): available, actual."""
    return "b_need_available" in params, "b_need_actual" in params


def _leg_params(programme_id: int, leg: Leg) -> dict[str, Any]:
    """The parameters of a leg's guarded update; `b_need_...` for each balance it guards."""
    guard_available = leg.guarded and leg.available < 0
    guard_actual = leg.guarded and leg.actual < 0
    params = {
        "b_id": leg.account_id,
        "b_programme_id": programme_id,
        "b_currency": leg.currency,
        "b_available": leg.available,
        "b_actual": leg.actual,
        "b_movement": 1 if leg.available or leg.actual else 0,
    }
    if guard_available:
        params["b_need_available"] = -leg.available
    if guard_actual:
        params["b_need_actual"] = -leg.actual
    return params


async def balances(db: AsyncSession, account_id: int) -> tuple[int, int]:
    stmt = select(LedgerAccount.available, LedgerAccount.actual).where(
        LedgerAccount.id == account_id
    )
    row = (await db.execute(stmt)).one()
    return int(row[0]), int(row[1])


async def external_id_used(db: AsyncSession, programme_id: int, external_id: int) -> bool:
    stmt = select(LedgerTransaction.id).where(
        LedgerTransaction.programme_id == programme_id,
        LedgerTransaction.external_id == external_id,
    )
    return (await db.execute(stmt.limit(1))).first() is not None


# Reservations (D12, D13), two-phase as TigerBeetle's transfers (decision 0043): a payment that
# waits holds amount + fee on its source. The hold is a pending posting on the source (available
# down, actual unchanged) in the payment's own transaction, state PENDING, against the
# programme's RESERVED account. When the payment ends, new postings close it, never a change to
# it: settling posts (actual down on the source, the RESERVED hold undone, the money to its
# destinations), releasing voids (available back). Each closing posting names the pending one
# on its account (`pending_id`); the statement folds it into the hold's entry, so the source's
# statement keeps one entry per payment whose `entryState` follows it (D12).


def reserved_shard(source_account_id: int) -> int:
    """Holds of different paying accounts go to different RESERVED rows, as revenue does."""
    return revenue_shard(source_account_id)


async def reserve(
    db: AsyncSession,
    *,
    programme_id: int,
    type_: str,
    account_id: int,
    currency: str,
    total: int,
    now_ms: int,
    details: dict[str, Any],
    transaction_id: int,
) -> Movement:
    """Holds `total` of the account's available balance; InsufficientFunds if it lacks it."""
    held = await system_account(
        db, programme_id, RESERVED, currency, now_ms, shard=reserved_shard(account_id)
    )
    return await post(
        db,
        programme_id=programme_id,
        type_=type_,
        legs=[Leg(account_id, currency, -total, 0), Leg(held, currency, total, 0, guarded=False)],
        now_ms=now_ms,
        state="PENDING",
        details=details,
        transaction_id=transaction_id,
    )


# Statements of the closings, built once with bound parameters and run on the session.
_HOLD_POSTINGS = select(
    _POSTINGS.c.id,
    _POSTINGS.c.account_id,
    _POSTINGS.c.available_amount,
    _POSTINGS.c.actual_amount,
).where(_POSTINGS.c.transaction_id == bindparam("b_tx"), _POSTINGS.c.pending_id.is_(None))


def _apply_closing_statement(guard_actual: bool) -> Update:
    a = _ACCOUNTS.c
    stmt = update(_ACCOUNTS).where(a.id == bindparam("b_id"))
    if guard_actual:
        stmt = stmt.where(a.actual >= bindparam("b_need_actual"))
    return stmt.values(
        available=a.available + bindparam("b_available"),
        actual=a.actual + bindparam("b_actual"),
        posting_count=a.posting_count + 1,
        closing_count=a.closing_count + bindparam("b_closing"),
        movement_count=a.movement_count + bindparam("b_movement"),
    ).returning(a.available, a.actual, a.posting_count)


_APPLY_CLOSING = {guard: _apply_closing_statement(guard) for guard in (False, True)}
_INSERT_POSTING_ROWS = insert(_POSTINGS)
_SET_STATE = (
    update(_TRANSACTIONS)
    .where(_TRANSACTIONS.c.id == bindparam("b_tx"))
    .values(state=bindparam("b_state"))
)


@dataclass(frozen=True)
class _Step:
    """One posting of a closing: a leg, and the pending posting it closes (if it does)."""

    leg: Leg
    pending: tuple[int, int, int] | None = None  # (posting id, available, actual) it closes

    def movement(self) -> int:
        """How the account's movement count changes: an entry moves money while its amounts
        (with its closing's) are not zero."""
        moves = 1 if self.leg.available or self.leg.actual else 0
        if self.pending is None:
            return moves
        _, available, actual = self.pending
        before = 1 if available or actual else 0
        after = 1 if available + self.leg.available or actual + self.leg.actual else 0
        return after - before


async def _hold_postings(db: AsyncSession, transaction_id: int) -> dict[int, tuple[int, int, int]]:
    """The hold's open postings by account: (posting id, available, actual)."""
    rows = (await db.execute(_HOLD_POSTINGS, {"b_tx": transaction_id})).all()
    return {
        int(r.account_id): (int(r.id), int(r.available_amount), int(r.actual_amount)) for r in rows
    }


async def _close(
    db: AsyncSession,
    programme_id: int,
    transaction_id: int,
    steps: Sequence[_Step],
    now_ms: int,
    state: str,
) -> None:
    """Applies each step to its balance in account id order (as `post` does: two movements
    over the same accounts never wait on each other in a cycle), then appends its postings in
    one INSERT and sets the transaction's state. Nothing written before is changed."""
    rows = []
    for step in sorted(steps, key=lambda each: each.leg.account_id):
        leg = step.leg
        guard = leg.guarded and leg.actual < 0
        params: dict[str, Any] = {
            "b_id": leg.account_id,
            "b_available": leg.available,
            "b_actual": leg.actual,
            "b_closing": 0 if step.pending is None else 1,
            "b_movement": step.movement(),
        }
        if guard:
            params["b_need_actual"] = -leg.actual
        row = (await db.execute(_APPLY_CLOSING[guard], params)).one_or_none()
        if row is None:  # cannot happen while a hold is only released or settled once
            raise InsufficientFunds(leg.account_id)
        after = (int(row.available), int(row.actual), int(row.posting_count))
        posting = _posting(programme_id, transaction_id, leg, after, now_ms)
        posting["pending_id"] = None if step.pending is None else step.pending[0]
        rows.append(posting)
        posting_counted(leg.currency)
    await db.execute(_INSERT_POSTING_ROWS, rows)
    await db.execute(_SET_STATE, {"b_tx": transaction_id, "b_state": state})


def _closings(
    holds: dict[int, tuple[int, int, int]], transaction_id: int, currency: str, back: bool
) -> list[_Step]:
    """A closing posting for each of the hold's postings: `back` voids it (its amounts undone);
    otherwise it is posted (the source's actual follows its available; the RESERVED hold is
    undone). The hold has one posting on the source (available down) and one on RESERVED."""
    if len(holds) != 2:
        raise Unbalanced(f"hold {transaction_id} has {len(holds)} open postings, not 2")
    steps = []
    for account_id, pending in holds.items():
        _, available, actual = pending
        if back or available > 0:  # void, or the RESERVED side
            leg = Leg(account_id, currency, -available, -actual, guarded=False)
        else:  # the source: what was held now leaves its actual balance too
            leg = Leg(account_id, currency, 0, available - actual)
        steps.append(_Step(leg, pending))
    return steps


async def settle(
    db: AsyncSession,
    *,
    programme_id: int,
    transaction_id: int,
    account_id: int,
    currency: str,
    total: int,
    credits: Sequence[Leg],
    now_ms: int,
) -> None:
    """The held `total` leaves the account (actual down; available went down at the hold) and
    goes to `credits` (which sum to `total`), in the hold's transaction, now COMPLETED: the
    hold's postings are posted by new ones, the credits are entries of their own. A hold is
    settled once: the caller holds the payment's row lock and checks its state first (and the
    database refuses a second closing of a posting)."""
    if sum(c.available for c in credits) != total or sum(c.actual for c in credits) != total:
        raise Unbalanced(f"credits of {transaction_id} do not sum to {total}")
    holds = await _hold_postings(db, transaction_id)
    if account_id not in holds or holds[account_id][1:] != (-total, 0):
        raise Unbalanced(f"hold {transaction_id} does not hold {total} on {account_id}")
    steps = [*_closings(holds, transaction_id, currency, back=False)]
    steps.extend(_Step(leg) for leg in credits)
    await _close(db, programme_id, transaction_id, steps, now_ms, "COMPLETED")


async def release(
    db: AsyncSession,
    *,
    programme_id: int,
    transaction_id: int,
    account_id: int,
    currency: str,
    total: int,
    now_ms: int,
    state: str,
) -> None:
    """The hold is given back: new postings void it, so the account's available balance is
    whole again and the hold's entry moves nothing. The transaction ends in `state`."""
    holds = await _hold_postings(db, transaction_id)
    if account_id not in holds or holds[account_id][1:] != (-total, 0):
        raise Unbalanced(f"hold {transaction_id} does not hold {total} on {account_id}")
    steps = _closings(holds, transaction_id, currency, back=True)
    await _close(db, programme_id, transaction_id, steps, now_ms, state)
