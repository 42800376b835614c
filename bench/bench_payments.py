"""Payments (issue 12): a transfer between two accounts of one corporate, a send to another
identity that completes at once (the programme's send SCA off), and a send held for SCA (the
default), each with a unique `idempotency-ref` per request; against a bare FastAPI JSON GET and
an authenticated read of one account, all served by uvicorn (one worker) on loopback and driven
by wrk in the same run. The ledger is verified afterwards. Only 200 answers count (any other
fails the run at its end); each row carries the server's CPU per answer.

Usage: .venv/bin/python bench/bench_payments.py [--seconds 10] [--connections 16]
       [--database-url postgresql://...] [--port-base N]   (default: a fresh SQLite file)
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
from pathlib import Path

from bench_fee import ADMIN_TOKEN, LUA, funded_corporate, ledger_verify
from common import (
    Figures,
    add_port_base,
    bare_server,
    call,
    check_answers,
    multibank_server,
    report,
    use_port_base,
    wrk,
)

AMOUNT = 5_000  # above the low-value exemption: the held sends really wait for SCA


def default_programme(base: str) -> str:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    programmes = call("GET", f"{base}/portal/api/programmes", admin)
    return str(next(p["programmeId"] for p in programmes if p["name"] == "default"))


def settings(base: str, **values: object) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    call("PATCH", f"{base}/portal/api/programmes/{default_programme(base)}/settings", admin, values)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--database-url", default=None)
    add_port_base(ap)
    args = ap.parse_args()
    use_port_base(args.port_base)
    # Enough for three rows at any speed loopback allows (20k/s).
    funds = 3 * 20_000 * args.seconds * AMOUNT

    with bare_server() as bare:
        baseline = wrk(
            "bare FastAPI GET /ping",
            f"{bare.base}/ping",
            {},
            args.seconds,
            args.connections,
            pid=bare.pid,
        )

    env = {"MULTIBANK_ADMIN_TOKEN": ADMIN_TOKEN}
    if args.database_url:
        env["MULTIBANK_DATABASE_URL"] = args.database_url
    with multibank_server(env) as server, tempfile.TemporaryDirectory() as tmp:
        headers, source = funded_corporate(server, funds)
        second = call(
            "POST",
            f"{server.base}/multi/managed_accounts",
            headers,
            {
                "profileId": server.profiles["corporateManagedAccount"],
                "friendlyName": "Second",
                "currency": "EUR",
            },
        )["id"]
        _, other = funded_corporate(server, 1)

        def body(kind: str, destination: str) -> str:
            return json.dumps(
                {
                    "profileId": server.profiles[kind],
                    "source": {"type": "managed_accounts", "id": source},
                    "destination": {"type": "managed_accounts", "id": destination},
                    "destinationAmount": {"currency": "EUR", "amount": AMOUNT},
                },
                separators=(",", ":"),
            )

        def row(name: str, path: str, payload: str) -> Figures:
            script = Path(tmp) / f"{secrets.token_hex(4)}.lua"
            script.write_text(LUA % {"prefix": secrets.token_hex(6), "body": payload})
            # One request first, so the row does not pay for the system accounts' creation.
            warm = {**headers, "idempotency-ref": secrets.token_hex(8)}
            call("POST", f"{server.base}{path}", warm, json.loads(payload))
            return wrk(
                name,
                f"{server.base}{path}",
                headers,
                args.seconds,
                args.connections,
                script,
                pid=server.pid,
            )

        rows: list[Figures] = [baseline]
        rows.append(
            wrk(
                "multibank GET managed account",
                f"{server.base}/multi/managed_accounts/{source}",
                headers,
                args.seconds,
                args.connections,
                pid=server.pid,
            )
        )
        rows.append(row("multibank transfer + ref", "/multi/transfers", body("transfers", second)))
        settings(server.base, sendsScaRequired=False)
        rows.append(row("multibank send, no SCA + ref", "/multi/sends", body("sends", other)))
        settings(server.base, sendsScaRequired=True)
        rows.append(row("multibank send held for SCA + ref", "/multi/sends", body("sends", other)))
        verified = ledger_verify(server)

    print(report(rows, baseline))
    read = rows[1]
    for f in rows[2:]:
        print(f"{f.name} / authenticated read: {f.rps / read.rps:.3f}")
    print(f"ledger verify: {'ok' if verified.get('ok') else verified}")
    check_answers(rows)
    if not verified.get("ok"):
        sys.exit("LEDGER VERIFY FAILED")


if __name__ == "__main__":
    main()
