"""Authenticated reads (api-key and bearer token checked: `GET /multi/corporates`, one managed
account, a page of 10) against a bare FastAPI JSON GET, both served by uvicorn (one worker) on
loopback and driven by wrk in the same run (issue 11, goal 1).

Each row also carries the server's CPU per answer (utime + stime from /proc over the row) and
the bare route's CPU per answer over it (`cpu share`); any answer but 200 fails the run.

Usage: .venv/bin/python bench/bench_api_key.py [--seconds 10] [--connections 16] [--rounds 3]
       [--database-url postgresql://postgres@127.0.0.1:5432/DB] [--port-base N]
"""

from __future__ import annotations

import argparse
import secrets
import statistics

from common import (
    Figures,
    Server,
    add_port_base,
    bare_server,
    call,
    check_answers,
    corporate_signup,
    cpu_share,
    multibank_server,
    paused,
    report,
    use_port_base,
    wrk,
)


def corporate_token(server: Server) -> str:
    """Signs a corporate up through the public API, approves it, returns its root user's token."""
    h = {"api-key": server.api_key}
    created = call(
        "POST",
        f"{server.base}/multi/corporates",
        h,
        corporate_signup(server.profiles["corporate"], f"bench{secrets.token_hex(4)}@example.com"),
    )
    user_id = created["rootUser"]["id"]["id"]
    # Approved (KYB) through the simulator, so it may open accounts.
    call(
        "POST",
        f"{server.base}/simulate/api/corporates/{created['id']['id']}/verify",
        {"programme-key": server.api_key},
    )
    out = call(
        "POST",
        f"{server.base}/multi/passwords/{user_id}/create",
        h,
        {"password": {"value": "Bench-1234!"}},
    )
    return str(out["token"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of the bare route then each read, alternated; the medians are the figures",
    )
    ap.add_argument("--database-url", default=None, help="PostgreSQL URL (default: SQLite file)")
    add_port_base(ap)
    args = ap.parse_args()
    use_port_base(args.port_base)
    env = {"MULTIBANK_DATABASE_URL": args.database_url} if args.database_url else None
    # Both servers run throughout, and each round measures the bare route just before the reads:
    # a p99 is the figure a busy moment of a shared machine moves most, and a ratio of two p99s
    # taken minutes apart says more of the machine than of the server.
    with bare_server() as bare, multibank_server(env) as server:
        token = corporate_token(server)
        headers = {"api-key": server.api_key, "Authorization": f"Bearer {token}"}
        accounts = [
            call(
                "POST",
                f"{server.base}/multi/managed_accounts",
                headers,
                {
                    "profileId": server.profiles["corporateManagedAccount"],
                    "friendlyName": f"bench {i}",
                    "currency": "EUR",
                },
            )
            for i in range(10)
        ]
        targets = [
            ("multibank GET /healthz", f"{server.base}/healthz", {}),
            ("multibank GET /multi/corporates", f"{server.base}/multi/corporates", headers),
            (
                "multibank GET /multi/managed_accounts/{id}",
                f"{server.base}/multi/managed_accounts/{accounts[0]['id']}",
                headers,
            ),
            (
                "multibank GET /multi/managed_accounts?limit=10",
                f"{server.base}/multi/managed_accounts?limit=10",
                headers,
            ),
        ]
        ratios: dict[str, list[float]] = {name: [] for name, _, _ in targets}
        tails: dict[str, list[float]] = {name: [] for name, _, _ in targets}
        cpus: dict[str, list[float]] = {name: [] for name, _, _ in targets}
        measured: list[Figures] = []
        for round_ in range(1, args.rounds + 1):
            with paused(server.pid):
                baseline = wrk(
                    "bare FastAPI GET /ping",
                    f"{bare.base}/ping",
                    {},
                    args.seconds,
                    args.connections,
                    pid=bare.pid,
                )
            rows = [baseline]
            for name, url, h in targets:
                figures = wrk(name, url, h, args.seconds, args.connections, pid=server.pid)
                rows.append(figures)
                ratios[name].append(figures.rps / baseline.rps)
                tails[name].append(figures.p99_ms / baseline.p99_ms)
                cpus[name].append(cpu_share(figures, baseline) or 0.0)
            measured += rows
            print(f"round {round_} of {args.rounds}")
            print(report(rows, baseline), flush=True)
    print(
        f"\nmedians of {args.rounds} rounds (req/s vs base; p99 as a multiple of the bare p99; "
        "cpu share: the bare route's server CPU per answer over the row's)"
    )
    for name, _, _ in targets:
        print(
            f"{name:<48}{statistics.median(ratios[name]):>8.3f}{statistics.median(tails[name]):>8.2f}"
            f"   rounds: {', '.join(f'{r:.3f}' for r in ratios[name])}"
            f"; p99 x {', '.join(f'{t:.2f}' for t in tails[name])}"
            f"; cpu share {statistics.median(cpus[name]):.3f}"
            f" ({', '.join(f'{c:.3f}' for c in cpus[name])})"
        )
    check_answers(measured)


if __name__ == "__main__":
    main()
