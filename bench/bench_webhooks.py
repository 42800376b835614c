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
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench_fee import ADMIN_TOKEN, funded_corporate
from bench_payments import default_programme, settings
from common import (
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
    args = ap.parse_args()
    use_port_base(args.port_base)

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
