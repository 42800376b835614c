"""The ledger's PostgreSQL statements (issue 42 §4: apart from the service that sends them): a
movement in one statement, several movements in one round trip, and a transfer whose accounts and
amount the statement reads itself (a fee charge, decision 0064). Each is built once per shape with
bound parameters, as the service's own statements (decision 0014). SQLite sends a movement's
statements one by one (`service.post`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    CTE,
    BigInteger,
    ColumnElement,
    Select,
    String,
    Table,
    and_,
    bindparam,
    case,
    exists,
    func,
    insert,
    null,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy import cast as sql_cast

from multibank.kernel.ids import new_id
from multibank.ledger.models import (
    ACCOUNTS,
    POSTING_KEYS,
    POSTINGS,
    TRANSACTION_KEYS,
    TRANSACTIONS,
)


def _unsized(kind: Any) -> Any:
    return String() if isinstance(kind, String) else kind


def movement_statement(guards: tuple[tuple[bool, bool], ...]) -> Any:
    """PostgreSQL: a whole movement in one statement, one round trip (decision 0021): each
    leg's guarded balance update, the transaction and all its postings. The legs come in
    account id order and each update after the first runs only once the one before it has
    returned its row (`EXISTS` on it), so the row locks are still taken in id order and two
    movements cannot deadlock. A guard that fails updates nothing and stops the legs after it:
    the statement inserts fewer postings than legs, the caller raises InsufficientFunds and the
    transaction rolls back. Each posting's balances are what its own update returns."""
    values: dict[str, Any] = {key: bindparam(f"t_{key}") for key in TRANSACTION_KEYS}
    written = insert(TRANSACTIONS).values(values).cte("written")
    moved: list[Any] = []
    for i, (guard_available, guard_actual) in enumerate(guards):
        a = ACCOUNTS.c
        update_ = update(ACCOUNTS).where(
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
            sql_cast(bindparam(f"p{i}_{key}"), _unsized(POSTINGS.c[key].type))
            for key in POSTING_KEYS
        ]
        # the `..._after` columns and the posting's place in the account's chain
        values[7], values[8] = moved[i].c.available, moved[i].c.actual
        values[10] = moved[i].c.posting_count
        return select(*values).select_from(moved[i])

    rows = union_all(*(posting(i) for i in range(len(guards))))
    statement = insert(POSTINGS).from_select(list(POSTING_KEYS), rows).add_cte(written)
    for cte in moved:
        statement = statement.add_cte(cte)
    return statement


# A movement whose accounts and amount the statement itself reads (decision 0064): a fee charge
# on PostgreSQL looks up its fee type, account and revenue shard in the statement that moves it.
def revenue_key(currency: ColumnElement[str]) -> ColumnElement[str]:
    """SQL: the `system_key` of the revenue shard `revenue_key_params` names, in `currency`
    (the service's system key text: `programme:REVENUE:currency`, then `:shard` unless shard 0)."""
    return (
        bindparam("rk_prefix", type_=String()) + currency + bindparam("rk_suffix", type_=String())
    )


# Over 80 lines: one PostgreSQL statement's CTEs, built in the order they run.
def transfer_ctes(row: CTE) -> list[CTE]:
    """PostgreSQL: the CTEs that write a movement of `row`'s `amount` (`transfer_params`), a
    guarded debit of `source_id` and a credit of `target_id` in `currency`, with `details`, if
    `row` (a CTE of at most one row, with those columns) has a row; the same writes as
    `service.post` of those two legs: the transaction, each account's guarded update in account
    id order (the second only once the first has returned its row, as `movement_statement`'s),
    and a posting per update with the balances and place it returned. The last CTE is the
    postings written (their `id`): two, or fewer where the debit's guard refused (the caller
    raises InsufficientFunds, and its transaction rolls back). Every CTE must be in the
    statement."""
    a = ACCOUNTS.c
    moves = row.c.amount != 0
    written = insert(TRANSACTIONS).from_select(
        list(TRANSACTION_KEYS),
        select(
            sql_cast(bindparam("t_id"), BigInteger()),
            sql_cast(bindparam("t_programme_id"), BigInteger()),
            sql_cast(bindparam("t_type"), String()),
            sql_cast(bindparam("t_state"), String()),
            row.c.details,
            null(),
            sql_cast(bindparam("t_created_at"), BigInteger()),
        ),
    )
    ctes = [written.cte("written")]
    moved: list[CTE] = []
    # Each account by its primary key: the id as a one-time subquery, not a join to `row`,
    # which the planner ran as a scan of the programme's accounts (EXPLAIN, decision 0064).
    for k, target in enumerate(
        (
            select(func.least(row.c.source_id, row.c.target_id)).scalar_subquery(),
            select(func.greatest(row.c.source_id, row.c.target_id)).scalar_subquery(),
        )
    ):
        signed = case((a.id == row.c.source_id, -row.c.amount), else_=row.c.amount)
        update_ = update(ACCOUNTS).where(
            a.id == target,
            a.programme_id == bindparam("t_programme_id"),
            a.currency == row.c.currency,
            # the debit's guard (`_leg_params`: none for an amount of zero)
            or_(
                a.id != row.c.source_id,
                ~moves,
                and_(a.available >= row.c.amount, a.actual >= row.c.amount),
            ),
        )
        if moved:
            update_ = update_.where(exists(select(moved[-1].c.id)))
        moved.append(
            update_.values(
                available=a.available + signed,
                actual=a.actual + signed,
                posting_count=a.posting_count + 1,
                movement_count=a.movement_count + case((moves, 1), else_=0),
            )
            .returning(a.id, a.available, a.actual, a.posting_count)
            .cte(f"moved{k}")
        )

    def posting(k: int) -> Select[Any]:
        m = moved[k].c
        signed = case((m.id == row.c.source_id, -row.c.amount), else_=row.c.amount)
        return select(
            sql_cast(bindparam(f"p{k}_id"), BigInteger()),
            sql_cast(bindparam("t_programme_id"), BigInteger()),
            sql_cast(bindparam("t_id"), BigInteger()),
            m.id,
            row.c.currency,
            signed,
            signed,
            m.available,
            m.actual,
            sql_cast(bindparam("t_created_at"), BigInteger()),
            m.posting_count,
        ).select_from(moved[k].join(row, or_(m.id == row.c.source_id, m.id == row.c.target_id)))

    posted = (
        insert(POSTINGS)
        .from_select(list(POSTING_KEYS), union_all(posting(0), posting(1)))
        .returning(POSTINGS.c.id)
    )
    return [*ctes, *moved, posted.cte("posted")]


def transfer_params(programme_id: int, type_: str, state: str, now_ms: int) -> dict[str, Any]:
    """`transfer_ctes`' parameters: a new transaction's and its two postings' ids."""
    return {
        "t_id": new_id(),
        "t_programme_id": programme_id,
        "t_type": type_,
        "t_state": state,
        "t_created_at": now_ms,
        "p0_id": new_id(),
        "p1_id": new_id(),
    }


# Rows a caller writes with a movement (`service.post`'s `rows`): a table and its rows' values.
Rows = tuple[Table, Sequence[dict[str, Any]]]


def rows_shape(rows: Sequence[Rows]) -> tuple[tuple[str, int, tuple[str, ...]], ...]:
    return tuple((table.name, len(values), tuple(values[0])) for table, values in rows)


def with_rows(statement: Any, rows: Sequence[Rows]) -> Any:
    """The movement statement that also inserts `rows`, each row as a CTE of its own (a
    data-modifying CTE runs whether or not the statement reads it; foreign keys are checked at
    the statement's end, so a row may name the movement's own transaction). One row a CTE: a
    multi-row VALUES of bound parameters is not cached by SQLAlchemy, and compiling it costs
    more than the round trip it saves."""
    for t, (table, values) in enumerate(rows):
        keys = tuple(values[0])
        for j in range(len(values)):
            row: dict[str, Any] = {key: bindparam(f"r{t}_{j}_{key}") for key in keys}
            statement = statement.add_cte(insert(table).values(row).cte(f"rows{t}_{j}"))
    return statement


def rows_params(rows: Sequence[Rows]) -> dict[str, Any]:
    return {
        f"r{t}_{j}_{key}": value
        for t, (_, values) in enumerate(rows)
        for j, row in enumerate(values)
        for key, value in row.items()
    }


def movements_statement(
    layout: tuple[tuple[int, ...], ...], guards: Sequence[tuple[bool, bool]]
) -> Any:
    """`service.post_all`'s statement: each movement's transaction, each account's netted update (in
    account id order, each after the one before it has returned its row, as in
    `movement_statement`), and every posting, its balances after and place derived from its
    account's update. `layout`: each movement's postings as indexes of their accounts."""
    written = [
        insert(TRANSACTIONS)
        .values({key: bindparam(f"t{m}_{key}") for key in TRANSACTION_KEYS})
        .cte(f"written{m}")
        for m in range(len(layout))
    ]
    a = ACCOUNTS.c
    moved: list[Any] = []
    for k, (guard_available, guard_actual) in enumerate(guards):
        update_ = update(ACCOUNTS).where(
            a.id == bindparam(f"b{k}_id"),
            a.programme_id == bindparam(f"b{k}_programme_id"),
            a.currency == bindparam(f"b{k}_currency"),
        )
        if guard_available:
            update_ = update_.where(a.available >= bindparam(f"b{k}_need_available"))
        if guard_actual:
            update_ = update_.where(a.actual >= bindparam(f"b{k}_need_actual"))
        if moved:
            update_ = update_.where(exists(select(moved[-1].c.available)))
        moved.append(
            update_.values(
                available=a.available + bindparam(f"b{k}_available"),
                actual=a.actual + bindparam(f"b{k}_actual"),
                posting_count=a.posting_count + bindparam(f"b{k}_count"),
                movement_count=a.movement_count + bindparam(f"b{k}_movement"),
            )
            .returning(a.available, a.actual, a.posting_count)
            .cte(f"moved{k}")
        )
    whole = BigInteger()

    def posting(m: int, i: int, k: int) -> Select[Any]:
        values: list[Any] = [
            sql_cast(bindparam(f"p{m}_{i}_{key}"), _unsized(POSTINGS.c[key].type))
            for key in POSTING_KEYS
        ]
        later = {
            name: sql_cast(bindparam(f"p{m}_{i}_later_{name}"), whole)
            for name in ("available", "actual", "count")
        }
        values[7] = moved[k].c.available - later["available"]
        values[8] = moved[k].c.actual - later["actual"]
        values[10] = moved[k].c.posting_count - later["count"]
        return select(*values).select_from(moved[k])

    rows = union_all(
        *(posting(m, i, k) for m, places in enumerate(layout) for i, k in enumerate(places))
    )
    statement = insert(POSTINGS).from_select(list(POSTING_KEYS), rows)
    for cte in [*written, *moved]:
        statement = statement.add_cte(cte)
    return statement
