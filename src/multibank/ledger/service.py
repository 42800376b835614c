"""Double-entry postings (D5). Every movement is one transaction whose postings sum to zero per
currency; balances change only here, through guarded UPDATEs in the caller's transaction, with
the accounts locked in id order so two movements never deadlock."""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import (
    Update,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.kernel.db import changed, dialect_name
from multibank.kernel.ids import new_id
from multibank.ledger import postgres
from multibank.ledger.models import (
    ACCOUNTS,
    MANAGED_ACCOUNT,
    POSTINGS,
    RESERVED,
    REVENUE,
    TRANSACTIONS,
    LedgerAccount,
    LedgerTransaction,
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


def _apply_statement(guard_available: bool, guard_actual: bool) -> Update:
    a = ACCOUNTS.c
    stmt = update(ACCOUNTS).where(
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


# Every fee charge, payment and deposit sends these: built once (decision 0014).
_APPLY = {(a, b): _apply_statement(a, b) for a in (False, True) for b in (False, True)}
_INSERT_POSTINGS = insert(POSTINGS)
_INSERT_TRANSACTION = insert(TRANSACTIONS)


def revenue_key_params(programme_id: int, source_account_id: int) -> dict[str, Any]:
    shard = revenue_shard(source_account_id)
    return {"rk_prefix": f"{programme_id}:{REVENUE}:", "rk_suffix": f":{shard}" if shard else ""}


def transferred(params: dict[str, Any], currency: str, details: dict[str, Any]) -> Movement:
    """The movement `transfer_ctes` wrote with `params`, once both its postings were written."""
    posting_counted(currency)
    posting_counted(currency)
    return Movement(
        id=params["t_id"],
        programme_id=params["t_programme_id"],
        type=params["t_type"],
        state=params["t_state"],
        details=details,
        external_id=None,
        created_at=params["t_created_at"],
    )


# One movement statement per shape of its legs' guards (and of the rows written with it),
# built on first use.
_MOVEMENT: dict[Any, Any] = {}

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
    account_id, created = await _new_system_account(db, programme_id, kind, currency, key, now_ms)
    if created:
        db.info.setdefault(_CREATED_HERE, set()).add(key)
    return account_id


async def keyed_account(
    db: AsyncSession, programme_id: int, kind: str, currency: str, key: str, now_ms: int
) -> int:
    """A system account of the programme under its caller's own `key` (a card spending
    account's reserved book, `cards.money`), created on first use as `system_account` creates
    its accounts. Read each time: its ids are not remembered."""
    found = (await db.execute(_SYSTEM_ACCOUNT, {"key": key})).scalar_one_or_none()
    if found is not None:
        return int(found)
    account_id, _ = await _new_system_account(db, programme_id, kind, currency, key, now_ms)
    return account_id


async def _new_system_account(
    db: AsyncSession, programme_id: int, kind: str, currency: str, key: str, now_ms: int
) -> tuple[int, bool]:
    """The account of `key`, created in a savepoint; (its id, whether this session created
    it): a concurrent creator's wins."""
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
        return int((await db.execute(_SYSTEM_ACCOUNT, {"key": key})).scalar_one()), False
    return account.id, True


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


# Over 8 parameters: a movement's fields, keyword-only, as every slice posts them.
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
    rows: Sequence[postgres.Rows] = (),
) -> Movement:
    """Writes one transaction. Raises Unbalanced when the legs do not sum to zero per currency,
    InsufficientFunds when a guarded debit would take a balance below zero.

    `rows`: rows of other tables the caller writes with the movement (each table's rows with the
    same keys), in the movement's own statement on PostgreSQL, one round trip (decision 0060);
    elsewhere inserted after it.

    `transaction_id` names the transaction after the resource it moves money for (a payment's
    statement entry has the payment's id); `details` may hold `byAccount`, each account's own
    statement `additionalFields` and fee (`account_details`)."""
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
    # Core INSERTs, not the unit of work's flush (decision 0019): the transaction is returned
    # as a detached snapshot of what was written; later changes are statements by id.
    await db.flush()  # what the unit of work holds is written first, as an autoflush would
    if not legs or dialect_name(db) != "postgresql":
        await db.execute(_INSERT_TRANSACTION, values)
        await _write(db, values["programme_id"], values["id"], legs, values["created_at"])
        for table, table_rows in rows:
            await db.execute(insert(table), list(table_rows))
        return Movement(**values)
    # PostgreSQL: the whole movement in one statement.
    programme_id = values["programme_id"]
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
    shape = (tuple(guards), postgres.rows_shape(rows)) if rows else tuple(guards)
    statement = _MOVEMENT.get(shape)
    if statement is None:
        statement = postgres.movement_statement(tuple(guards))
        statement = _MOVEMENT[shape] = postgres.with_rows(statement, rows) if rows else statement
    if rows:
        params.update(postgres.rows_params(rows))
    written = changed(await db.execute(statement, params))
    if written != len(ordered):  # the legs before the refused one were applied, then stopped
        raise InsufficientFunds(ordered[written].account_id)
    _counted(ordered)
    return Movement(**values)


@dataclass(frozen=True)
class NewMovement:
    """One movement of `post_all`: `post`'s arguments that differ between its movements."""

    type_: str
    legs: Sequence[Leg]
    transaction_id: int
    state: str = "COMPLETED"
    details: dict[str, Any] | None = None
    external_id: int | None = None


def _balanced(type_: str, legs: Sequence[Leg]) -> None:
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for leg in legs:
        sums[leg.currency][0] += leg.available
        sums[leg.currency][1] += leg.actual
    if any(a or b for a, b in sums.values()):
        raise Unbalanced(f"postings of {type_} do not sum to zero: {dict(sums)}")


# Over 80 lines: several movements in one PostgreSQL round trip: checks, statement, result.
async def post_all(
    db: AsyncSession,
    *,
    programme_id: int,
    movements: Sequence[NewMovement],
    now_ms: int,
    rows: Sequence[postgres.Rows] = (),
) -> list[Movement]:
    """Writes several movements, in order, as `post` writes each (the same transactions,
    postings and balances, each posting's place and balances after in its account's chain
    as if the movements were posted one after the other), with `rows` written with the last.
    On PostgreSQL in ONE statement (decision 0060): each account's legs are netted into one
    guarded update, whose guard is the least balance the account passes through (each guarded
    debit's own guard, at its place), and every posting's balances after and place are derived
    from what that update returns. Raises as `post` does; the caller's transaction must then
    roll back (what was applied before the refused account is not undone)."""
    for movement in movements:
        _balanced(movement.type_, movement.legs)
    currencies: dict[int, str] = {}
    for movement in movements:
        for leg in movement.legs:
            if currencies.setdefault(leg.account_id, leg.currency) != leg.currency:
                currencies = {}  # an account in two currencies: not netted, posted one by one
                break
        else:
            continue
        break
    if not currencies or len(movements) < 2 or dialect_name(db) != "postgresql":
        posted = []
        for i, movement in enumerate(movements):
            posted.append(
                await post(
                    db,
                    programme_id=programme_id,
                    type_=movement.type_,
                    legs=movement.legs,
                    now_ms=now_ms,
                    state=movement.state,
                    details=movement.details,
                    external_id=movement.external_id,
                    transaction_id=movement.transaction_id,
                    rows=rows if i == len(movements) - 1 else (),
                )
            )
        return posted
    await db.flush()  # what the unit of work holds is written first, as `post` does
    accounts = sorted(currencies)
    place = {account_id: k for k, account_id in enumerate(accounts)}
    params: dict[str, Any] = {}
    values = []
    # Each account's postings in chain order: the movements' order, each one's legs by id.
    chains: list[list[tuple[int, int, Leg]]] = [[] for _ in accounts]
    for m, movement in enumerate(movements):
        value: dict[str, Any] = {
            "id": movement.transaction_id,
            "programme_id": programme_id,
            "type": movement.type_,
            "state": movement.state,
            "details": movement.details or {},
            "external_id": movement.external_id,
            "created_at": now_ms,
        }
        values.append(value)
        for key, item in value.items():
            params[f"t{m}_{key}"] = item
        for i, leg in enumerate(sorted(movement.legs, key=_by_id)):
            chains[place[leg.account_id]].append((m, i, leg))
            for key, item in _posting(programme_id, value["id"], leg, (0, 0, 0), now_ms).items():
                params[f"p{m}_{i}_{key}"] = item
    guards = []
    for k, chain in enumerate(chains):
        available = actual = moves = 0
        need_available: int | None = None
        need_actual: int | None = None
        for _, _, leg in chain:
            available, actual = available + leg.available, actual + leg.actual
            moves += 1 if leg.available or leg.actual else 0
            # A guarded debit's own guard at its place: the balance before the postings plus
            # those up to it is not below zero.
            if leg.guarded and leg.available < 0:
                need_available = (
                    -available if need_available is None else max(need_available, -available)
                )
            if leg.guarded and leg.actual < 0:
                need_actual = -actual if need_actual is None else max(need_actual, -actual)
        params.update(
            {
                f"b{k}_id": accounts[k],
                f"b{k}_programme_id": programme_id,
                f"b{k}_currency": currencies[accounts[k]],
                f"b{k}_available": available,
                f"b{k}_actual": actual,
                f"b{k}_count": len(chain),
                f"b{k}_movement": moves,
            }
        )
        if need_available is not None:
            params[f"b{k}_need_available"] = need_available
        if need_actual is not None:
            params[f"b{k}_need_actual"] = need_actual
        guards.append((need_available is not None, need_actual is not None))
        # What the account's later postings add: taken off the update's balances after.
        later_available = later_actual = 0
        for later, (m, i, leg) in enumerate(reversed(chain)):
            params[f"p{m}_{i}_later_available"] = later_available
            params[f"p{m}_{i}_later_actual"] = later_actual
            params[f"p{m}_{i}_later_count"] = later
            later_available += leg.available
            later_actual += leg.actual
    layout = tuple(
        tuple(place[leg.account_id] for leg in sorted(movement.legs, key=_by_id))
        for movement in movements
    )
    shape = (layout, tuple(guards), postgres.rows_shape(rows))
    statement = _MOVEMENTS.get(shape)
    if statement is None:
        statement = _MOVEMENTS[shape] = postgres.with_rows(
            postgres.movements_statement(layout, guards), rows
        )
    params.update(postgres.rows_params(rows))
    written = changed(await db.execute(statement, params))
    if written != sum(len(chain) for chain in chains):
        # The accounts before the refused one were updated and their postings written.
        for k, chain in enumerate(chains):
            written -= len(chain)
            if written < 0:
                raise InsufficientFunds(accounts[k])
    for movement in movements:
        _counted(movement.legs)
    return [Movement(**value) for value in values]


_MOVEMENTS: dict[Any, Any] = {}


def _counted(legs: Sequence[Leg]) -> None:
    for leg in legs:
        posting_counted(leg.currency)


def _by_id(leg: Leg) -> int:
    return leg.account_id


async def _write(
    db: AsyncSession,
    programme_id: int,
    transaction_id: int,
    legs: Sequence[Leg],
    now_ms: int,
) -> None:
    """Applies each leg to its balance (in account id order) and records its posting."""
    if not legs:
        return
    postings = []
    for leg in sorted(legs, key=_by_id):
        after = await _apply(db, programme_id, leg)
        postings.append(_posting(programme_id, transaction_id, leg, after, now_ms))
        posting_counted(leg.currency)
    # The postings in one statement, without the unit of work: nothing reads them as objects.
    await db.execute(_INSERT_POSTINGS, postings)


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


async def _apply(db: AsyncSession, programme_id: int, leg: Leg) -> tuple[int, int, int]:
    """One guarded UPDATE: the balance changes only if it stays non-negative where guarded."""
    params = _leg_params(programme_id, leg)
    statement = _APPLY[_guards(params)]
    row = (await db.execute(statement, params)).first()
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


# Over 8 parameters: a hold's fields, keyword-only, as payments and cards place them.
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
    POSTINGS.c.id,
    POSTINGS.c.account_id,
    POSTINGS.c.available_amount,
    POSTINGS.c.actual_amount,
).where(POSTINGS.c.transaction_id == bindparam("b_tx"), POSTINGS.c.pending_id.is_(None))


def _apply_closing_statement(guard_actual: bool) -> Update:
    a = ACCOUNTS.c
    stmt = update(ACCOUNTS).where(a.id == bindparam("b_id"))
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
_INSERT_POSTING_ROWS = insert(POSTINGS)
_SET_STATE = (
    update(TRANSACTIONS)
    .where(TRANSACTIONS.c.id == bindparam("b_tx"))
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
