"""`GET /multi/managed_accounts/{id}/statement?limit=100` (default order, newest first) on an
account with 1,000 and, separately, 1,000,000 postings, against the bare FastAPI baseline in the
same run; SQLite always, PostgreSQL too when `--postgres URL` names a server (a fresh database is
created on it for each size and dropped afterwards).

How an account is seeded: `multibank serve` starts on a fresh database; a corporate signs up, is
verified through the simulator, opens a EUR account, gets one simulator deposit and one ADMIN_FEE
charge through the public API (which creates the programme's settlement and revenue accounts).
Then N postings are bulk inserted on the account, each in a balanced transaction of its own: a
DEPOSIT of 100 (settlement -100 / account +100) every fourth posting and a CHARGE_FEE of 25
(account -25 / revenue +25) on the three after it, so the balance never goes below zero; one
zero-amount INSTRUMENT_BLOCK/UNBLOCK event every 1,000th posting (a single zero posting). The
`*_after` columns carry the running balance; at the end the three accounts' balances are set to
the sums of their postings, and `multibank ledger verify` must pass before the measurement.
Inserts are executemany in chunks in one transaction on SQLite and COPY in one transaction on
PostgreSQL (followed by VACUUM ANALYZE, as autovacuum would do).

Only 200 answers count (any other fails the run at its end); each row carries the server's CPU
per answer beside req/s.

Usage: .venv/bin/python bench/bench_statement.py [--seconds 10] [--connections 16]
       [--sizes 1000,1000000] [--postgres postgresql://postgres@127.0.0.1:5432/postgres]
       [--port-base N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from common import (
    VENV_BIN,
    Figures,
    Server,
    add_port_base,
    bare_server,
    call,
    check_answers,
    corporate_signup,
    fund,
    multibank_server,
    report,
    use_port_base,
    wrk,
)

CHUNK = 50_000
PASSWORD = "Bench-1234!"
# Seeded ids and times live far from the server's own (time-ordered 64-bit ids, epoch ms now).
ID_BASE = 1_000_000_000
T0_MS = 1_600_000_000_000


@dataclass
class Fixture:
    account_id: int
    programme_id: int
    settlement_id: int
    revenue_id: int
    headers: dict[str, str]
    email: str


def setup_account(server: Server) -> tuple[str, str, str]:
    """A verified corporate with a funded EUR account; answers (account id, token, e-mail)."""
    h = {"api-key": server.api_key}
    email = f"bench{secrets.token_hex(4)}@example.com"
    created = call(
        "POST",
        f"{server.base}/multi/corporates",
        h,
        corporate_signup(server.profiles["corporate"], email),
    )
    user_id = created["rootUser"]["id"]["id"]
    sim = {"programme-key": server.api_key}
    call("POST", f"{server.base}/simulate/api/corporates/{created['id']['id']}/verify", sim)
    token = call(
        "POST",
        f"{server.base}/multi/passwords/{user_id}/create",
        h,
        {"password": {"value": PASSWORD}},
    )["token"]
    auth = {**h, "Authorization": f"Bearer {token}"}
    account = call(
        "POST",
        f"{server.base}/multi/managed_accounts",
        auth,
        {
            "profileId": server.profiles["corporateManagedAccount"],
            "friendlyName": "Bench",
            "currency": "EUR",
        },
    )
    fund(server.base, server.api_key, auth, str(account["id"]), 1000)
    fee = {"feeType": "ADMIN_FEE", "source": {"type": "managed_accounts", "id": account["id"]}}
    call("POST", f"{server.base}/multi/corporates/fees/charge", auth, fee)
    return str(account["id"]), str(token), email


def login(server: Server, email: str) -> dict[str, str]:
    h = {"api-key": server.api_key}
    out = call(
        "POST",
        f"{server.base}/multi/login_with_password",
        h,
        {"email": email, "password": {"value": PASSWORD}},
    )
    return {**h, "Authorization": f"Bearer {out['token']}"}


# Rows: transactions (id, programme_id, type, state, details, created_at) and postings (id,
# programme_id, transaction_id, account_id, currency, available_amount, actual_amount,
# available_after, actual_after, created_at, seq). The account's postings continue its chain
# (`seq` after its posting count, the balances after running), so `ledger verify` checks them;
# the other sides' have no place in a chain (as postings written before migration 0017).
Tx = tuple[int, int, str, str, str, int]
Post = tuple[int, int, int, int, str, int, int, int, int, int, int | None]


def rows(
    f: Fixture, n: int, start_balance: int, start_seq: int
) -> Iterator[tuple[list[Tx], list[Post]]]:
    """N account postings in chunks, each in a balanced transaction of its own."""
    pid, balance, counter, seq = f.programme_id, start_balance, ID_BASE, start_seq
    fee_details = json.dumps({"chargeFeeType": "ADMIN_FEE"})
    dep_details = json.dumps({"sender": "Bench Sender", "reference": "seed"})
    txs: list[Tx] = []
    posts: list[Post] = []
    for i in range(n):
        t = T0_MS + i * 1000
        tx_id = counter
        seq += 1
        counter += 1
        if i % 1000 == 999:
            kind = "INSTRUMENT_BLOCK" if i % 2000 == 999 else "INSTRUMENT_UNBLOCK"
            txs.append((tx_id, pid, kind, "COMPLETED", "{}", t))
            posts.append((counter, pid, tx_id, f.account_id, "EUR", 0, 0, balance, balance, t, seq))
            counter += 1
        else:
            if i % 4 == 0:
                amount, other, details, kind = 100, f.settlement_id, dep_details, "DEPOSIT"
            else:
                amount, other, details, kind = -25, f.revenue_id, fee_details, "CHARGE_FEE"
            balance += amount
            txs.append((tx_id, pid, kind, "COMPLETED", details, t))
            posts.append(
                (counter, pid, tx_id, f.account_id, "EUR", amount, amount, balance, balance, t, seq)
            )
            # The other side's running balance is not read by anything measured here; the
            # accounts' final balances are set from the sums below.
            posts.append((counter + 1, pid, tx_id, other, "EUR", -amount, -amount, 0, 0, t, None))
            counter += 2
        if len(txs) >= CHUNK:
            yield txs, posts
            txs, posts = [], []
    if txs:
        yield txs, posts


TX_SQL = (
    "INSERT INTO ledger_transactions (id, programme_id, type, state, details, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
POST_SQL = (
    "INSERT INTO postings (id, programme_id, transaction_id, account_id, currency, "
    "available_amount, actual_amount, available_after, actual_after, created_at, seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
FIX_BALANCES = (
    "UPDATE ledger_accounts SET "
    "available = (SELECT coalesce(sum(available_amount), 0) FROM postings "
    "WHERE account_id = ledger_accounts.id), "
    "actual = (SELECT coalesce(sum(actual_amount), 0) FROM postings "
    "WHERE account_id = ledger_accounts.id), "
    "posting_count = (SELECT count(*) FROM postings WHERE account_id = ledger_accounts.id), "
    "movement_count = (SELECT count(*) FROM postings WHERE account_id = ledger_accounts.id "
    "AND (available_amount <> 0 OR actual_amount <> 0)) "
    "WHERE id IN ({ids})"
)
# The settlement account, and the revenue shard the one charge created (its key may end ":k").
SYSTEM_IDS = "SELECT id FROM ledger_accounts WHERE system_key LIKE {p} ORDER BY id LIMIT 1"


def fixture_sqlite(path: str, account_id: str, headers: dict[str, str], email: str) -> Fixture:
    con = sqlite3.connect(path)
    try:
        (pid,) = con.execute(
            "SELECT programme_id FROM ledger_accounts WHERE id = ?", (int(account_id),)
        ).fetchone()
        ids = [
            con.execute(SYSTEM_IDS.format(p="?"), (f"{pid}:{k}:EUR%",)).fetchone()[0]
            for k in ("SETTLEMENT", "REVENUE")
        ]
    finally:
        con.close()
    return Fixture(int(account_id), int(pid), int(ids[0]), int(ids[1]), headers, email)


def seed_sqlite(path: str, f: Fixture, n: int) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA busy_timeout=30000")
        con.execute("PRAGMA cache_size=-262144")  # 256 MiB: the index pages stay in memory
        balance, seq = con.execute(
            "SELECT actual, posting_count FROM ledger_accounts WHERE id = ?", (f.account_id,)
        ).fetchone()
        con.execute("BEGIN IMMEDIATE")
        for txs, posts in rows(f, n, int(balance), int(seq)):
            con.executemany(TX_SQL, txs)
            con.executemany(POST_SQL, posts)
        ids = ",".join(str(i) for i in (f.account_id, f.settlement_id, f.revenue_id))
        con.execute(FIX_BALANCES.format(ids=ids))
        con.execute("COMMIT")
        con.execute("ANALYZE")
    finally:
        con.close()


async def seed_postgres(
    url: str, account_id: str, headers: dict[str, str], email: str, n: int
) -> Fixture:
    import asyncpg

    con = await asyncpg.connect(url)
    try:
        pid, balance, seq = await con.fetchrow(
            "SELECT programme_id, actual, posting_count FROM ledger_accounts WHERE id = $1",
            int(account_id),
        )
        ids = [
            await con.fetchval(SYSTEM_IDS.format(p="$1"), f"{pid}:{k}:EUR%")
            for k in ("SETTLEMENT", "REVENUE")
        ]
        f = Fixture(int(account_id), int(pid), int(ids[0]), int(ids[1]), headers, email)
        async with con.transaction():
            for txs, posts in rows(f, n, int(balance), int(seq)):
                await con.copy_records_to_table(
                    "ledger_transactions",
                    records=txs,
                    columns=["id", "programme_id", "type", "state", "details", "created_at"],
                )
                await con.copy_records_to_table(
                    "postings",
                    records=posts,
                    columns=[
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
                        "seq",
                    ],
                )
            all_ids = ",".join(str(i) for i in (f.account_id, f.settlement_id, f.revenue_id))
            await con.execute(FIX_BALANCES.format(ids=all_ids))
        await con.execute("VACUUM ANALYZE postings")
        await con.execute("VACUUM ANALYZE ledger_transactions")
        return f
    finally:
        await con.close()


def ledger_verify(database_url: str) -> None:
    env = {**os.environ, "MULTIBANK_DATABASE_URL": database_url, "MULTIBANK_LOG_LEVEL": "WARNING"}
    out = subprocess.run(
        [str(VENV_BIN / "multibank"), "ledger", "verify"], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"ledger verify failed:\n{out.stdout}{out.stderr}")


async def _pg_admin(url: str, sql: str) -> None:
    import asyncpg

    con = await asyncpg.connect(url)
    try:
        await con.execute(sql)
    finally:
        await con.close()


@contextmanager
def database(kind: str, pg_url: str | None) -> Iterator[str]:
    """A fresh database URL (asyncpg driver for PostgreSQL) for one size."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite+aiosqlite:///{tmp}/bench.db"
        return
    assert pg_url is not None
    name = f"bench_statement_{secrets.token_hex(4)}"
    admin = pg_url.replace("postgresql+asyncpg://", "postgresql://")
    asyncio.run(_pg_admin(admin, f'CREATE DATABASE "{name}"'))
    try:
        base, _, _ = admin.rpartition("/")
        yield f"{base}/{name}".replace("postgresql://", "postgresql+asyncpg://", 1)
    finally:
        asyncio.run(_pg_admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def run_size(kind: str, pg_url: str | None, n: int, seconds: int, connections: int) -> Figures:
    with database(kind, pg_url) as url, multibank_server(env={"MULTIBANK_DATABASE_URL": url}) as s:
        account_id, token, email = setup_account(s)
        headers = {"api-key": s.api_key, "Authorization": f"Bearer {token}"}
        started = time.monotonic()
        if kind == "sqlite":
            path = url.split(":///", 1)[1]
            seed_sqlite(path, fixture_sqlite(path, account_id, headers, email), n)
        else:
            plain = url.replace("postgresql+asyncpg://", "postgresql://")
            asyncio.run(seed_postgres(plain, account_id, headers, email, n))
        seeded = time.monotonic() - started
        ledger_verify(url)
        verified = time.monotonic() - started - seeded
        headers = login(s, email)  # a fresh session, whatever the seeding took
        target = f"{s.base}/multi/managed_accounts/{account_id}/statement?limit=100"
        first = call("GET", target, headers)
        assert first["responseCount"] == 100, first
        assert first["count"] >= n, first["count"]
        print(
            f"{kind} {n:,} postings: seeded in {seeded:.1f}s, ledger verify ok in "
            f"{verified:.1f}s, count={first['count']:,}",
            flush=True,
        )
        return wrk(
            f"{kind} statement, {n:,} postings",
            target,
            headers,
            seconds,
            connections,
            pid=s.pid,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--sizes", default="1000,1000000")
    ap.add_argument("--postgres", default=None, help="server URL, e.g. postgresql://u@host/db")
    add_port_base(ap)
    args = ap.parse_args()
    use_port_base(args.port_base)
    sizes = [int(s) for s in args.sizes.split(",")]
    with bare_server() as bare:
        baseline = wrk(
            "bare FastAPI GET /ping",
            f"{bare.base}/ping",
            {},
            args.seconds,
            args.connections,
            pid=bare.pid,
        )
    results: list[Figures] = []
    for kind in ("sqlite", "postgres") if args.postgres else ("sqlite",):
        for n in sizes:
            results.append(run_size(kind, args.postgres, n, args.seconds, args.connections))
    print(report([baseline, *results], baseline))
    check_answers([baseline, *results])


if __name__ == "__main__":
    main()
