"""Webhooks (issue 13): what recording an event adds to the API call that causes it, and how
many events a server process delivers per second to a local receiver.

Rows, all against one `multibank serve` (one worker) and the bare FastAPI route, in the same run:
- `PATCH /multi/managed_accounts/{id}` (each emits a `managed_accounts` UPDATED event) spread over
  50 accounts, with no webhook URL (nothing is recorded);
- the same with the programme's webhook URL set to a receiver in this process: each call records
  its event, which the server's delivery loop sends meanwhile (HMAC-signed, one HTTP POST each);
- the delivery rate: events delivered per second from the start of that row until the last one
  arrived (the receiver answers 204 at once; events of one account go one at a time, in order).

Usage: .venv/bin/python bench/bench_webhooks.py [--seconds 10] [--connections 16]
       [--database-url postgresql://...] [--no-delivery] [--port-base N]
       (default: a fresh SQLite file; the receiver takes the port after the servers')

Only 200 answers count (any other fails the run at its end); each row carries the server's CPU
per answer, the delivery loop's work included.

With --no-delivery the server records the events but sends none: the second row then shows what
recording an event costs the call alone.

With --backlog N (issue 40 §6) the bench measures delivery alone: N events already pending over
--resources resources (after --history events already delivered) in a fresh database, drained by
--workers `multibank webhooks deliver` processes to a receiver answering 204 at once; deliveries/s
per worker from the first arrival to the last, the workers' CPU per delivery (/proc), and whether
each resource's events arrived in order, each once. --rounds repeats it, a fresh database each.

    .venv/bin/python bench/bench_webhooks.py --backlog 10000 --resources 50 [--workers 1]
        [--history 0] [--rounds 3] [--database-url postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench_fee import ADMIN_TOKEN, funded_corporate
from bench_payments import default_programme, settings
from common import (
    VENV_BIN,
    Figures,
    add_port_base,
    bare_server,
    call,
    check_answers,
    multibank_server,
    next_port,
    report,
    use_port_base,
    wrk,
)
from sqlalchemy import insert, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from multibank.kernel.clock import Clock
from multibank.kernel.db import Database, normalise_url
from multibank.kernel.ids import new_id
from multibank.kernel.migrate import upgrade
from multibank.programmes.schemas import ProgrammeCreate
from multibank.programmes.service import create_programme
from multibank.webhooks.models import DELIVERED, PENDING, WebhookEvent

ACCOUNTS = 50
LUA = """
local counter = 0
local paths = {%(paths)s}
wrk.method = "PATCH"
wrk.headers["Content-Type"] = "application/json"
request = function()
  counter = counter + 1
  local path = paths[(counter %% #paths) + 1]
  return wrk.format(nil, path, nil, '{"tag":"t' .. (counter %% 1000) .. '"}')
end
"""


class Counter:
    def __init__(self) -> None:
        self.count = 0
        self.last = 0.0
        self.refs: set[str] = set()
        self.lock = threading.Lock()


def receiver(counter: Counter, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            with counter.lock:
                counter.count += 1
                counter.refs.add(self.headers.get("call-ref") or "")
                counter.last = time.monotonic()
            self.send_response(204)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def recorded(base: str) -> int:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    pid = default_programme(base)
    out = call("GET", f"{base}/portal/api/programmes/{pid}/webhooks/deliveries?limit=1", admin)
    return int(out["count"])


# The backlog row (issue 40 §6): events already recorded, a worker process draining them.


class Arrivals:
    """What the backlog receiver got: per resource the sequence numbers in arrival order."""

    def __init__(self) -> None:
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.refs: set[str] = set()
        self.seqs: dict[str, list[int]] = {}
        self.lock = threading.Lock()


def fast_receiver(arrivals: Arrivals) -> tuple[str, Callable[[], None]]:
    """A receiver that answers 204 as soon as a request is read (asyncio, HTTP/1.1 keep-alive,
    on a thread of its own): the delivery process, not the receiver, is what is measured."""
    loop = asyncio.new_event_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                fields = dict(
                    (k.strip().lower(), v.strip())
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                )
                body = await reader.readexactly(int(fields.get("content-length", "0")))
                event = json.loads(body)
                with arrivals.lock:
                    now = time.monotonic()
                    if not arrivals.count:
                        arrivals.first = now
                    arrivals.count += 1
                    arrivals.last = now
                    arrivals.refs.add(fields.get("call-ref", ""))
                    arrivals.seqs.setdefault(event["resource"], []).append(event["seq"])
                writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
                if fields.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0, backlog=512))
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def stop() -> None:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)

    return f"http://127.0.0.1:{port}/hooks", stop


async def fresh_database(url: str | None) -> str:
    """A fresh database: a SQLite file in a new folder, or one created on the PostgreSQL
    server of `url` (`drop_database` removes it)."""
    if url is None:
        return f"sqlite+aiosqlite:///{tempfile.mkdtemp()}/hooks.db"
    admin = make_url(normalise_url(url))
    name = f"bench_hooks_{os.getpid()}_{secrets.token_hex(3)}"
    engine = create_async_engine(admin, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        await engine.dispose()
    return admin.set(database=name).render_as_string(hide_password=False)


async def drop_database(url: str) -> None:
    made = make_url(url)
    if made.get_backend_name() == "sqlite":
        shutil.rmtree(Path(made.database or "").parent, ignore_errors=True)
        return
    engine = create_async_engine(made.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{made.database}" WITH (FORCE)'))
    finally:
        await engine.dispose()


async def seed_backlog(url: str, hooks_url: str, events: int, resources: int, history: int) -> int:
    """A sandbox programme whose webhook URL is the receiver; `history` events of its already
    delivered, then `events` pending ones over `resources` resources, in turn (each payload
    carries its resource and its place in it). Answers the programme's id."""
    db = Database(url)
    try:
        await upgrade(db)
        async with db.transaction() as s:
            programme, _ = await create_programme(
                s,
                Clock(),
                ProgrammeCreate(name=f"hooks{secrets.token_hex(4)}", webhookUrl=hooks_url),
            )
        now = Clock().system_ms()

        def row(i: int, state: str) -> dict[str, Any]:
            resource = f"bench:{i % resources}"
            body = {"resource": resource, "seq": i // resources}
            return {
                "id": new_id(),
                "programme_id": programme.id,
                "path": "/managed_accounts/watch",
                "event_type": "managed_accounts.UPDATED",
                "resource": resource,
                "call_ref": secrets.token_hex(16),
                "payload": json.dumps(body, separators=(",", ":")),
                "state": state,
                "attempts": 1 if state == DELIVERED else 0,
                "next_attempt_at": None if state == DELIVERED else now,
                "delivered_at": now if state == DELIVERED else None,
                "created_at": now,
            }

        for state, count in ((DELIVERED, history), (PENDING, events)):
            for start in range(0, count, 2000):
                async with db.transaction() as s:
                    rows = [row(i, state) for i in range(start, min(count, start + 2000))]
                    await s.execute(insert(WebhookEvent), rows)
        return programme.id
    finally:
        await db.dispose()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (/proc/PID/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backlog_run(args: argparse.Namespace) -> bool:
    """One run: a fresh database with the backlog, `--workers` delivery processes started on
    it, timed from the first event that arrives to the last. Answers whether order held."""
    arrivals = Arrivals()
    hooks_url, stop = fast_receiver(arrivals)
    url = asyncio.run(fresh_database(args.database_url))
    try:
        asyncio.run(seed_backlog(url, hooks_url, args.backlog, args.resources, args.history))
        env = {
            **os.environ,
            "MULTIBANK_DATABASE_URL": url,
            "MULTIBANK_LOG_LEVEL": "WARNING",
            "MULTIBANK_WEBHOOKS_POLL_SECONDS": "0.5",
        }
        workers = [
            subprocess.Popen(
                [str(VENV_BIN / "multibank"), "webhooks", "deliver"],
                env=env,
                stdout=subprocess.DEVNULL,
            )
            for _ in range(args.workers)
        ]
        try:
            deadline = time.monotonic() + args.timeout
            while not arrivals.count and time.monotonic() < deadline:
                time.sleep(0.005)
            cpu_from = sum(cpu_seconds(w.pid) for w in workers)
            count_from = arrivals.count
            while arrivals.count < args.backlog and time.monotonic() < deadline:
                time.sleep(0.01)
            cpu = sum(cpu_seconds(w.pid) for w in workers) - cpu_from
            counted = arrivals.count - count_from
        finally:
            for w in workers:
                w.send_signal(signal.SIGINT)
            for w in workers:
                w.wait(30)
    finally:
        stop()
        asyncio.run(drop_database(url))
    took = arrivals.last - arrivals.first
    in_order = all(seqs == sorted(seqs) for seqs in arrivals.seqs.values())
    once = len(arrivals.refs) == arrivals.count and all(
        seqs == list(range(len(seqs))) for seqs in arrivals.seqs.values()
    )
    rate = arrivals.count / took if took > 0 else 0.0
    print(
        f"{arrivals.count} of {args.backlog} events over {len(arrivals.seqs)} resources "
        f"({args.history} delivered before) in {took:.2f} s: {rate:.0f} deliveries/s, "
        f"{rate / args.workers:.0f}/s per worker ({args.workers}); "
        f"CPU {1000 * cpu / max(counted, 1):.2f} ms per delivery; "
        f"order per resource kept: {in_order}; each once: {once}",
        flush=True,
    )
    return in_order and arrivals.count == args.backlog


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--database-url", default=None)
    ap.add_argument(
        "--no-delivery",
        action="store_true",
        help="the server records events but does not send them: what recording alone costs",
    )
    add_port_base(ap)
    ap.add_argument("--backlog", type=int, default=0, help="events pending before delivery starts")
    ap.add_argument("--resources", type=int, default=50)
    ap.add_argument("--history", type=int, default=0, help="events already delivered before")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    use_port_base(args.port_base)
    if args.backlog:
        ok = [backlog_run(args) for _ in range(args.rounds)]
        sys.exit(0 if all(ok) else 1)

    with bare_server() as bare:
        baseline = wrk(
            "bare FastAPI GET /ping",
            f"{bare.base}/ping",
            {},
            args.seconds,
            args.connections,
            pid=bare.pid,
        )

    counter = Counter()
    hooks = receiver(counter, next_port())
    url = f"http://127.0.0.1:{hooks.server_address[1]}/hooks"
    poll = "0" if args.no_delivery else "0.05"
    env = {"MULTIBANK_ADMIN_TOKEN": ADMIN_TOKEN, "MULTIBANK_WEBHOOKS_POLL_SECONDS": poll}
    if args.database_url:
        env["MULTIBANK_DATABASE_URL"] = args.database_url
    with multibank_server(env) as server, tempfile.TemporaryDirectory() as tmp:
        headers, first = funded_corporate(server, 1)
        accounts = [first] + [
            str(
                call(
                    "POST",
                    f"{server.base}/multi/managed_accounts",
                    headers,
                    {
                        "profileId": server.profiles["corporateManagedAccount"],
                        "friendlyName": f"b{i}",
                        "currency": "EUR",
                    },
                )["id"]
            )
            for i in range(ACCOUNTS - 1)
        ]
        script = Path(tmp) / "patch.lua"
        paths = ",".join(json.dumps(f"/multi/managed_accounts/{a}") for a in accounts)
        script.write_text(LUA % {"paths": paths})
        target = f"{server.base}/multi/managed_accounts/{first}"
        rows: list[Figures] = [baseline]
        rows.append(
            wrk(
                "multibank PATCH account, no webhook URL",
                target,
                headers,
                args.seconds,
                args.connections,
                script,
                pid=server.pid,
            )
        )
        settings(server.base, webhookUrl=url)
        before = recorded(server.base)
        started = time.monotonic()
        with_url = wrk(
            "multibank PATCH account, webhook URL set",
            target,
            headers,
            args.seconds,
            args.connections,
            script,
            pid=server.pid,
        )
        rows.append(with_url)
        time.sleep(1)  # the calls wrk left running end
        total = recorded(server.base) - before
        deadline = time.monotonic() + (0 if args.no_delivery else 300)
        while counter.count < total and time.monotonic() < deadline:
            time.sleep(0.1)
        drained = counter.last - started
        settings(server.base, webhookUrl=None)
    hooks.shutdown()

    print(report(rows, baseline))
    print(f"PATCH with events / without: {with_url.rps / rows[1].rps:.3f}")
    if args.no_delivery:
        print(f"events: {total} recorded, none sent (--no-delivery)")
        check_answers(rows)
        return
    print(
        f"events: {total} recorded, {counter.count} delivered in {drained:.1f} s from the start "
        f"of the row: {counter.count / drained:.0f} events/s "
        f"(backlog when the row ended: delivered over {drained - args.seconds:.1f} s more); "
        f"{len(counter.refs)} distinct call-refs"
    )
    check_answers(rows)


if __name__ == "__main__":
    main()
