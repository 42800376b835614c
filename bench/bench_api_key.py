"""Authenticated reads (api-key and bearer token checked: `GET /multi/corporates`, one managed
account, a page of 10) against a bare FastAPI JSON GET, both served by uvicorn (one worker) on
loopback and driven by wrk in the same run (issue 11, goal 1).

Usage: .venv/bin/python bench/bench_api_key.py [--seconds 10] [--connections 16]
       [--database-url postgresql://postgres@127.0.0.1:5432/DB]
"""

from __future__ import annotations

import argparse
import secrets

from common import Server, bare_server, call, corporate_signup, multibank_server, report, wrk


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
    ap.add_argument("--database-url", default=None, help="PostgreSQL URL (default: SQLite file)")
    args = ap.parse_args()
    env = {"MULTIBANK_DATABASE_URL": args.database_url} if args.database_url else None
    with bare_server() as bare:
        baseline = wrk("bare FastAPI GET /ping", f"{bare}/ping", {}, args.seconds, args.connections)
    with multibank_server(env) as server:
        token = corporate_token(server)
        headers = {"api-key": server.api_key, "Authorization": f"Bearer {token}"}
        health = wrk(
            "multibank GET /healthz", f"{server.base}/healthz", {}, args.seconds, args.connections
        )
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
        rows = [baseline, health]
        for name, path in (
            ("GET /multi/corporates", "/multi/corporates"),
            ("GET /multi/managed_accounts/{id}", f"/multi/managed_accounts/{accounts[0]['id']}"),
            ("GET /multi/managed_accounts?limit=10", "/multi/managed_accounts?limit=10"),
        ):
            rows.append(
                wrk(
                    f"multibank {name}", server.base + path, headers, args.seconds, args.connections
                )
            )
    print(report(rows, baseline))


if __name__ == "__main__":
    main()
