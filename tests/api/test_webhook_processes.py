"""Webhook delivery by real `multibank serve` processes (issue 13), on the database under test:

- two processes share the work: every event arrives exactly once while the receiver is healthy
  (no call-ref twice), and one resource's events in the order they happened, also when a
  backlog of many events per resource is drained in chains (decision 0062);
- `kill -9` of the process that is sending an event loses nothing: after its lease runs out,
  another process sends it again under the same call-ref (at least once).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from sqlalchemy import func, insert, select

from multibank.kernel.db import Database
from multibank.webhooks.delivery import CHAIN
from multibank.webhooks.models import WebhookEvent
from tests.api.test_ledger_concurrency import MULTIBANK, _env, fresh_database
from tests.api.test_payment_concurrency import _start
from tests.api.webhook_support import receiving, signed_by
from tests.conftest import ADMIN_TOKEN, Prog
from tests.factories import open_account, verified
from tests.webhooks.conftest import event_rows

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _server_env(url: str) -> dict[str, str]:
    return {
        **_env(url),
        "MULTIBANK_ADMIN_TOKEN": ADMIN_TOKEN,
        "MULTIBANK_WEBHOOKS_POLL_SECONDS": "0.1",
        "MULTIBANK_WEBHOOKS_LEASE_SECONDS": "11",
    }


@contextlib.asynccontextmanager
async def servers(
    env: dict[str, str], tmp_path: Path, count: int
) -> AsyncIterator[list[tuple[asyncio.subprocess.Process, str]]]:
    procs = [await _start(env, tmp_path) for _ in range(count)]
    try:
        yield procs
    finally:
        for proc, _ in procs:
            if proc.returncode is None:
                proc.terminate()
        for proc, _ in procs:
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def hooked_programme(http: httpx.AsyncClient, receiver_url: str) -> Prog:
    r = await http.post(
        "/portal/api/programmes",
        headers=ADMIN,
        json={"name": f"hooks{os.urandom(4).hex()}", "webhookUrl": receiver_url},
    )
    assert r.status_code == 201, r.text
    d = r.json()
    return Prog(d["programmeId"], d["apiKey"], d["profiles"], d["feeTypes"])


async def recorded(url: str, programme_id: str) -> int:
    db = Database(url)
    try:
        async with db.transaction() as s:
            stmt = (
                select(func.count())
                .select_from(WebhookEvent)
                .where(WebhookEvent.programme_id == int(programme_id))
            )
            return int((await s.execute(stmt)).scalar_one())
    finally:
        await db.dispose()


async def test_two_processes_deliver_each_event_once_and_in_order(tmp_path):
    accounts, updates = 20, 9
    async with fresh_database(tmp_path) as url, servers(_server_env(url), tmp_path, 2) as procs:
        with receiving() as receiver:
            async with contextlib.AsyncExitStack() as stack:
                clients = [
                    await stack.enter_async_context(httpx.AsyncClient(base_url=b, timeout=60))
                    for _, b in procs
                ]
                p = await hooked_programme(clients[0], receiver.url)
                ident = await verified(clients[0], p, "corporates")
                ids = [
                    (await open_account(clients[0], ident, "EUR"))["id"] for _ in range(accounts)
                ]

                async def update(i: int, acc: str) -> None:
                    for n in range(updates):
                        r = await clients[(i + n) % 2].patch(
                            f"/multi/managed_accounts/{acc}",
                            headers=ident.headers,
                            json={"tag": f"n{n}"},
                        )
                        assert r.status_code == 200, r.text

                await asyncio.gather(*(update(i, a) for i, a in enumerate(ids)))
            total = await recorded(url, p.id)
            assert total >= accounts * (updates + 1)  # and the identity's own events
            got = await asyncio.to_thread(receiver.wait_for, total, 60)
            await asyncio.sleep(1)  # anything sent twice would arrive now
            got = list(receiver.received)
    refs = Counter(r.call_ref for r in got)
    assert len(got) == total and max(refs.values()) == 1, refs.most_common(3)
    assert all(signed_by(p.api_key, r) for r in got)
    tags: dict[str, list[str]] = defaultdict(list)
    for r in got:
        if r.path == "/hooks/managed_accounts/watch":
            tags[r.json["account"]["id"]["id"]].append(r.json["account"]["tag"])
    assert set(tags) == set(ids)
    for acc in ids:
        assert tags[acc] == ["", *(f"n{n}" for n in range(updates))], tags[acc]


async def test_two_processes_drain_a_backlog_each_event_once_and_in_order(tmp_path):
    resources, per_resource = 8, 2 * CHAIN + 10  # two processes, each resource over 3 chains
    # The default lease: rounds send chains of each resource's events (an 11 s one would not).
    async with fresh_database(tmp_path) as url:
        env = {**_server_env(url), "MULTIBANK_WEBHOOKS_LEASE_SECONDS": "60"}
        async with servers(env, tmp_path, 2) as procs:
            with receiving() as receiver:
                async with httpx.AsyncClient(base_url=procs[0][1], timeout=60) as http:
                    p = await hooked_programme(http, receiver.url)
                # The whole backlog at once, in one transaction: both processes find it due.
                db = Database(url)
                try:
                    rows = event_rows(int(p.id), resources, per_resource, int(time.time() * 1000))
                    async with db.transaction() as s:
                        await s.execute(insert(WebhookEvent), rows)
                finally:
                    await db.dispose()
                await asyncio.to_thread(receiver.wait_for, len(rows), 120)
                await asyncio.sleep(1)  # anything sent twice would arrive now
                got = list(receiver.received)
    refs = Counter(r.call_ref for r in got)
    assert len(got) == len(rows) and max(refs.values()) == 1, refs.most_common(3)
    assert all(signed_by(p.api_key, r) for r in got)
    seqs: dict[str, list[int]] = defaultdict(list)
    for r in got:
        seqs[r.json["resource"]].append(r.json["seq"])
    assert seqs == {f"r{n}": list(range(per_resource)) for n in range(resources)}


async def test_kill_minus_nine_while_sending_loses_no_event(tmp_path):
    async with fresh_database(tmp_path) as url:
        env = _server_env(url)
        with receiving() as receiver:
            receiver.delay = 4  # the first process dies while the receiver holds the event
            async with (
                servers(env, tmp_path, 1) as procs,
                httpx.AsyncClient(base_url=procs[0][1], timeout=60) as http,
            ):
                p = await hooked_programme(http, receiver.url)
                await verified(http, p, "corporates")
                await asyncio.to_thread(receiver.wait_for, 1, 30)
                first_at = time.monotonic()
                os.kill(procs[0][0].pid, signal.SIGKILL)
                await procs[0][0].wait()
            first = receiver.received[0]
            receiver.delay = 0
            async with servers(env, tmp_path, 1):
                deadline = time.monotonic() + 40
                while not any(r.call_ref == first.call_ref for r in receiver.received[1:]):
                    assert time.monotonic() < deadline, "the event was never sent again"
                    await asyncio.sleep(0.2)
                again_at = time.monotonic()
            again = next(r for r in receiver.received[1:] if r.call_ref == first.call_ref)
    assert again.body == first.body and signed_by(p.api_key, again)
    # Not before the dead process's lease (11 s from its claim) ran out.
    assert again_at - first_at >= 10, again_at - first_at


async def test_a_delivery_process_beside_api_processes_that_send_nothing(tmp_path):
    async with fresh_database(tmp_path) as url:
        api_env = {**_server_env(url), "MULTIBANK_WEBHOOKS_POLL_SECONDS": "0"}
        with receiving() as receiver:
            async with (
                servers(api_env, tmp_path, 1) as procs,
                httpx.AsyncClient(base_url=procs[0][1], timeout=60) as http,
            ):
                p = await hooked_programme(http, receiver.url)
                await verified(http, p, "corporates")
                await asyncio.sleep(1)
                assert receiver.received == []  # the API process sends nothing
                deliverer = await asyncio.create_subprocess_exec(
                    str(MULTIBANK),
                    "webhooks",
                    "deliver",
                    env={**_server_env(url), "MULTIBANK_WEBHOOKS_POLL_SECONDS": "0.1"},
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                try:
                    got = await asyncio.to_thread(receiver.wait_for, 1, 30)
                finally:
                    deliverer.send_signal(signal.SIGINT)
                    out, err = await asyncio.wait_for(deliverer.communicate(), 30)
            assert deliverer.returncode == 0, err.decode()
            assert b"stopped" in out
    assert got[0].path == "/hooks/corporates/kyb/watch" and signed_by(p.api_key, got[0])
