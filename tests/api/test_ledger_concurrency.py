"""Proofs that fee charges keep the ledger whole under concurrency (D5, D6, D9), on the database
under test (`MULTIBANK_TEST_DB`):

- 100 parallel charges against an account funded for exactly 30: 30 succeed, 70 answer
  FUNDS_INSUFFICIENT, no posting ever leaves the account below zero, and every balance from 2900
  down to 0 is passed exactly once (no lost update);
- 20 parallel charges with one idempotency-ref: one debit, 20 identical replies;
- both again through two app instances sharing the database (two containers stand in for two
  server processes: two SQLite connections taking BEGIN IMMEDIATE, or two PostgreSQL pools), and
  through two real `multibank serve` processes;
- `multibank ledger verify` (a subprocess) passes after every scenario and fails, naming the
  account, when a balance is corrupted behind the ledger's back.

The requests use several sessions of the same user so that on PostgreSQL they do not queue behind
one another on the session row, and really race on the account.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from multibank.app import build_container, create_app, startup
from multibank.kernel.db import Database
from multibank.kernel.migrate import upgrade
from multibank.ledger.models import LedgerAccount
from tests.api.fees_support import (
    PORTAL,
    account_postings,
    available,
    charge,
    fee_count,
    ledger_ok,
    revenue,
)
from tests.conftest import (
    ADMIN_TOKEN,
    DB_KIND,
    PG_ADMIN_URL,
    PG_SERVER_URL,
    Prog,
    _pg_admin,
    pg_database_name,
)
from tests.factories import Identity, deposit, login, open_account, verified

MULTIBANK = Path(sys.executable).with_name("multibank")
FEE = 100  # ADMIN_FEE, DEFAULT group
PARALLEL = 100
FUNDED_FOR = 30
SAME_REF = 20
SESSIONS = 4


# Scenarios, run against any set of clients that reach the same database


async def customer(
    client: httpx.AsyncClient, p: Prog, funds: int
) -> tuple[Identity, str, list[str]]:
    """A verified corporate with one EUR account holding `funds`, and SESSIONS live tokens."""
    ident = await verified(client, p, "corporates")
    acc = await open_account(client, ident, "EUR")
    await deposit(client, p, acc["id"], funds)
    tokens = [ident.token]
    for _ in range(SESSIONS - 1):
        r = await login(client, p, ident.email)
        assert r.status_code == 200, r.text
        tokens.append(r.json()["token"])
    return ident, acc["id"], tokens


async def hundred_charges(
    clients: Sequence[httpx.AsyncClient], db: Database, p: Prog, admin: dict[str, str]
) -> None:
    """(a): PARALLEL charges at once against FUNDED_FOR fees' worth of money."""
    ident, acc, tokens = await customer(clients[0], p, FEE * FUNDED_FOR)
    responses = await asyncio.gather(
        *(
            charge(clients[i % len(clients)], ident, acc, token=tokens[i % len(tokens)])
            for i in range(PARALLEL)
        )
    )
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {200: FUNDED_FOR, 409: PARALLEL - FUNDED_FOR}, (
        statuses,
        [r.text for r in responses if r.status_code not in (200, 409)][:3],
    )
    assert all(
        r.json() == {"errorCode": "FUNDS_INSUFFICIENT"} for r in responses if r.status_code == 409
    )
    ok = [r.json() for r in responses if r.status_code == 200]
    assert len({b["transactionId"]["id"] for b in ok}) == FUNDED_FOR
    assert all(b["availableBalanceAdjustment"] == {"currency": "EUR", "amount": -FEE} for b in ok)

    for c in clients:
        assert await available(c, ident, acc) == 0
    postings = await account_postings(db, acc, moved_only=False)
    assert all(a_after >= 0 and c_after >= 0 for _, _, _, a_after, c_after in postings), postings
    fees = [p_ for p_ in postings if p_[0] == "CHARGE_FEE"]
    assert len(fees) == FUNDED_FOR
    assert all(p_[1:3] == (-FEE, -FEE) for p_ in fees)
    # Each fee took the balance one step down: every balance from 2900 to 0 seen exactly once.
    assert sorted(p_[3] for p_ in fees) == list(range(0, FEE * FUNDED_FOR, FEE))
    assert sorted(p_[4] for p_ in fees) == list(range(0, FEE * FUNDED_FOR, FEE))
    assert await revenue(db, p) == FEE * FUNDED_FOR
    await ledger_ok(clients[-1], admin, p)


async def one_ref_twenty_times(
    clients: Sequence[httpx.AsyncClient], db: Database, p: Prog, admin: dict[str, str]
) -> None:
    """(b): SAME_REF charges at once with one idempotency-ref."""
    ident, acc, tokens = await customer(clients[0], p, 1000)
    key = f"same-{os.urandom(6).hex()}"
    responses = await asyncio.gather(
        *(
            charge(clients[i % len(clients)], ident, acc, ref=key, token=tokens[i % len(tokens)])
            for i in range(SAME_REF)
        )
    )
    replies = {(r.status_code, r.content) for r in responses}
    assert len(replies) == 1, Counter((r.status_code, r.text) for r in responses)
    [(status, body)] = replies
    assert status == 200, body
    assert await available(clients[-1], ident, acc) == 1000 - FEE
    assert await fee_count(db, acc) == 1
    assert await revenue(db, p) == FEE
    await ledger_ok(clients[-1], admin, p)


# `multibank ledger verify`, as an operator runs it


def _env(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MULTIBANK_")}
    env["MULTIBANK_DATABASE_URL"] = database_url
    env["MULTIBANK_LOG_LEVEL"] = "WARNING"
    # Subprocesses keep their bytecode outside the tree, so each start does not compile every
    # library again (the environment may forbid writing it next to the sources).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "multibank-pycache"))
    return env


async def ledger_verify(database_url: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(MULTIBANK),
        "ledger",
        "verify",
        *args,
        env=_env(database_url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def assert_ledger_verify_ok(database_url: str) -> None:
    code, out, err = await ledger_verify(database_url)
    assert (code, out) == (0, "ledger verify: ok\n"), (code, out, err)


# (a) and (b) through one app


async def test_hundred_parallel_charges_never_overdraw(
    client, programme, container, admin_headers, database_url
):
    await hundred_charges([client], container.db, await programme(), admin_headers)
    await assert_ledger_verify_ok(database_url)


async def test_parallel_charges_with_one_ref_debit_once(
    client, programme, container, admin_headers, database_url
):
    await one_ref_twenty_times([client], container.db, await programme(), admin_headers)
    await assert_ledger_verify_ok(database_url)


# (c) through two app instances sharing the database


@pytest.fixture
async def second_client(settings) -> AsyncIterator[httpx.AsyncClient]:
    """Another server on the same database: its own container, engine and connection(s)."""
    c = build_container(settings)
    await startup(c)
    transport = httpx.ASGITransport(app=create_app(container=c), raise_app_exceptions=False)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://second") as cl:
            yield cl
    finally:
        await c.db.dispose()


async def test_two_app_instances_never_overdraw(
    client, second_client, programme, container, admin_headers, database_url
):
    await hundred_charges([client, second_client], container.db, await programme(), admin_headers)
    await assert_ledger_verify_ok(database_url)


async def test_two_app_instances_debit_one_ref_once(
    client, second_client, programme, container, admin_headers, database_url
):
    clients = [client, second_client]
    await one_ref_twenty_times(clients, container.db, await programme(), admin_headers)
    await assert_ledger_verify_ok(database_url)


# ... and through two real `multibank serve` processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def fresh_database(tmp_path: Path) -> AsyncIterator[str]:
    """An empty database of the kind under test, migrated."""
    if DB_KIND == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'processes.db'}"
        name = None
    else:
        from sqlalchemy.engine import make_url

        name = pg_database_name("procs")
        await _pg_admin(f'CREATE DATABASE "{name}"')
        url = make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        db = Database(url)
        try:
            await upgrade(db)
        finally:
            await db.dispose()
        if name is not None:
            # Migrated directly; the servers and the test use the server URL (through PgBouncer
            # in the PgBouncer slice of scripts/test, as tests/conftest.py's `database_url`).
            url = make_url(PG_SERVER_URL).set(database=name).render_as_string(hide_password=False)
        yield url
    finally:
        if name is not None:
            await _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.asynccontextmanager
async def two_servers(database_url: str, tmp_path: Path) -> AsyncIterator[list[str]]:
    """Two `multibank serve` processes on one database, started together; yields their URLs."""
    env = {**_env(database_url), "MULTIBANK_ADMIN_TOKEN": ADMIN_TOKEN}
    procs: list[tuple[asyncio.subprocess.Process, str, Path]] = []
    try:
        for i in range(2):
            port = _free_port()
            out = tmp_path / f"serve{i}.out"
            with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
                proc = await asyncio.create_subprocess_exec(
                    str(MULTIBANK),
                    "serve",
                    "--port",
                    str(port),
                    env=env,
                    stdout=stdout,
                    stderr=stderr,
                )
            procs.append((proc, f"http://127.0.0.1:{port}", out))
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient(timeout=2) as http:
            for proc, base, out in procs:
                while True:
                    err = out.with_suffix(".err")
                    assert proc.returncode is None, err.read_text(errors="replace")
                    with contextlib.suppress(httpx.TransportError):
                        if (await http.get(f"{base}/readyz")).status_code == 200:
                            break
                    assert time.monotonic() < deadline, "serve not ready within 60 s"
                    await asyncio.sleep(0.2)
        yield [base for _, base, _ in procs]
    finally:
        for proc, _, _ in procs:
            if proc.returncode is None:
                proc.terminate()
        for proc, _, _ in procs:
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def new_programme(http: httpx.AsyncClient, admin: dict[str, str]) -> Prog:
    """A programme created through the operator API, as an operator of a deployment would."""
    r = await http.post(PORTAL, headers=admin, json={"name": f"conc{os.urandom(5).hex()}"})
    assert r.status_code == 201, r.text
    d = r.json()
    return Prog(d["programmeId"], d["apiKey"], d["profiles"], d["feeTypes"])


async def test_two_serve_processes_keep_the_ledger_whole(tmp_path):
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with fresh_database(tmp_path) as url, two_servers(url, tmp_path) as bases:
        db = Database(url)
        try:
            async with contextlib.AsyncExitStack() as stack:
                limits = httpx.Limits(max_connections=PARALLEL)
                clients: list[httpx.AsyncClient] = [
                    await stack.enter_async_context(
                        httpx.AsyncClient(base_url=b, timeout=60, limits=limits)
                    )
                    for b in bases
                ]
                await hundred_charges(clients, db, await new_programme(clients[0], admin), admin)
                await assert_ledger_verify_ok(url)
                p = await new_programme(clients[1], admin)
                await one_ref_twenty_times(clients, db, p, admin)
                await assert_ledger_verify_ok(url)
        finally:
            await db.dispose()


# ledger verify finds a corrupted balance


async def test_ledger_verify_names_a_corrupted_account(
    client, programme, container, admin_headers, database_url
):
    p = await programme()
    ident = await verified(client, p, "corporates")
    acc = (await open_account(client, ident, "EUR"))["id"]
    await deposit(client, p, acc, 500)
    r = await charge(client, ident, acc)
    assert r.status_code == 200, r.text

    async def shift(delta: int) -> None:
        # Behind the ledger's back: the balance moves, no posting does.
        async with container.db.transaction() as s:
            await s.execute(
                update(LedgerAccount)
                .where(LedgerAccount.id == int(acc))
                .values(
                    available=LedgerAccount.available + delta,
                    actual=LedgerAccount.actual + delta,
                )
            )

    await shift(7)
    try:
        code, out, err = await ledger_verify(database_url)
        assert code != 0, (out, err)
        assert f"account {acc}" in err, err
        assert "ok" not in out
        r = await client.get(f"{PORTAL}/{p.id}/ledger/verify", headers=admin_headers)
        assert r.json()["ok"] is False
        assert any(f"account {acc}" in v["detail"] for v in r.json()["violations"])
    finally:
        await shift(-7)
    assert await available(client, ident, acc) == 400
    await ledger_ok(client, admin_headers, p)
    await assert_ledger_verify_ok(database_url)
