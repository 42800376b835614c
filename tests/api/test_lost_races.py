"""A transaction that loses a race in the database (issue 32 §2.1): PostgreSQL broke a deadlock
it was part of (SQLSTATE 40P01) or could not serialise it (40001). Nothing of it was kept, so a
write request runs again, and answers as if nothing had happened; one that keeps losing answers
503 with Retry-After, never 500, and nothing changed. A background step that loses is left due,
and the next round takes it.

On PostgreSQL a real deadlock, made the same way every time: another transaction holds the row
the request needs next, then asks for a row the request holds. The request waited first, so
PostgreSQL's deadlock check (`deadlock_timeout`, 1 s) runs first in its backend and ends its
transaction. On both databases also an error of the asyncpg driver's type raised into a request
after its work (SQLite has no deadlocks: it takes its write lock up front)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from multibank.accounts import service as accounts_service
from multibank.kernel import conflicts
from multibank.kernel.db import Database
from multibank.ledger.models import SETTLEMENT, LedgerAccount
from multibank.payments import steps
from multibank.programmes import due
from tests.api.payments_support import balances
from tests.api.test_iban_processes import Later
from tests.api.test_payment_concurrency import _a_send
from tests.conftest import DB_KIND, Prog
from tests.factories import deposit, open_account, verified

POSTGRES_ONLY = pytest.mark.skipif(DB_KIND != "postgres", reason="PostgreSQL's deadlocks")
ERRORS = {
    conflicts.DEADLOCK: asyncpg.exceptions.DeadlockDetectedError,
    conflicts.SERIALIZATION: asyncpg.exceptions.SerializationError,
}


def lost(code: str) -> DBAPIError:
    """The error a statement raises through SQLAlchemy when PostgreSQL ended its transaction:
    the asyncpg adapter's DBAPI error, carrying the SQLSTATE, from asyncpg's own."""
    dbapi = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none").dialect
    message = f"injected: SQLSTATE {code}"
    orig = dbapi.loaded_dbapi.Error(message, ERRORS[code](message))
    return DBAPIError("UPDATE ledger_accounts ...", {}, orig)


async def _funded(client: httpx.AsyncClient, p: Prog) -> tuple[Any, str]:
    """A corporate's EUR account with its IBAN and 100 in it (so the programme's settlement
    account exists)."""
    ident = await verified(client, p, "corporates")
    acc: str = (await open_account(client, ident, "EUR"))["id"]
    assert await deposit(client, p, acc, 100) == "COMPLETED"
    return ident, acc


def _deposit(
    client: httpx.AsyncClient, p: Prog, acc: str, ref: str | None = None
) -> asyncio.Task[httpx.Response]:
    headers = {"programme-key": p.api_key}
    if ref:
        headers["idempotency-ref"] = ref
    return asyncio.create_task(
        client.post(
            f"/simulate/api/accounts/{acc}/deposit",
            headers=headers,
            json={"depositAmount": {"currency": "EUR", "amount": 500}},
        )
    )


def _after_deposit(monkeypatch: pytest.MonkeyPatch, code: str, times: int) -> list[int]:
    """The next `times` deposits lose a race after their work (so it must be undone); the list
    counts the deposits run."""
    real = accounts_service.deposit
    runs: list[int] = []

    async def deposit(*args: Any, **kw: Any) -> str:
        answer = await real(*args, **kw)
        runs.append(1)
        if len(runs) <= times:
            raise lost(code)
        return answer

    monkeypatch.setattr(accounts_service, "deposit", deposit)
    return runs


@pytest.mark.parametrize("code", [conflicts.DEADLOCK, conflicts.SERIALIZATION])
async def test_a_write_that_loses_a_race_runs_again(client, programme, monkeypatch, caplog, code):
    p = await programme()
    ident, acc = await _funded(client, p)
    runs = _after_deposit(monkeypatch, code, times=conflicts.ATTEMPTS - 1)
    with caplog.at_level(logging.WARNING, "multibank.requests"):
        r = await _deposit(client, p, acc, ref=f"lost-{code}")
    assert r.status_code == 200, r.text
    assert r.json() == {"code": "COMPLETED"}
    assert len(runs) == conflicts.ATTEMPTS
    assert caplog.text.count(f"lost a race in the database ({code}) and ran again") == 2
    assert await balances(client, ident, acc) == (600, 600)  # credited once
    # The idempotency-ref names the run that was kept: the same answer, nothing more credited.
    again = await _deposit(client, p, acc, ref=f"lost-{code}")
    assert (again.status_code, again.content) == (r.status_code, r.content)
    assert len(runs) == conflicts.ATTEMPTS
    assert await balances(client, ident, acc) == (600, 600)


async def test_a_write_that_keeps_losing_answers_503_and_changes_nothing(
    client, programme, monkeypatch
):
    p = await programme()
    ident, acc = await _funded(client, p)
    runs = _after_deposit(monkeypatch, conflicts.DEADLOCK, times=conflicts.ATTEMPTS)
    r = await _deposit(client, p, acc, ref="always-lost")
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "1"
    assert r.json()["code"] == "SERVICE_UNAVAILABLE"
    assert len(runs) == conflicts.ATTEMPTS
    assert await balances(client, ident, acc) == (100, 100)
    # The ref was not kept: sent again later, the deposit runs (and this time wins).
    r = await _deposit(client, p, acc, ref="always-lost")
    assert r.json() == {"code": "COMPLETED"}
    assert await balances(client, ident, acc) == (600, 600)


async def test_a_background_step_that_loses_a_race_is_taken_next_round(
    client, programme, container, monkeypatch, caplog
):
    p = await programme()
    sender, acc, body = await _a_send(client, p)
    r = await client.post("/multi/sends", headers=sender.headers, json=body)
    assert r.json()["state"] == "PENDING", r.text  # its SCA due within 5 minutes
    send_id = int(r.json()["id"])
    real, lose = steps.step, [conflicts.SERIALIZATION]

    async def step(ctx: Any, payment: Any) -> None:
        await real(ctx, payment)
        if payment.id == send_id and lose:
            raise lost(lose.pop())

    monkeypatch.setattr(steps, "step", step)
    later = Later(301)  # past the challenge's 5 minutes
    with caplog.at_level(logging.WARNING, "multibank.due"):
        await due.run_due(container.db, later, steps.WORK)  # the worker's round: no error escapes
    assert "a payment step lost a race in the database (40001)" in caplog.text
    state = await client.get(f"/multi/sends/{send_id}", headers=sender.headers)
    assert state.json()["state"] == "PENDING"  # undone, still due
    assert await balances(client, sender, acc) == (96_000, 100_000)
    await due.run_due(container.db, later, steps.WORK)
    state = await client.get(f"/multi/sends/{send_id}", headers=sender.headers)
    assert state.json()["state"] == "REJECTED"
    assert await balances(client, sender, acc) == (100_000, 100_000)


# A real deadlock (PostgreSQL)


async def _settlement(db: Database, p: Prog) -> int:
    async with db.read_sessionmaker() as session:
        found = await session.execute(
            select(LedgerAccount.id).where(
                LedgerAccount.programme_id == int(p.id),
                LedgerAccount.kind == SETTLEMENT,
                LedgerAccount.currency == "EUR",
            )
        )
        return int(found.scalar_one())


async def _until(watcher: AsyncConnection, waiting: int) -> None:
    """Until `waiting` backends of this database wait for a row lock."""
    deadline = time.monotonic() + 10
    while True:
        found = await watcher.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            )
        )
        if found.scalar_one() >= waiting:
            return
        assert time.monotonic() < deadline, "the request never waited for the settlement row"
        await asyncio.sleep(0.02)


async def _deadlocked_deposit(
    client: httpx.AsyncClient, container: Any, database_url: str, p: Prog, acc: str
) -> httpx.Response:
    """The answer to a deposit into `acc` whose transaction PostgreSQL ends in a deadlock."""
    settlement = await _settlement(container.db, p)
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as watcher, engine.connect() as other:
            watcher = await watcher.execution_options(isolation_level="AUTOCOMMIT")
            # The other transaction never runs the deadlock check first: the request is ended.
            await other.execute(text("SET deadlock_timeout = '60s'"))
            await other.execute(
                text("UPDATE ledger_accounts SET available = available WHERE id = :id"),
                {"id": settlement},
            )
            request = _deposit(client, p, acc)
            # The request holds the account's row, and waits for the settlement account's.
            await _until(watcher, 1)
            await other.execute(
                text("SELECT id FROM managed_accounts WHERE id = :id FOR UPDATE"), {"id": int(acc)}
            )  # granted once PostgreSQL has ended the request's transaction
            await other.commit()
            return await request
    finally:
        await engine.dispose()


def _logged(caplog: pytest.LogCaptureFixture, has: Callable[[str], bool]) -> int:
    return sum(1 for r in caplog.records if has(r.getMessage()))


@POSTGRES_ONLY
async def test_a_request_ended_by_a_real_deadlock_runs_again(
    client, programme, container, database_url, caplog
):
    p = await programme()
    ident, acc = await _funded(client, p)
    with caplog.at_level(logging.WARNING, "multibank.requests"):
        r = await _deadlocked_deposit(client, container, database_url, p, acc)
    assert r.status_code == 200, r.text
    assert r.json() == {"code": "COMPLETED"}
    assert _logged(caplog, lambda m: "lost a race in the database (40P01) and ran again" in m) == 1
    assert await balances(client, ident, acc) == (600, 600)


@POSTGRES_ONLY
async def test_a_request_ended_by_a_real_deadlock_with_no_run_left_answers_503(
    client, programme, container, database_url, monkeypatch
):
    p = await programme()
    ident, acc = await _funded(client, p)
    monkeypatch.setattr(conflicts, "ATTEMPTS", 1)
    r = await _deadlocked_deposit(client, container, database_url, p, acc)
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "1"
    assert r.json()["code"] == "SERVICE_UNAVAILABLE"
    assert await balances(client, ident, acc) == (100, 100)
