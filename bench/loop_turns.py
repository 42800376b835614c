"""Where an authenticated read waits (decision 0022): serves multibank under uvicorn in this
process tree with every request timed inside the application and the turns of the event loop
it waited for counted (each time its coroutine yielded, and where), while wrk drives it.

A read whose statements run on the loop's thread should not yield at all; one that waits for a
pooled connection, a statement in a thread or another request's load yields, and then waits
for every request the loop runs before it comes back. A long tail of time in the application
with few turns is CPU; with many turns it is waiting.

Usage: .venv/bin/python bench/loop_turns.py [--path acct|list|corp] [--seconds 8]
       [--connections 16] [--database-url postgresql://postgres@127.0.0.1:5432/DB]
       [--port-base N]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator
from typing import Any, ClassVar

from common import (
    VENV_BIN,
    add_port_base,
    call,
    check_answers,
    multibank_server,
    next_port,
    use_port_base,
    wait_ready,
    wrk,
)


def _where(coro: Any) -> str:
    """The innermost frames a suspended coroutine waits in."""
    frames = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            name = frame.f_code.co_filename.rsplit("/", 1)[-1]
            frames.append(f"{name}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return " > ".join(frames[-3:])


class Counted:
    """Awaits a coroutine, counting how often it yields to the loop and where."""

    turns: ClassVar[collections.Counter[int]] = collections.Counter()
    places: ClassVar[collections.Counter[str]] = collections.Counter()

    def __init__(self, coro: Any) -> None:
        self.coro = coro

    def __await__(self) -> Generator[Any, Any, Any]:
        inner = self.coro.__await__()
        value: Any = None
        error: BaseException | None = None
        n = 0
        while True:
            try:
                out = inner.send(value) if error is None else inner.throw(error)
            except StopIteration as done:
                Counted.turns[n] += 1
                return done.value
            n += 1
            Counted.places[_where(self.coro)] += 1
            try:
                value, error = (yield out), None
            except BaseException as e:  # handed on to the coroutine
                value, error = None, e


def serve(port: int) -> None:
    import uvicorn

    from multibank.app import app_factory

    inner = app_factory()
    times: list[float] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await inner(scope, receive, send)
            return
        started = time.perf_counter()
        await Counted(inner(scope, receive, send))
        times.append(time.perf_counter() - started)

    # The event loop and HTTP parser `multibank serve` gets (uvloop, httptools when installed).
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    try:
        uvicorn.Server(config).run()
    except KeyboardInterrupt:  # how the bench stops it
        pass
    finally:
        times.sort()

        def at(q: float) -> float:
            return round(times[min(len(times) - 1, int(len(times) * q))] * 1000, 3)

        print(
            json.dumps(
                {
                    "requests": len(times),
                    "in_app_ms": {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": at(1)},
                    "turns": dict(sorted(Counted.turns.items())),
                    "waited_in": Counted.places.most_common(6),
                }
            ),
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", default="acct", choices=["acct", "list", "corp"])
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--serve", type=int, default=0, help=argparse.SUPPRESS)
    add_port_base(ap)
    args = ap.parse_args()
    use_port_base(args.port_base)
    if args.serve:
        serve(args.serve)
        return
    folder = tempfile.mkdtemp()
    url = args.database_url or f"sqlite+aiosqlite:///{folder}/bench.db"
    env = {**os.environ, "MULTIBANK_DATABASE_URL": url, "MULTIBANK_LOG_LEVEL": "WARNING"}
    # The database, the default programme, a corporate and ten accounts, by `multibank serve`.
    from bench_api_key import corporate_token

    with multibank_server({"MULTIBANK_DATABASE_URL": url}) as server:
        token = corporate_token(server)
        headers = {"api-key": server.api_key, "Authorization": f"Bearer {token}"}
        body = {
            "profileId": server.profiles["corporateManagedAccount"],
            "friendlyName": "Bench",
            "currency": "EUR",
        }
        accounts = [
            call("POST", f"{server.base}/multi/managed_accounts", headers, body) for _ in range(10)
        ]
    port = next_port()
    child = subprocess.Popen(
        [str(VENV_BIN / "python"), __file__, "--serve", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(f"{base}/readyz")
        url_of = {
            "acct": f"{base}/multi/managed_accounts/{accounts[0]['id']}",
            "list": f"{base}/multi/managed_accounts?limit=10",
            "corp": f"{base}/multi/corporates",
        }
        figures = wrk(
            args.path, url_of[args.path], headers, args.seconds, args.connections, pid=child.pid
        )
    finally:
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=30)
    print(
        f"wrk: {figures.rps:.0f} req/s, p50 {figures.p50_ms:.2f} ms, p99 {figures.p99_ms:.2f} ms, "
        f"server CPU {figures.cpu_us:.0f} µs per answer, wrong answers {figures.non_2xx}"
    )
    stats = json.loads(out.strip().splitlines()[-1])
    print(f"in the application: {stats['requests']} requests, ms {stats['in_app_ms']}")
    print(f"turns of the loop waited, per request: {stats['turns']}")
    for place, count in stats["waited_in"]:
        print(f"  {count:>7}  {place}")
    check_answers([figures])


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
