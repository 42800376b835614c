"""Scheduled payments execute exactly once (issue 43 §5 "How it must hold", D40, decision 0085),
with real `multibank serve` processes on one database, each running the due-work scheduler:

- two processes, a `clock/advance` through each of them racing both workers and a bulk cancel:
  every scheduled transfer ends once, executed (`COMPLETED`, or `FAILED` once the money ran out)
  or `CANCELLED` exactly when its cancel answered `SUCCESS`, with one event for each step;
- `kill -9` of one of two processes while it executes a batch: the other finishes what was
  left, and nothing is executed twice;
and `ledger verify` is clean after each. In CI they also run behind PgBouncer (scripts/test).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from multibank.kernel.db import Database
from multibank.webhooks.models import WebhookEvent
from tests.api.payments_support import balances
from tests.api.test_ledger_concurrency import (
    _env,
    assert_ledger_verify_ok,
    fresh_database,
    new_programme,
)
from tests.api.test_payment_concurrency import ADMIN, _patch, _start, _wire_customer, serving
from tests.conftest import ADMIN_TOKEN, Prog
from tests.factories import Identity, open_account

LINE = "/3.63.4/multi"
AMOUNT = 1_000
COUNT, FUNDED_FOR, CANCELS = 40, 30, 8


async def _clock(http: httpx.AsyncClient, p: Prog, seconds: int) -> int:
    r = await http.post(
        "/simulate/api/clock/advance",
        headers={"programme-key": p.api_key},
        json={"seconds": seconds},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    now: int = r.json()["now"]
    return now


async def _stage(http: httpx.AsyncClient, funds: int) -> tuple[Prog, Identity, str, str]:
    """A programme whose events are recorded (its webhook URL answers nothing), a customer
    with two accounts, the first holding `funds`."""
    p = await new_programme(http, ADMIN)
    await _patch(http, f"{p.id}/settings", {"webhookUrl": "http://127.0.0.1:9/hooks"})
    ident, acc = await _wire_customer(http, p, funds)
    other = (await open_account(http, ident, "EUR"))["id"]
    return p, ident, acc, other


async def _schedule(
    clients: list[httpx.AsyncClient], p: Prog, ident: Identity, acc: str, other: str, count: int
) -> list[str]:
    at = await _clock(clients[0], p, 1) + 60_000
    body = {
        "profileId": p.profiles["transfers"],
        "source": {"type": "managed_accounts", "id": acc},
        "destination": {"type": "managed_accounts", "id": other},
        "destinationAmount": {"currency": "EUR", "amount": AMOUNT},
        "scheduledTimestamp": str(at),
    }
    made = await asyncio.gather(
        *(
            clients[i % len(clients)].post(f"{LINE}/transfers", headers=ident.headers, json=body)
            for i in range(count)
        )
    )
    assert all(r.status_code == 200 for r in made), [r.text for r in made][:2]
    assert {r.json()["state"] for r in made} == {"SCHEDULED"}
    return [r.json()["id"] for r in made]


async def _states(http: httpx.AsyncClient, ident: Identity, ids: list[str], seconds: float):
    """Each transfer's state once none is SCHEDULED any more (the workers' pace)."""
    deadline = time.monotonic() + seconds
    while True:
        states = {}
        for transfer_id in ids:
            r = await http.get(f"{LINE}/transfers/{transfer_id}", headers=ident.headers)
            assert r.status_code == 200, r.text
            states[transfer_id] = r.json()["state"]
        if "SCHEDULED" not in states.values():
            return states
        assert time.monotonic() < deadline, Counter(states.values())
        await asyncio.sleep(0.3)


async def _events(url: str, ids: list[str]) -> dict[str, list[str]]:
    db = Database(url)
    try:
        async with db.transaction() as session:
            rows = (
                await session.execute(
                    select(WebhookEvent.resource, WebhookEvent.event_type).order_by(WebhookEvent.id)
                )
            ).all()
    finally:
        await db.dispose()
    wanted = {f"transfers:{i}": i for i in ids}
    out: dict[str, list[str]] = {i: [] for i in ids}
    for resource, kind in rows:
        if resource in wanted:
            out[wanted[resource]].append(kind)
    return out


def _money_adds_up(states: dict[str, str]) -> tuple[int, Counter[str]]:
    counted = Counter(states.values())
    executed = counted["COMPLETED"] + counted["FAILED"]
    # Funded for FUNDED_FOR: the first that far complete, the rest fail for funds.
    assert counted["COMPLETED"] == min(FUNDED_FOR, executed), counted
    return counted["COMPLETED"], counted


async def test_two_processes_a_racing_advance_and_cancels_execute_each_once(tmp_path):
    async with fresh_database(tmp_path) as url, serving(url, tmp_path, 2) as servers:
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(httpx.AsyncClient(base_url=b, timeout=60))
                for b, _ in servers
            ]
            p, ident, acc, other = await _stage(clients[0], FUNDED_FOR * AMOUNT)
            ids = await _schedule(clients, p, ident, acc, other, COUNT)
            cancel: dict[str, Any] = {"cancellations": [{"id": i} for i in ids[-CANCELS:]]}
            # The time comes through both processes at once, while both workers look and a
            # cancel of the last few runs on the second.
            _, _, cancelled = await asyncio.gather(
                _clock(clients[0], p, 60),
                _clock(clients[1], p, 60),
                clients[1].post(
                    f"{LINE}/transfers/bulk/cancel", headers=ident.headers, json=cancel
                ),
            )
            assert cancelled.status_code == 200, cancelled.text
            results = {c["id"]: c for c in cancelled.json()["cancellations"]}
            states = await _states(clients[0], ident, ids, 60)
            for transfer_id, result in results.items():
                if result["state"] == "SUCCESS":
                    assert states[transfer_id] == "CANCELLED"
                else:
                    assert result["errorCode"] == "TRANSACTION_NOT_SCHEDULED", result
                    assert states[transfer_id] in ("COMPLETED", "FAILED")
            completed, _ = _money_adds_up(states)
            assert (
                await balances(clients[0], ident, acc) == ((FUNDED_FOR - completed) * AMOUNT,) * 2
            )
            assert await balances(clients[0], ident, other) == (completed * AMOUNT,) * 2
        for transfer_id, kinds in (await _events(url, ids)).items():
            expected = ["transfers.SCHEDULED", f"transfers.{states[transfer_id]}"]
            assert kinds == expected, (transfer_id, kinds)
        await assert_ledger_verify_ok(url)


async def test_kill_minus_nine_of_either_process_mid_execution_and_each_goes_once(tmp_path):
    """Two processes; the one the advance went through is killed while it (or either worker)
    is part way through the batch: the other finishes what was left, then a process started
    afterwards finds nothing left to do, and nothing went twice."""
    count = 120
    async with fresh_database(tmp_path) as url:
        env = {
            **_env(url),
            "MULTIBANK_ADMIN_TOKEN": ADMIN_TOKEN,
            "MULTIBANK_PAYMENTS_POLL_SECONDS": "0.1",
        }
        killed, killed_base = await _start(env, tmp_path)
        survivor, survivor_base = await _start(env, tmp_path)
        try:
            async with (
                httpx.AsyncClient(base_url=killed_base, timeout=60) as first,
                httpx.AsyncClient(base_url=survivor_base, timeout=60) as second,
            ):
                p, ident, acc, other = await _stage(first, count * AMOUNT)
                ids = await _schedule([first, second], p, ident, acc, other, count)
                # The advance executes what it made due before it answers; the kill lands
                # while it (or a worker) is part way through.
                advancing = asyncio.ensure_future(_clock(first, p, 60))
                await asyncio.sleep(0.4)
                os.kill(killed.pid, signal.SIGKILL)
                with contextlib.suppress(httpx.HTTPError):
                    await advancing
                states = await _states(second, ident, ids, 90)
                assert Counter(states.values()) == {"COMPLETED": count}
        finally:
            for proc in (killed, survivor):
                if proc.returncode is None:
                    os.kill(proc.pid, signal.SIGKILL)
                await proc.wait()
        proc, base = await _start(env, tmp_path)
        try:
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                await asyncio.sleep(0.5)  # its worker's first rounds
                assert await balances(http, ident, other) == (count * AMOUNT,) * 2
                assert await balances(http, ident, acc) == (0, 0)
        finally:
            proc.terminate()
            await proc.wait()
        for transfer_id, kinds in (await _events(url, ids)).items():
            assert kinds == ["transfers.SCHEDULED", "transfers.COMPLETED"], (transfer_id, kinds)
        await assert_ledger_verify_ok(url)


def test_the_slice_runs_behind_pgbouncer():
    """scripts/test's PgBouncer slice names this file."""
    script = (Path(__file__).resolve().parents[2] / "scripts" / "test").read_text()
    assert "tests/api/test_scheduled_processes.py" in script
