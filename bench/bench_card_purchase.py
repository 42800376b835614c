"""Simulated card purchases over many cards (`POST /simulate/api/cards/{id}/purchase`: an
authorisation and its settlement in one transaction, spend rules and limits checked, the
purchase fee charged) against an authenticated read of one managed account, measured in the same
run, alternated in `--rounds` rounds (issue 34: goal >= 0.30 on PostgreSQL).

Each card is a debit card of its own verified corporate, on a funded EUR account, with an
`ALWAYS` spend limit large enough for the run (a debit card without a limit can spend nothing,
D22). A purchase is 1.00 EUR at a rotating card; the ledger is verified afterwards and every
answer's code is counted (only a 200 whose body says APPROVED counts; any other answer fails the
run at its end), so a row of denials cannot pass for speed. Each row carries the server's CPU per
answer (utime + stime from /proc over the row) beside req/s.

Usage: .venv/bin/python bench/bench_card_purchase.py [--seconds 10] [--connections 16]
       [--rounds 3] [--cards 50] [--database-url postgresql://...] [--port-base N]
       (default: SQLite)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from bench_fee import ADMIN_TOKEN, funded_corporate, ledger_verify
from common import (
    Figures,
    Server,
    add_port_base,
    bare_server,
    call,
    check_answers,
    cpu_share,
    multibank_server,
    report,
    use_port_base,
    wrk,
)

AMOUNT = 100
LUA = """
local counter = 0
local cards = {%(cards)s}
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '%(body)s'
request = function()
  counter = counter + 1
  local i = (counter %% #cards) + 1
  return wrk.format(nil, "/simulate/api/cards/" .. cards[i] .. "/purchase")
end
"""


def debit_card(server: Server, funds: int) -> tuple[dict[str, str], str, str]:
    """A verified corporate's funded account and a debit card on it that may spend `funds`."""
    headers, account_id = funded_corporate(server, funds)
    card = call(
        "POST",
        f"{server.base}/multi/managed_cards",
        headers,
        {
            "profileId": server.profiles["corporateDebitManagedCard"],
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
            "parentManagedAccountId": account_id,
        },
    )
    call(
        "POST",
        f"{server.base}/multi/managed_cards/{card['id']}/spend_rules",
        headers,
        {"spendLimit": [{"value": {"currency": "EUR", "amount": funds}, "interval": "ALWAYS"}]},
    )
    return headers, account_id, str(card["id"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cards", type=int, default=50)
    ap.add_argument("--database-url", default=None)
    add_port_base(ap)
    args = ap.parse_args()
    use_port_base(args.port_base)
    # Enough for the run at any speed loopback allows, twice over, purchase fee included.
    funds = 2 * 10_000 * args.seconds * args.rounds * (AMOUNT + 100) // args.cards

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
        cards = [debit_card(server, funds) for _ in range(args.cards)]
        body = json.dumps(
            {
                "merchantName": "Bench Merchant",
                "transactionAmount": {"currency": "EUR", "amount": AMOUNT},
            },
            separators=(",", ":"),
        )
        sim = {"programme-key": server.api_key}
        first = call(
            "POST",
            f"{server.base}/simulate/api/cards/{cards[0][2]}/purchase",
            sim,
            json.loads(body),
        )
        assert first["code"] == "APPROVED", first
        script = Path(tmp) / "purchase.lua"
        script.write_text(
            LUA % {"cards": ",".join(json.dumps(c) for _, _, c in cards), "body": body}
        )
        rows: list[Figures] = [baseline]
        ratios = []
        cpu_ratios = []
        for n in range(1, args.rounds + 1):
            read = wrk(
                f"multibank GET managed account #{n}",
                f"{server.base}/multi/managed_accounts/{cards[0][1]}",
                cards[0][0],
                args.seconds,
                args.connections,
                pid=server.pid,
            )
            purchases = wrk(
                f"simulated purchase, {args.cards} cards #{n}",
                f"{server.base}/simulate/api/cards/{cards[0][2]}/purchase",
                sim,
                args.seconds,
                args.connections,
                script=script,
                pid=server.pid,
                body_has='"APPROVED"',
            )
            rows += [read, purchases]
            ratios.append(purchases.rps / read.rps)
            cpu_ratios.append(cpu_share(purchases, read) or 0.0)
        # Every purchase was approved: each card's parent lost exactly amount + fee per purchase.
        spent = 0
        for headers, account_id, _ in cards:
            left = call("GET", f"{server.base}/multi/managed_accounts/{account_id}", headers)
            spent += funds - int(left["balances"]["availableBalance"])
        verified = ledger_verify(server)

    print(report(rows, baseline))
    print(
        "purchases / authenticated read, per round: "
        + ", ".join(f"{r:.3f}" for r in ratios)
        + f"; median {statistics.median(ratios):.3f} (goal >= 0.30 on PostgreSQL)"
    )
    print(
        "read's server CPU per answer / purchase's, per round: "
        + ", ".join(f"{r:.3f}" for r in cpu_ratios)
        + f"; median {statistics.median(cpu_ratios):.3f}"
    )
    print(
        f"money spent by the cards: {spent}; "
        f"ledger verify: {'ok' if verified.get('ok') else verified}"
    )
    check_answers(rows)
    if not verified.get("ok"):
        sys.exit("LEDGER VERIFY FAILED")


if __name__ == "__main__":
    main()
