"""Scheduled transfers falling due at one `clock/advance` (issue 43 §5, decision 0085): how fast
one server process executes them, each once.

A fresh server (one uvicorn worker, its due-work scheduler running) on a fresh database; `--count`
transfers between the two accounts of each of `--customers` funded corporates are made through
`/3.63.4/multi/transfers` with one `scheduledTimestamp` a minute ahead (`--concurrency` at a time;
each answer must be `SCHEDULED`). Then one `POST /simulate/api/clock/advance` of 60 s makes them
all due: the advance executes what it can before it answers (its catch-up), and the process's
worker the rest. Printed: executions per second from the advance to the last one (the database
polled for what is still `SCHEDULED`), the server's CPU per execution (/proc), how many ended
`COMPLETED` and that each moved money once (one ledger transaction per payment), then
`multibank ledger verify`. Exit 1 when any is not `COMPLETED` or the ledger does not verify.

Usage: .venv/bin/python bench/bench_scheduled.py [--count 10000] [--customers 50]
       [--concurrency 32] [--database-url postgresql://postgres@127.0.0.1:5432/<empty db>]
       [--port-base N] [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

import httpx
from bench_fee import funded_corporate
from common import (
    Server,
    add_port_base,
    call,
    ledger_verify_cli,
    multibank_server,
    server_cpu,
    use_port_base,
)
from sqlalchemy import func, select

from multibank.kernel.db import Database
from multibank.ledger.models import LedgerTransaction
from multibank.payments.models import Payment

LINE = "/3.63.4/multi"
AMOUNT = 100


def customers(server: Server, count: int, funds: int) -> list[tuple[dict[str, str], str, str]]:
    out = []
    for _ in range(count):
        headers, first = funded_corporate(server, funds)
        second = call(
            "POST",
            f"{server.base}/multi/managed_accounts",
            headers,
            {
                "profileId": server.profiles["corporateManagedAccount"],
                "friendlyName": "Bench second",
                "currency": "EUR",
            },
        )
        out.append((headers, first, str(second["id"])))
    return out


def advance(server: Server, seconds: int) -> int:
    out = call(
        "POST",
        f"{server.base}/simulate/api/clock/advance",
        {"programme-key": server.api_key},
        {"seconds": seconds},
    )
    now: int = out["now"]
    return now


async def schedule(
    server: Server, who: list[tuple[dict[str, str], str, str]], count: int, at: int, width: int
) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)
    refused: list[str] = []

    async def one(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            headers, first, second = who[i % len(who)]
            r = await http.post(
                f"{LINE}/transfers",
                headers=headers,
                json={
                    "profileId": server.profiles["transfers"],
                    "source": {"type": "managed_accounts", "id": first},
                    "destination": {"type": "managed_accounts", "id": second},
                    "destinationAmount": {"currency": "EUR", "amount": AMOUNT},
                    "scheduledTimestamp": str(at),
                },
            )
            if r.status_code != 200 or r.json().get("state") != "SCHEDULED":
                refused.append(f"{r.status_code} {r.text[:200]}")

    limits = httpx.Limits(max_connections=width)
    async with httpx.AsyncClient(base_url=server.base, timeout=60, limits=limits) as http:
        await asyncio.gather(*(one(http) for _ in range(width)))
    if refused:
        sys.exit(f"{len(refused)} creates were not SCHEDULED, e.g. {refused[0]}")


async def counts(db: Database) -> tuple[dict[str, int], int]:
    """Payments by state, and ledger transactions of type TRANSFER."""
    async with db.read_sessionmaker() as session:
        rows = await session.execute(select(Payment.state, func.count()).group_by(Payment.state))
        states = {state: int(n) for state, n in rows.all()}
        moved = (
            await session.execute(
                select(func.count())
                .select_from(LedgerTransaction)
                .where(LedgerTransaction.type == "TRANSFER")
            )
        ).scalar_one()
    return states, int(moved)


async def drain(
    server: Server, db: Database, limit_s: float, profile: str | None
) -> tuple[float, float]:
    """Seconds from the advance to the last execution, and the server's CPU seconds meanwhile;
    with `profile`, py-spy (on PATH) samples the server meanwhile into that file (raw stacks)."""
    spy = None
    if profile:
        spy = await asyncio.create_subprocess_exec(
            *("py-spy", "record", "-p", str(server.pid), "-f", "raw", "-o", profile, "-r", "200"),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await asyncio.sleep(1)  # attached
    try:
        return await _drain(server, db, limit_s)
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            await asyncio.wait_for(spy.wait(), 30)


async def _drain(server: Server, db: Database, limit_s: float) -> tuple[float, float]:
    cpu0, t0 = server_cpu(server.pid), time.monotonic()
    await asyncio.to_thread(advance, server, 60)
    while True:
        states, _ = await counts(db)
        if not states.get("SCHEDULED"):
            return time.monotonic() - t0, server_cpu(server.pid) - cpu0
        if time.monotonic() - t0 > limit_s:
            sys.exit(f"still scheduled after {limit_s} s: {states}")
        await asyncio.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--customers", type=int, default=50)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--limit-seconds", type=float, default=600)
    ap.add_argument("--database-url", default=None, help="an empty PostgreSQL database")
    ap.add_argument("--profile", default=None, help="py-spy's raw stacks of the drain, to FILE")
    add_port_base(ap)
    args = ap.parse_args()
    use_port_base(args.port_base)
    env = {"MULTIBANK_DATABASE_URL": args.database_url} if args.database_url else None
    with multibank_server(env) as server:
        per = -(-args.count // args.customers)
        who = customers(server, args.customers, per * AMOUNT)
        at = advance(server, 1) + 60_000
        started = time.monotonic()
        asyncio.run(schedule(server, who, args.count, at, args.concurrency))
        made_s = time.monotonic() - started
        print(f"{args.count} transfers scheduled in {made_s:.1f} s ({args.count / made_s:.0f}/s)")

        async def measure() -> tuple[float, float, dict[str, int], int]:
            db = Database(server.database_url)
            try:
                seconds, cpu = await drain(server, db, args.limit_seconds, args.profile)
                states, moved = await counts(db)
            finally:
                await db.dispose()
            return seconds, cpu, states, moved

        seconds, cpu, states, moved = asyncio.run(measure())
        ok, said = ledger_verify_cli(server)
    rate = args.count / seconds
    print(
        f"executed {args.count} in {seconds:.2f} s: {rate:.0f}/s, server CPU "
        f"{cpu / args.count * 1e6:.0f} µs per execution"
    )
    print(f"states: {states}; ledger transactions of the transfers: {moved}")
    print(f"ledger verify: {'ok' if ok else said}")
    print(f"{'PASS' if rate >= 500 else 'FAIL'}  >= 500 executions/s (issue 43)")
    if states.get("COMPLETED") != args.count or moved != args.count or not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
