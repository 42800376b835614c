"""Logins (`POST /multi/login_with_password`, right password) against raw Argon2id verifies at
the same parameters on the same number of threads, measured in the same run (issue 11, goal 3):
a login should cost little more than its hash, and hashing should use every core.

The raw rate runs `verify` in `--threads` threads (default: the cores) for `--seconds`; the
server runs with its default thread pool and the same Argon2id settings, driven by wrk. The two
alternate for `--rounds` rounds against one server (the raw rate of this machine drifts by
±5 % from one minute to the next): each round's ratio is its logins against the raw rate
measured just before, and the figure is the median round.

CPU beside the rates: the server's CPU per login (utime + stime of its process from /proc over
the row, divided by the answers) and this process's CPU per raw verify; `cpu share` is the raw
verify's over the login's. Only 200 answers count; any other fails the run at its end.

Usage: .venv/bin/python bench/bench_login.py [--seconds 10] [--rounds 3] [--connections 16]
       [--threads N] [--database-url postgresql://...] [--port-base N]
       (default: a fresh SQLite file)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import argon2
from bench_api_key import corporate_token
from common import (
    Figures,
    add_port_base,
    call,
    check_answers,
    multibank_server,
    use_port_base,
    wrk,
)

MEMORY_KIB, TIME_COST, PARALLELISM = 19 * 1024, 2, 1  # the server's defaults (settings.py)
PASSWORD = "Bench-1234!"
LUA = """
wrk.method = "POST"
wrk.body = '%(body)s'
wrk.headers["Content-Type"] = "application/json"
"""


def raw_verify_rate(seconds: float, threads: int) -> tuple[float, float]:
    """Raw verifies per second on `threads` threads, and this process's CPU µs per verify."""
    ph = argon2.PasswordHasher(
        time_cost=TIME_COST, memory_cost=MEMORY_KIB, parallelism=PARALLELISM, type=argon2.Type.ID
    )
    encoded = ph.hash(PASSWORD)
    done = [0] * threads
    stop = time.monotonic() + seconds

    def work(i: int) -> None:
        while time.monotonic() < stop:
            ph.verify(encoded, PASSWORD)
            done[i] += 1

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    started = time.monotonic()
    cpu = time.process_time()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    cpu = time.process_time() - cpu
    return sum(done) / (time.monotonic() - started), 1e6 * cpu / max(1, sum(done))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--database-url", default=None, help="PostgreSQL URL (default: SQLite file)")
    add_port_base(ap)
    args = ap.parse_args()
    use_port_base(args.port_base)
    env = {
        "MULTIBANK_ARGON2_MEMORY_KIB": str(MEMORY_KIB),
        "MULTIBANK_ARGON2_TIME_COST": str(TIME_COST),
        "MULTIBANK_ARGON2_PARALLELISM": str(PARALLELISM),
        # The per-e-mail and per-IP login limits would stop a benchmark at the 21st login.
        "MULTIBANK_RATE_LIMIT_LOGIN": "1000000/minute",
        "MULTIBANK_RATE_LIMIT_IP": "1000000/minute",
        "MULTIBANK_RATE_LIMIT_API_KEY": "1000000/minute",
    }
    if args.database_url:
        env["MULTIBANK_DATABASE_URL"] = args.database_url
    rounds: list[tuple[float, float, Figures]] = []
    with multibank_server(env) as server, tempfile.TemporaryDirectory() as tmp:
        # A corporate whose root user's password is PASSWORD: its e-mail logs in.
        user = call(
            "GET",
            f"{server.base}/multi/corporates",
            {"api-key": server.api_key, "Authorization": f"Bearer {corporate_token(server)}"},
        )
        email = user["rootUser"]["email"]
        script = Path(tmp) / "login.lua"
        body = json.dumps({"email": email, "password": {"value": PASSWORD}})
        script.write_text(LUA % {"body": body})
        for _ in range(args.rounds):
            raw, raw_cpu = raw_verify_rate(args.seconds, args.threads)
            logins = wrk(
                "multibank POST /multi/login_with_password",
                f"{server.base}/multi/login_with_password",
                {"api-key": server.api_key},
                args.seconds,
                args.connections,
                script,
                pid=server.pid,
            )
            rounds.append((raw, raw_cpu, logins))
    print(
        f"{'round':<8}{'raw verifies/s':>16}{'logins/s':>10}{'p50 ms':>10}{'p99 ms':>10}"
        f"{'vs raw':>10}{'raw cpu µs':>12}{'login cpu µs':>14}{'cpu share':>10}{'wrong':>7}"
        f"{'timeouts':>9}"
    )
    for i, (raw, raw_cpu, f) in enumerate(rounds, 1):
        login_cpu = f.cpu_us or 0.0
        print(
            f"{i:<8}{raw:>16.1f}{f.rps:>10.1f}{f.p50_ms:>10.2f}{f.p99_ms:>10.2f}"
            f"{f.rps / raw:>10.3f}{raw_cpu:>12.0f}{login_cpu:>14.0f}"
            f"{raw_cpu / login_cpu if login_cpu else 0.0:>10.3f}{f.non_2xx:>7}{f.timeouts:>9}"
        )
    ratios = sorted(f.rps / raw for raw, _, f in rounds)
    print(
        f"login vs raw Argon2id verify ({args.threads} threads), median of {len(ratios)} rounds: "
        f"{statistics.median(ratios):.3f} (min {ratios[0]:.3f}, max {ratios[-1]:.3f})"
    )
    check_answers([f for _, _, f in rounds])


if __name__ == "__main__":
    main()
