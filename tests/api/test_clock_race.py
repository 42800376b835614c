"""The simulator's clock advance beside SCA verifies, on two `multibank serve` processes sharing
one database (issue 32 §2.1).

Each round holds sends and outgoing wire transfers waiting for SCA, starts their SMS challenges,
and then, at once, verifies every one of them through one process while the other advances the
programme clock past the challenges' 5 minutes (and on, so the wire transfers verified in time
move on). Whichever comes first wins each payment: a verify completes a send or submits a wire
transfer, or the advance ends the payment and the verify answers 409 VERIFICATION_CODE_EXPIRED.
No answer is ever a 500: a request that meets a deadlock is run again, or answers 503 with
Retry-After. Afterwards every payment is in a final state, nothing stays held, each balance is
what the payments that completed make it, and `multibank ledger verify` is clean.

(Before, the advance took every due step in its own one transaction, holding each payment's row
and then the ledger's while it waited for the next payment's row, which a verify held while it
waited for the ledger's: PostgreSQL ended one of them, and the request answered 500.)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from pathlib import Path

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.api.payments_support import balances, enrol_sms
from tests.api.test_ledger_concurrency import (
    _env,
    assert_ledger_verify_ok,
    fresh_database,
    new_programme,
)
from tests.api.test_payment_concurrency import _owt, _patch, _start, _wire_customer
from tests.conftest import ADMIN_TOKEN, DB_KIND, Prog
from tests.factories import CODE, Identity, open_account, verified

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
ROUNDS, PER_KIND = 6, 3  # per customer and round: 3 wire transfers and 3 sends
CUSTOMERS = 2
AMOUNT, OWT_FEE, FUNDS = 4_000, 100, 1_000_000  # above the low-value exemption: SCA applies
FINAL = {"sends": {"COMPLETED", "REJECTED"}, "outgoing_wire_transfers": {"COMPLETED", "FAILED"}}
# The 409s the verify operation documents that this race can give: the advance ended the payment.
RACE_CONFLICTS = {"VERIFICATION_CODE_EXPIRED"}


def _answer(r: httpx.Response) -> str:
    """A status as the figures count it: 409s by their errorCode."""
    if r.status_code == 409:
        return f"409 {r.json().get('errorCode')}"
    return str(r.status_code)


def _acceptable(r: httpx.Response, ok: int) -> bool:
    if r.status_code == ok:
        return True
    if r.status_code == 503:
        return bool(r.headers.get("retry-after"))
    return r.status_code == 409 and r.json().get("errorCode") in RACE_CONFLICTS


async def _held(
    http: httpx.AsyncClient, p: Prog, ident: Identity, acc: str, receiver: str
) -> list[tuple[str, str]]:
    """PER_KIND sends and PER_KIND wire transfers from `acc`, each waiting for SCA with its SMS
    challenge started: (kind, id)."""
    send = {
        "profileId": p.profiles["sends"],
        "source": {"type": "managed_accounts", "id": acc},
        "destination": {"type": "managed_accounts", "id": receiver},
        "destinationAmount": {"currency": "EUR", "amount": AMOUNT},
    }
    made: list[tuple[str, str]] = []
    for kind, body in (("outgoing_wire_transfers", _owt(p, acc, AMOUNT)), ("sends", send)):
        for _ in range(PER_KIND):
            r = await http.post(f"/multi/{kind}", headers=ident.headers, json=body)
            assert r.status_code == 200, r.text
            made.append((kind, r.json()["id"]))
    for kind, pid in made:
        r = await http.post(f"/multi/{kind}/{pid}/challenges/otp/SMS", headers=ident.headers)
        if r.status_code != 204:
            g = await http.get(f"/multi/{kind}/{pid}", headers=ident.headers)
            raise AssertionError((kind, r.text, g.text))
    return made


async def _deadlocks(url: str) -> int:
    """PostgreSQL's count of deadlocks it broke in this database (`pg_stat_database`)."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            found = await conn.execute(
                text("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
            )
            return int(found.scalar_one())
    finally:
        await engine.dispose()


def _logged(tmp_path: Path, marker: str) -> int:
    return sum(f.read_text(errors="replace").count(marker) for f in tmp_path.glob("serve*.err"))


async def test_clock_advance_beside_sca_verifies_on_two_processes(tmp_path: Path) -> None:
    started = time.monotonic()
    env = {
        **_env(""),
        "MULTIBANK_ADMIN_TOKEN": ADMIN_TOKEN,
        "MULTIBANK_PAYMENTS_POLL_SECONDS": "0.1",
        # Sessions outlive the rounds' advances, and codes are sent and checked as often as the
        # rounds need: what races is the payments' rows, not the customers' sessions.
        "MULTIBANK_SESSION_IDLE_SECONDS": str(30 * 86400),
        "MULTIBANK_SESSION_ABSOLUTE_SECONDS": str(30 * 86400),
        "MULTIBANK_RATE_LIMIT_CODE_SEND": "100000/minute",
        "MULTIBANK_RATE_LIMIT_CODE_VERIFY": "100000/minute",
    }
    answers: dict[str, Counter[str]] = {"verify": Counter(), "advance": Counter()}
    unacceptable: list[str] = []
    payments: list[tuple[int, str, str]] = []  # (customer, kind, id)
    async with fresh_database(tmp_path) as url:
        env["MULTIBANK_DATABASE_URL"] = url
        procs: list[asyncio.subprocess.Process] = []
        try:
            begun = await asyncio.gather(
                *(_start(env, tmp_path) for _ in range(2)), return_exceptions=True
            )
            procs.extend(one[0] for one in begun if isinstance(one, tuple))
            for one in begun:
                if isinstance(one, BaseException):
                    raise one
            bases = [one[1] for one in begun if isinstance(one, tuple)]
            async with contextlib.AsyncExitStack() as stack:
                a, b = [
                    await stack.enter_async_context(httpx.AsyncClient(base_url=u, timeout=60))
                    for u in bases
                ]
                p = await new_programme(a, ADMIN)
                await _patch(a, f"{p.id}/settings", {"owtProcessingDelaySeconds": 1})
                customers = [await _wire_customer(a, p, FUNDS) for _ in range(CUSTOMERS)]
                for ident, _ in customers:
                    await enrol_sms(a, ident.headers)
                receiver = await verified(a, p, "consumers")
                to = (await open_account(a, receiver, "EUR"))["id"]
                sim = {"programme-key": p.api_key}

                async def advance(seconds: int) -> None:
                    r = await b.post(
                        "/simulate/api/clock/advance", headers=sim, json={"seconds": seconds}
                    )
                    answers["advance"][_answer(r)] += 1
                    if not _acceptable(r, 200):
                        unacceptable.append(f"advance: {r.status_code} {r.text}")

                async def verify(ident: Identity, kind: str, pid: str) -> None:
                    r = await a.post(
                        f"/multi/{kind}/{pid}/challenges/otp/SMS/verify",
                        headers=ident.headers,
                        json={"verificationCode": CODE},
                    )
                    answers["verify"][_answer(r)] += 1
                    if not _acceptable(r, 204):
                        unacceptable.append(f"verify: {r.status_code} {r.text}")

                async def advances() -> None:
                    await advance(301)  # past every challenge of the round
                    for _ in range(3):  # the wire transfers verified in time move on
                        await advance(1)

                for _ in range(ROUNDS):
                    made = await asyncio.gather(
                        *(_held(a, p, ident, acc, to) for ident, acc in customers)
                    )
                    held = []
                    for i, ((ident, _), theirs) in enumerate(zip(customers, made, strict=True)):
                        for kind, pid in theirs:
                            held.append((i, ident, kind, pid))
                            payments.append((i, kind, pid))
                    # The sends, due last, are verified first: the advance, which ends payments in
                    # the order they are due, meets them while their verifies hold them.
                    await asyncio.gather(
                        *(verify(ident, kind, pid) for _, ident, kind, pid in reversed(held)),
                        advances(),
                    )
                    # The other process sees the new time within half a second (decision 0013):
                    # a payment it made sooner would be due already.
                    await asyncio.sleep(0.6)

                # Whatever is still under way ends (an advance that answered 503 moved nothing):
                # by this advance, or by the background steps of both processes.
                await advance(301)
                states = await _final_states(a, customers, payments)
                spent = [0] * CUSTOMERS
                received = 0
                for (i, kind, _), state in zip(payments, states, strict=True):
                    if state == "COMPLETED":
                        spent[i] += AMOUNT + (OWT_FEE if kind == "outgoing_wire_transfers" else 0)
                        received += AMOUNT if kind == "sends" else 0
                for i, (ident, acc) in enumerate(customers):
                    # Nothing held, and each balance is what the completed payments made it.
                    assert await balances(a, ident, acc) == (FUNDS - spent[i],) * 2
                assert await balances(b, receiver, to) == (received,) * 2
                outcome = Counter(f"{k} {s}" for (_, k, _), s in zip(payments, states, strict=True))
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.terminate()
            for proc in procs:
                try:
                    await asyncio.wait_for(proc.wait(), 15)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
        # Counted once the servers have ended, when their backends have reported.
        deadlocks = await _deadlocks(url) if DB_KIND == "postgres" else 0
        await assert_ledger_verify_ok(url)
    figures = (
        f"{DB_KIND}: {ROUNDS} rounds, {len(payments)} payments; verify {dict(answers['verify'])}; "
        f"advance {dict(answers['advance'])}; outcome {dict(outcome)}; deadlocks broken by "
        f"PostgreSQL {deadlocks}, retried {_logged(tmp_path, 'ran again')}; "
        f"{time.monotonic() - started:.1f} s"
    )
    print(figures)
    assert not unacceptable, (figures, unacceptable[:5])
    assert not _logged(tmp_path, '"level": "ERROR"'), figures


async def _final_states(
    http: httpx.AsyncClient,
    customers: list[tuple[Identity, str]],
    payments: list[tuple[int, str, str]],
) -> list[str]:
    deadline = time.monotonic() + 20
    while True:
        states = []
        for i, kind, pid in payments:
            r = await http.get(f"/multi/{kind}/{pid}", headers=customers[i][0].headers)
            assert r.status_code == 200, r.text
            states.append(r.json()["state"])
        if all(s in FINAL[k] for (_, k, _), s in zip(payments, states, strict=True)):
            return states
        assert time.monotonic() < deadline, Counter(states)
        await asyncio.sleep(0.3)
