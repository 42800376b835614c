"""Sends and wire transfers keep the ledger whole under concurrency, several processes and a
crash (issue 12), on the database under test:

- 100 sends at once from an account funded for 30 of them (amount + fee): exactly 30 are held,
  70 answer FUNDS_INSUFFICIENT, no hold ever takes the available balance below zero; the 30 then
  verified at once all complete; through one app and through two app instances;
- wire transfers stepped in the background by two `multibank serve` processes: each reaches
  COMPLETED, each step once (revenue holds one fee per transfer, nothing stays held);
- `kill -9` of the only server between a challenge's verify and the wire transfer's completion:
  after a restart it completes, and `ledger verify` is clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event, select, update
from sqlalchemy.util import await_

from multibank.kernel.db import Database
from multibank.ledger.models import RESERVED, LedgerAccount
from multibank.payments.models import Payment
from multibank.reconciliation import verify
from tests.api.fees_support import account_postings, revenue
from tests.api.payments_support import PORTAL, balances, enrol_sms
from tests.api.test_ledger_concurrency import (
    MULTIBANK,
    _env,
    _free_port,
    assert_ledger_verify_ok,
    fresh_database,
    new_programme,
    second_client,  # noqa: F401 (a fixture)
)
from tests.conftest import ADMIN_TOKEN, DB_KIND, Prog
from tests.factories import CODE, Identity, deposit, login, open_account, verified

AMOUNT, FEE = 4_000, 25  # above the low-value exemption: every send waits for SCA
PARALLEL, FUNDED_FOR, CONFIRMED = 100, 30, 5
SESSIONS = 4
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def _patch(client: httpx.AsyncClient, path: str, json: dict[str, object]) -> None:
    r = await client.patch(f"{PORTAL}/{path}", headers=ADMIN, json=json)
    assert r.status_code == 200, r.text


async def _sessions(client: httpx.AsyncClient, p: Prog, ident: Identity) -> list[str]:
    tokens = [ident.token]
    for _ in range(SESSIONS - 1):
        r = await login(client, p, ident.email)
        assert r.status_code == 200, r.text
        tokens.append(r.json()["token"])
    return tokens


async def _a_send(client: httpx.AsyncClient, p: Prog) -> tuple[Identity, str, dict[str, object]]:
    """A corporate with 100,000 on an account (its id), and the body of a send of AMOUNT from it
    to a consumer's account (it waits for SCA: its money is held)."""
    sender = await verified(client, p, "corporates")
    a = (await open_account(client, sender, "EUR"))["id"]
    assert await deposit(client, p, a, 100_000) == "COMPLETED"
    receiver = await verified(client, p, "consumers")
    r = (await open_account(client, receiver, "EUR"))["id"]
    return (
        sender,
        a,
        {
            "profileId": p.profiles["sends"],
            "source": {"type": "managed_accounts", "id": a},
            "destination": {"type": "managed_accounts", "id": r},
            "destinationAmount": {"currency": "EUR", "amount": AMOUNT},
        },
    )


def _as(p: Prog, token: str) -> dict[str, str]:
    return {**p.headers, "Authorization": f"Bearer {token}"}


async def hundred_sends(clients: Sequence[httpx.AsyncClient], db: Database, p: Prog) -> None:
    first = clients[0]
    await _patch(first, f"{p.id}/profiles/{p.profiles['sends']}", {"fees": {"EUR": FEE}})
    sender = await verified(first, p, "corporates")
    a = (await open_account(first, sender, "EUR"))["id"]
    assert await deposit(first, p, a, (AMOUNT + FEE) * FUNDED_FOR) == "COMPLETED"
    await enrol_sms(first, sender.headers)  # so the held sends can be verified
    receiver = await verified(first, p, "consumers")
    r = (await open_account(first, receiver, "EUR"))["id"]
    tokens = await _sessions(first, p, sender)
    body = {
        "profileId": p.profiles["sends"],
        "source": {"type": "managed_accounts", "id": a},
        "destination": {"type": "managed_accounts", "id": r},
        "destinationAmount": {"currency": "EUR", "amount": AMOUNT},
    }
    responses = await asyncio.gather(
        *(
            clients[i % len(clients)].post(
                "/multi/sends", headers=_as(p, tokens[i % SESSIONS]), json=body
            )
            for i in range(PARALLEL)
        )
    )
    statuses = Counter(x.status_code for x in responses)
    assert statuses == {200: FUNDED_FOR, 409: PARALLEL - FUNDED_FOR}, (
        statuses,
        [x.text for x in responses if x.status_code not in (200, 409)][:3],
    )
    assert all(
        x.json() == {"errorCode": "FUNDS_INSUFFICIENT"} for x in responses if x.status_code == 409
    )
    held = [x.json()["id"] for x in responses if x.status_code == 200]
    assert all(x.json()["state"] == "PENDING" for x in responses if x.status_code == 200)
    funds = (AMOUNT + FEE) * FUNDED_FOR
    assert await balances(first, sender, a) == (0, funds)
    postings = await account_postings(db, a, moved_only=False)
    assert all(av >= 0 and ac >= 0 for _, _, _, av, ac in postings), postings

    # At once: 5 of the held sends verified (SMS codes are rate-limited per user), and the
    # other 25 rejected by the simulator, so holds are paid out and given back side by side.
    async def confirm(i: int, send_id: str) -> None:
        c, h = clients[i % len(clients)], _as(p, tokens[i % SESSIONS])
        otp = f"/multi/sends/{send_id}/challenges/otp/SMS"
        res = await c.post(otp, headers=h)
        assert res.status_code == 204, res.text
        res = await c.post(f"{otp}/verify", headers=h, json={"verificationCode": CODE})
        assert res.status_code == 204, res.text

    async def reject(i: int, send_id: str) -> None:
        res = await clients[i % len(clients)].post(
            f"/simulate/api/sends/{send_id}/reject", headers={"programme-key": p.api_key}
        )
        assert res.json() == {"code": "COMPLETED"}, res.text

    paid = CONFIRMED * (AMOUNT + FEE)
    await asyncio.gather(
        *(confirm(i, s) for i, s in enumerate(held[:CONFIRMED])),
        *(reject(i, s) for i, s in enumerate(held[CONFIRMED:])),
    )
    assert await balances(first, sender, a) == (funds - paid, funds - paid)
    assert await balances(first, receiver, r) == (AMOUNT * CONFIRMED,) * 2
    assert await revenue(db, p) == FEE * CONFIRMED
    v = await clients[-1].get(f"{PORTAL}/{p.id}/ledger/verify", headers=ADMIN)
    assert v.json() == {"ok": True, "violations": []}


async def test_hundred_sends_on_funds_for_thirty(client, programme, container, database_url):
    await hundred_sends([client], container.db, await programme())
    await assert_ledger_verify_ok(database_url)


async def test_hundred_sends_through_two_app_instances(
    client,
    second_client,  # noqa: F811
    programme,
    container,
    database_url,
):
    await hundred_sends([client, second_client], container.db, await programme())
    await assert_ledger_verify_ok(database_url)


# Real server processes, with their background payment steps


@contextlib.asynccontextmanager
async def serving(url: str, tmp_path: Path, count: int) -> AsyncIterator[list[tuple[str, int]]]:
    """`count` `multibank serve` processes on one database, stepping payments every 0.1 s;
    yields (base URL, pid) of each. Processes still running at the end are stopped."""
    env = {
        **_env(url),
        "MULTIBANK_ADMIN_TOKEN": ADMIN_TOKEN,
        "MULTIBANK_PAYMENTS_POLL_SECONDS": "0.1",
    }
    procs: list[tuple[asyncio.subprocess.Process, str]] = []
    try:
        for _ in range(count):
            procs.append(await _start(env, tmp_path))
        yield [(base, proc.pid) for proc, base in procs]
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


async def _start(env: dict[str, str], tmp_path: Path) -> tuple[asyncio.subprocess.Process, str]:
    port = _free_port()
    out = tmp_path / f"serve{port}.out"
    with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            str(MULTIBANK), "serve", "--port", str(port), env=env, stdout=stdout, stderr=stderr
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(timeout=2) as http:
        while True:
            assert proc.returncode is None, out.with_suffix(".err").read_text(errors="replace")
            with contextlib.suppress(httpx.TransportError):
                if (await http.get(f"{base}/readyz")).status_code == 200:
                    return proc, base
            assert time.monotonic() < deadline, "serve not ready within 60 s"
            await asyncio.sleep(0.2)


async def _wire_customer(http: httpx.AsyncClient, p: Prog, funds: int) -> tuple[Identity, str]:
    ident = await verified(http, p, "corporates")
    acc = (await open_account(http, ident, "EUR"))["id"]
    r = await http.post(f"/multi/managed_accounts/{acc}/iban", headers=ident.headers)
    assert r.status_code == 200, r.text
    sim = {"programme-key": p.api_key}
    if r.json()["state"] != "ALLOCATED":
        r = await http.post(f"/simulate/api/managed_accounts/{acc}/iban/allocate", headers=sim)
        assert r.status_code == 204, r.text
    r = await http.post(
        f"/simulate/api/accounts/{acc}/deposit",
        headers=sim,
        json={"depositAmount": {"currency": "EUR", "amount": funds}},
    )
    assert r.json() == {"code": "COMPLETED"}, r.text
    return ident, acc


def _owt(p: Prog, acc: str, amount: int) -> dict[str, object]:
    return {
        "profileId": p.profiles["outgoingWireTransfers"],
        "sourceInstrument": {"type": "managed_accounts", "id": acc},
        "transferAmount": {"currency": "EUR", "amount": amount},
        "description": "Invoice",
        "destinationBeneficiary": {
            "name": "Ada Lovelace",
            "bankAccountDetails": {
                "iban": "DE89370400440532013000",
                "bankIdentifierCode": "COBADEFFXXX",
            },
        },
    }


async def _until(
    http: httpx.AsyncClient, ident: Identity, ids: Sequence[str], wanted: str, seconds: float
) -> None:
    deadline = time.monotonic() + seconds
    while True:
        states = []
        for owt_id in ids:
            r = await http.get(f"/multi/outgoing_wire_transfers/{owt_id}", headers=ident.headers)
            assert r.status_code == 200, r.text
            states.append(r.json()["state"])
        if all(s == wanted for s in states):
            return
        assert time.monotonic() < deadline, Counter(states)
        await asyncio.sleep(0.3)


async def test_background_steps_with_two_processes_happen_once(tmp_path):
    count, amount = 20, 5_000
    async with fresh_database(tmp_path) as url, serving(url, tmp_path, 2) as servers:
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(httpx.AsyncClient(base_url=b, timeout=60))
                for b, _ in servers
            ]
            p = await new_programme(clients[0], ADMIN)
            await _patch(
                clients[0],
                f"{p.id}/settings",
                {"owtScaRequired": False, "owtProcessingDelaySeconds": 1},
            )
            ident, acc = await _wire_customer(clients[0], p, count * (amount + 100))
            responses = await asyncio.gather(
                *(
                    clients[i % 2].post(
                        "/multi/outgoing_wire_transfers",
                        headers=ident.headers,
                        json=_owt(p, acc, amount),
                    )
                    for i in range(count)
                )
            )
            assert all(r.status_code == 200 for r in responses), [r.text for r in responses][:2]
            ids = [r.json()["id"] for r in responses]
            await _until(clients[1], ident, ids, "COMPLETED", 60)
            assert await balances(clients[0], ident, acc) == (0, 0)
        db = Database(url)
        try:
            assert await revenue(db, p) == 100 * count  # each completion once
        finally:
            await db.dispose()
        await assert_ledger_verify_ok(url)


async def test_kill_minus_nine_between_verify_and_completion(tmp_path):
    async with fresh_database(tmp_path) as url:
        env = {
            **_env(url),
            "MULTIBANK_ADMIN_TOKEN": ADMIN_TOKEN,
            "MULTIBANK_PAYMENTS_POLL_SECONDS": "0.1",
        }
        proc, base = await _start(env, tmp_path)
        try:
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                p = await new_programme(http, ADMIN)
                # The kill lands milliseconds after the verify, well before the completion step.
                await _patch(http, f"{p.id}/settings", {"owtProcessingDelaySeconds": 3})
                ident, acc = await _wire_customer(http, p, 10_000)
                await enrol_sms(http, ident.headers)
                r = await http.post(
                    "/multi/outgoing_wire_transfers",
                    headers=ident.headers,
                    json=_owt(p, acc, 5_000),
                )
                assert r.json()["state"] == "PENDING_CHALLENGE", r.text
                owt_id = r.json()["id"]
                otp = f"/multi/outgoing_wire_transfers/{owt_id}/challenges/otp/SMS"
                assert (await http.post(otp, headers=ident.headers)).status_code == 204
                r = await http.post(
                    f"{otp}/verify", headers=ident.headers, json={"verificationCode": CODE}
                )
                assert r.status_code == 204, r.text
                os.kill(proc.pid, signal.SIGKILL)
        finally:
            if proc.returncode is None:
                os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()
        # The server is gone with the transfer submitted and its money held.
        proc, base = await _start(env, tmp_path)
        try:
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                # The restarted process's own background steps finish it.
                await _until(http, ident, [owt_id], "COMPLETED", 30)
                assert await balances(http, ident, acc) == (4_900, 4_900)
        finally:
            proc.terminate()
            await proc.wait()
        await assert_ledger_verify_ok(url)


async def test_one_ref_twenty_times_is_one_send(client, programme, container):
    p = await programme()
    sender, a, body = await _a_send(client, p)
    tokens = await _sessions(client, p, sender)
    ref = f"same-{os.urandom(6).hex()}"
    responses = await asyncio.gather(
        *(
            client.post(
                "/multi/sends",
                headers={**_as(p, tokens[i % SESSIONS]), "idempotency-ref": ref},
                json=body,
            )
            for i in range(20)
        )
    )
    replies = {(x.status_code, x.content) for x in responses}
    assert len(replies) == 1, Counter((x.status_code, x.text) for x in responses)
    assert responses[0].status_code == 200
    assert await balances(client, sender, a) == (100_000 - AMOUNT, 100_000)  # one hold
    listed = await client.get("/multi/sends", headers=sender.headers)
    assert listed.json()["count"] == 1


async def test_ledger_verify_names_a_hold_that_differs(client, programme, container):
    p = await programme()
    sender, a, body = await _a_send(client, p)
    res = await client.post("/multi/sends", headers=sender.headers, json=body)
    send_id = int(res.json()["id"])
    verify = f"{PORTAL}/{p.id}/ledger/verify"
    assert (await client.get(verify, headers=ADMIN)).json() == {"ok": True, "violations": []}

    async def shift(delta: int) -> None:  # behind the ledger's back
        async with container.db.transaction() as s:
            await s.execute(
                update(Payment)
                .where(Payment.id == send_id)
                .values(reserved=Payment.reserved + delta)
            )

    await shift(1)
    try:
        found = (await client.get(verify, headers=ADMIN)).json()
        assert found["ok"] is False
        whats = {v["what"] for v in found["violations"]}
        assert whats == {
            "reserved amounts differ from the open reservations",
            "held amount differs from the account's open reservations",
        }, found
        assert any(a in v["detail"] for v in found["violations"])
    finally:
        await shift(-1)
    assert (await client.get(verify, headers=ADMIN)).json() == {"ok": True, "violations": []}


@pytest.mark.skipif(DB_KIND != "postgres", reason="PostgreSQL's READ COMMITTED statements")
async def test_ledger_verify_reads_one_snapshot_while_money_moves(client, programme, container):
    """A hold grows by one cent, consistently (the payment, a RESERVED account, the paying
    account), committed by another connection between two statements of `verify`: verify must
    read the ledger before it or after it, never half of each, and so find nothing. (Under READ
    COMMITTED it compared the RESERVED accounts before with the payments after.)"""
    p = await programme()
    sender, _, body = await _a_send(client, p)
    sent = await client.post("/multi/sends", headers=sender.headers, json=body)
    send_id = int(sent.json()["id"])
    async with container.db.transaction() as s:
        payment = (await s.execute(select(Payment).where(Payment.id == send_id))).scalar_one()
        reserved_id = (
            await s.execute(
                select(LedgerAccount.id).where(
                    LedgerAccount.kind == RESERVED,
                    LedgerAccount.programme_id == payment.programme_id,
                    LedgerAccount.currency == "EUR",
                )
            )
        ).scalar_one()

    async def hold_more(delta: int) -> None:  # behind the ledger's back, but consistently
        async with container.db.transaction() as s:
            await s.execute(
                update(Payment)
                .where(Payment.id == send_id)
                .values(reserved=Payment.reserved + delta)
            )
            for account_id, change in ((reserved_id, delta), (payment.source_id, -delta)):
                await s.execute(
                    update(LedgerAccount)
                    .where(LedgerAccount.id == account_id)
                    .values(available=LedgerAccount.available + change)
                )

    armed: list[bool] = []  # one per verify to come: the hold grows once in each
    moved: list[bool] = []

    def between(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        held = "ledger_accounts.kind" in statement and "sum(ledger_accounts.available)" in statement
        if held and len(moved) < len(armed):
            moved.append(True)
            await_(hold_more(1))  # inside verify's greenlet: committed before its next statement

    engine = container.db.engine.sync_engine
    event.listen(engine, "after_cursor_execute", between)
    undone: list[bool] = []

    async def undo() -> None:  # what the last verify saw half-way goes, before the next one
        while len(undone) < len(moved):
            await hold_more(-1)
            undone.append(True)

    try:
        armed.append(True)  # the operator API's verify
        r = await client.get(f"{PORTAL}/{p.id}/ledger/verify", headers=ADMIN)
        await undo()
        armed.append(True)  # as `multibank ledger verify` runs it
        async with container.db.transaction() as session:
            found = await verify(session, payment.programme_id)
    finally:
        event.remove(engine, "after_cursor_execute", between)
        await undo()
    assert len(moved) == 2, "verify's statement on the RESERVED accounts was not seen"
    assert r.status_code == 200 and r.json() == {"ok": True, "violations": []}, r.text
    assert found == [], found
