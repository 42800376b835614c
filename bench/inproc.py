"""In-process CPU per request: drives the ASGI application directly (no sockets, no uvicorn) on
one authenticated read, to see where a request's CPU goes while changing the request path.
Not a substitute for the wrk figures; a quick loop for profiling (e.g. under py-spy or cProfile).

Usage: .venv/bin/python bench/inproc.py [--requests 3000] [--database-url URL]
       [--path acct|corp|list|health|fee|transfer|ltransfer|bsend|login|purchase]
       [--profile FILE]
       [--statements]
       [--spread] [--files]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from multibank.app import build_container, create_app, startup
from multibank.cli import ensure_default_programme
from multibank.kernel.migrate import upgrade
from multibank.settings import Settings

sys.path.insert(0, str(Path(__file__).parent))
from common import corporate_signup

PACKAGE = str(Path(__file__).resolve().parents[1] / "src" / "multibank")
DENIED = -200  # a purchase answered 200 whose code is not APPROVED
NAMES = {DENIED: "200 not APPROVED"}


async def _trusted_beneficiary(
    c: httpx.AsyncClient, key: str, profiles: dict[str, Any], h: dict[str, str]
) -> str:
    """Another corporate's account, made an ACTIVE trusted beneficiary of the caller (`h`)
    through the 3.63 line: its batch confirmed by the caller's SMS factor (sandbox code)."""
    email = f"p{secrets.token_hex(4)}@example.com"
    payee = (
        await c.post(
            "/multi/corporates",
            headers={"api-key": key},
            json=corporate_signup(profiles["corporate"], email),
        )
    ).json()
    await c.post(
        f"/simulate/api/corporates/{payee['id']['id']}/verify", headers={"programme-key": key}
    )
    uid = payee["rootUser"]["id"]["id"]
    token = (
        await c.post(
            f"/multi/passwords/{uid}/create",
            headers={"api-key": key},
            json={"password": {"value": "Bench-1234!"}},
        )
    ).json()["token"]
    theirs = (
        await c.post(
            "/multi/managed_accounts",
            headers={"api-key": key, "authorization": f"Bearer {token}"},
            json={
                "profileId": profiles["corporateManagedAccount"],
                "friendlyName": "payee",
                "currency": "EUR",
            },
        )
    ).json()["id"]
    otp = "/multi/authentication_factors/otp/SMS"
    await c.post(otp, headers=h)
    await c.post(f"{otp}/verify", headers=h, json={"verificationCode": "123456"})
    made = (
        await c.post(
            "/3.63.4/multi/beneficiaries",
            headers=h,
            json={
                "beneficiaries": [
                    {
                        "trustLevel": "TRUSTED",
                        "beneficiaryInformation": {"businessName": payee["company"]["name"]},
                        "beneficiaryDetails": {
                            "instrument": {"type": "managed_accounts", "id": theirs}
                        },
                    }
                ]
            },
        )
    ).json()
    batch = made["operationBatchId"]["batchId"]
    challenge = f"/3.63.4/multi/beneficiaries/batch/{batch}/challenges/otp/SMS"
    await c.post(challenge, headers=h)
    await c.post(f"{challenge}/verify", headers=h, json={"verificationCode": "123456"})
    listed = (
        await c.get("/3.63.4/multi/beneficiaries", headers=h, params={"batchId": batch})
    ).json()["beneficiaries"]
    if [b["state"] for b in listed] != ["ACTIVE"]:
        sys.exit(f"the beneficiary the run pays is not ACTIVE: {listed}")
    return str(listed[0]["id"])


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--path", default="acct")
    ap.add_argument("--profile", default="")
    ap.add_argument(
        "--statements", action="store_true", help="print the SQL statements of one request"
    )
    ap.add_argument(
        "--spread",
        action="store_true",
        help="also time each request alone and print the spread (what a p99 is made of)",
    )
    ap.add_argument(
        "--files",
        action="store_true",
        help="print the files of src/multibank one request runs code of (issue 42's count)",
    )
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    url = args.database_url or f"sqlite+aiosqlite:///{tmp}/inproc.db"
    unlimited = "1000000/minute"  # the login and IP limits would stop a login run at once
    settings = Settings(
        database_url=url,
        log_level="WARNING",
        outbox_poll_seconds=0,
        rate_limit_login=unlimited,
        rate_limit_ip=unlimited,
        rate_limit_api_key=unlimited,
    )
    container = build_container(settings)
    await upgrade(container.db)
    description, _ = await ensure_default_programme(container.db)
    await startup(container)
    app = create_app(container=container)
    key = description.apiKey or ""
    profiles = description.profiles.model_dump()
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            h = {"api-key": key}
            r = await c.post(
                "/multi/corporates",
                headers=h,
                json=corporate_signup(
                    profiles["corporate"], f"b{secrets.token_hex(4)}@example.com"
                ),
            )
            created = r.json()
            await c.post(
                f"/simulate/api/corporates/{created['id']['id']}/verify",
                headers={"programme-key": key},
            )
            uid = created["rootUser"]["id"]["id"]
            tok = (
                await c.post(
                    f"/multi/passwords/{uid}/create",
                    headers=h,
                    json={"password": {"value": "Bench-1234!"}},
                )
            ).json()["token"]
            h["authorization"] = f"Bearer {tok}"
            acc = None
            accounts = []
            for i in range(10):
                acc = (
                    await c.post(
                        "/multi/managed_accounts",
                        headers=h,
                        json={
                            "profileId": profiles["corporateManagedAccount"],
                            "friendlyName": f"b{i}",
                            "currency": "EUR",
                        },
                    )
                ).json()
                accounts.append(acc["id"])
            method, body = "GET", b""
            card: dict[str, Any] = {}
            if args.path in ("fee", "transfer", "ltransfer", "bsend", "purchase"):
                sim = {"programme-key": key}
                iban = (await c.post(f"/multi/managed_accounts/{acc['id']}/iban", headers=h)).json()
                if iban["state"] == "PENDING_ALLOCATION":
                    await c.post(
                        f"/simulate/api/managed_accounts/{acc['id']}/iban/allocate", headers=sim
                    )
                # One deposit within the scheme limit of a payment (SEPA: 99,999,999,999; a
                # larger one is refused, DENIED_OTHER, and every charge then answers 409): 10**10
                # pays for 10**8 fees, transfers or purchases of 100, far more than a run sends.
                funds = 10**10
                deposited = (
                    await c.post(
                        f"/simulate/api/accounts/{acc['id']}/deposit",
                        headers=sim,
                        json={"depositAmount": {"currency": "EUR", "amount": funds}},
                    )
                ).json()
                if deposited != {"code": "COMPLETED"}:
                    sys.exit(f"the deposit that funds the run was refused: {deposited}")
                method = "POST"
                if args.path == "purchase":  # a debit card on the funded account (issue 34)
                    card = (
                        await c.post(
                            "/multi/managed_cards",
                            headers=h,
                            json={
                                "profileId": profiles["corporateDebitManagedCard"],
                                "friendlyName": "Bench",
                                "nameOnCard": "Bench Card",
                                "cardholderMobileNumber": "+35699123456",
                                "billingAddress": {
                                    "addressLine1": "1 Bench Street",
                                    "city": "Valletta",
                                    "postCode": "VLT 1000",
                                    "country": "MT",
                                },
                                "mode": "DEBIT_MODE",
                                "parentManagedAccountId": acc["id"],
                            },
                        )
                    ).json()
                    limit = {"value": {"currency": "EUR", "amount": 10**12}, "interval": "ALWAYS"}
                    await c.post(
                        f"/multi/managed_cards/{card['id']}/spend_rules",
                        headers=h,
                        json={"spendLimit": [limit]},
                    )
                    h = {"programme-key": key}
                if args.path == "bsend":  # a send to a trusted beneficiary (issue 43 §3)
                    beneficiary = await _trusted_beneficiary(c, key, profiles, h)
                body = json.dumps(
                    {
                        "profileId": profiles["sends"],
                        "source": {"type": "managed_accounts", "id": acc["id"]},
                        "destination": {"beneficiaryId": beneficiary},
                        "destinationAmount": {"currency": "EUR", "amount": 100},
                    }
                    if args.path == "bsend"
                    else {
                        "merchantName": "Bench Merchant",
                        "transactionAmount": {"currency": "EUR", "amount": 100},
                    }
                    if args.path == "purchase"
                    else {
                        "feeType": "ADMIN_FEE",
                        "source": {"type": "managed_accounts", "id": acc["id"]},
                    }
                    if args.path == "fee"
                    else {
                        "profileId": profiles["transfers"],
                        "source": {"type": "managed_accounts", "id": acc["id"]},
                        "destination": {"type": "managed_accounts", "id": accounts[0]},
                        "destinationAmount": {"currency": "EUR", "amount": 100},
                    }
                ).encode()
            if args.path == "login":
                me = (await c.get("/multi/corporates", headers=h)).json()
                method = "POST"
                body = json.dumps(
                    {"email": me["rootUser"]["email"], "password": {"value": "Bench-1234!"}}
                ).encode()
                del h["authorization"]
        assert acc is not None
        path, query = {
            "acct": (f"/multi/managed_accounts/{acc['id']}", b""),
            "corp": ("/multi/corporates", b""),
            "list": ("/multi/managed_accounts", b"limit=10"),
            "health": ("/healthz", b""),
            "fee": ("/multi/corporates/fees/charge", b""),
            "transfer": ("/multi/transfers", b""),
            "bsend": ("/3.63.4/multi/sends", b""),
            "ltransfer": ("/3.63.4/multi/transfers", b""),
            "login": ("/multi/login_with_password", b""),
            "purchase": (f"/simulate/api/cards/{card['id']}/purchase" if card else "", b""),
        }[args.path]
        headers = [(k.encode(), v.encode()) for k, v in h.items()] + [(b"host", b"t")]
        if method == "POST":
            headers.append((b"content-type", b"application/json"))
        refs = iter(range(10**9))
        status: list[int] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            # A refused purchase answers 200 too: its code says so (one body per answer).
            elif (
                args.path == "purchase"
                and message.get("body")
                and b'"APPROVED"' not in message["body"]
                and status[-1] == 200
            ):
                status[-1] = DENIED  # counted below as not the answer measured

        def scope() -> dict[str, Any]:
            return {
                "type": "http",
                "asgi": {"version": "3.0"},
                "http_version": "1.1",
                "method": method,
                "scheme": "http",
                "path": path,
                "raw_path": path.encode(),
                "root_path": "",
                "query_string": query,
                "headers": headers
                # As the wrk benches send them: fee and payment calls with a ref, logins without.
                + (
                    [(b"idempotency-ref", b"r%d" % next(refs))]
                    if method == "POST" and args.path not in ("login", "purchase")
                    else []
                ),
                "client": ("127.0.0.1", 1),
                "server": ("127.0.0.1", 80),
            }

        for _ in range(200):
            await app(scope(), receive, send)
        if args.statements:
            from sqlalchemy import event

            seen: list[str] = []

            last: list[Any] = [None]

            def record(*a: Any) -> None:
                # PostgreSQL's read engine is an option view of the writer: both listeners fire
                # for one statement, with the same context, SQL and parameters objects.
                key = (id(a[4]), id(a[2]), id(a[3]))
                if key == last[0]:
                    return
                last[0] = key
                seen.append(" ".join(str(a[2]).split())[:160])

            engines = {container.db.engine.sync_engine, container.db.read_engine.sync_engine}
            for engine in engines:
                event.listen(engine, "before_cursor_execute", record)
            await app(scope(), receive, send)
            for engine in engines:
                event.remove(engine, "before_cursor_execute", record)
            print(f"{len(seen)} statements:")
            for line in seen:
                print("  ", line)
        if args.files:
            package = PACKAGE
            files: set[str] = set()

            def called(frame: Any, event: str, arg: Any) -> None:
                if event == "call" and frame.f_code.co_filename.startswith(package):
                    files.add(frame.f_code.co_filename[len(package) + 1 :])

            sys.setprofile(called)
            await app(scope(), receive, send)
            sys.setprofile(None)
            print(f"{len(files)} files of src/multibank run:")
            for name in sorted(files):
                print("  ", name)
        profiler = None
        if args.profile:
            import cProfile

            profiler = cProfile.Profile(time.process_time)  # CPU, not waits
            profiler.enable()
        # The best of 5 rounds: the machine's noise only ever adds.
        rounds = []
        loop_rounds = []
        for _ in range(5):
            t0 = time.process_time()
            l0 = time.thread_time()
            for _ in range(args.requests // 5):
                await app(scope(), receive, send)
            rounds.append(time.process_time() - t0)
            loop_rounds.append(time.thread_time() - l0)
        if args.spread:
            times = []
            for _ in range(args.requests):
                started = time.perf_counter()
                await app(scope(), receive, send)
                times.append(time.perf_counter() - started)
            times.sort()
            at = [1e6 * times[int(len(times) * q)] for q in (0.5, 0.9, 0.99, 0.999)]
            print(
                f"{args.path}: wall µs per request p50 {at[0]:.0f} p90 {at[1]:.0f} "
                f"p99 {at[2]:.0f} p99.9 {at[3]:.0f} max {1e6 * times[-1]:.0f}; "
                f"over 1 ms: {sum(1 for t in times if t > 0.001)}"
            )
        cpu = min(rounds) * 5
        loop_cpu = min(loop_rounds) * 5
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)
        bad = collections.Counter(s for s in status if s != 200)
        print(
            f"{args.path}: {1e6 * cpu / args.requests:.0f} µs CPU per request "
            f"({args.requests} requests, non-200: {sum(bad.values())}); "
            f"on the event loop's thread: {1e6 * loop_cpu / args.requests:.0f} µs"
        )
        if bad:  # the CPU of refused requests is not the figure asked for
            codes = ", ".join(f"{NAMES.get(code, code)}: {n}" for code, n in sorted(bad.items()))
            sys.exit(
                f"WRONG ANSWERS: {sum(bad.values())} of {len(status)} requests did not answer 200 "
                f"({codes}): the figure above is not the path's"
            )


if __name__ == "__main__":
    asyncio.run(main())
