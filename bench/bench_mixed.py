"""Reads and writes side by side (issue 44): one `multibank serve` (one worker) and the bare
FastAPI route (bare_app.py), both on loopback, driven by wrk in the same run.

Each round, per kind of write:
- the bare route alone (`--readers` connections, multibank paused meanwhile), once per round;
- authenticated reads alone: `GET /multi/managed_accounts/{id}` with `--readers` connections
  (64), spread over the two accounts of each of the first `--read-customers` customers, each
  read with its owner's token;
- the writes alone, `--writers` connections (16), spread over `--customers` (50) customers:
  fee charges (`POST /multi/corporates/fees/charge`, ADMIN_FEE on the customer's first account),
  or transfers (`POST /multi/transfers`, 1.00 EUR from the customer's first account to its
  second); every request with a unique `idempotency-ref`;
- both at the same time (two wrk processes, one window).

Every account holds enough money for the whole run; only 200 answers count (any other is a wrong
answer). For each kind it prints the rate alone and together, "kept" (together / alone at the
same connections), the sum of kept, p50 and p99 alone and together, the p99 multiple, timeouts
and wrong answers, and the server's CPU per answer (utime + stime of its process from /proc over
each window, divided by the answers: alone per kind, and over both kinds together beside what
the rates alone predict). At the end `multibank ledger verify` runs on the server's database.

Floors (issue 44), printed PASS/FAIL on the medians of the rounds: each kind keeps >= 0.30;
reads kept + writes kept >= 0.85; a write's p99 under the mix <= 5x alone, a read's <= 3x; 0
timeouts, 0 wrong answers, ledger verify clean. The exit status is 0 unless answers were wrong
or the ledger failed: a floor missed is a figure, not a broken run.

Usage: .venv/bin/python bench/bench_mixed.py [--seconds 10] [--rounds 1] [--readers 64]
       [--writers 16] [--customers 50] [--read-customers 8] [--kinds fee,transfer]
       [--database-url postgresql://...] [--port-base N]   (default: a fresh SQLite file)
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench_fee import FEE, funded_corporate
from common import (
    Figures,
    Load,
    Server,
    add_port_base,
    bare_server,
    call,
    ledger_verify_cli,
    multibank_server,
    paused,
    report,
    run_loads,
    use_port_base,
)

AMOUNT = 100  # a transfer: 1.00 EUR
# The fastest loopback allows any write here, twice over: what each customer must hold.
CEILING = 20_000

READ_LUA = """
local counter = 0
local paths = {%(paths)s}
local tokens = {%(tokens)s}
request = function()
  counter = counter + 1
  local i = (counter %% #paths) + 1
  wrk.headers["Authorization"] = "Bearer " .. tokens[i]
  return wrk.format("GET", paths[i])
end
"""
WRITE_LUA = """
local counter = 0
local prefix = "%(prefix)s"
local tokens = {%(tokens)s}
local bodies = {%(bodies)s}
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  counter = counter + 1
  local i = (counter %% #tokens) + 1
  wrk.headers["Authorization"] = "Bearer " .. tokens[i]
  wrk.headers["idempotency-ref"] = prefix .. "-" .. counter
  wrk.body = bodies[i]
  return wrk.format()
end
"""

FLOOR_KEPT = 0.30
FLOOR_SUM = 0.85
FLOOR_P99_WRITE = 5.0
FLOOR_P99_READ = 3.0


@dataclass
class Customer:
    headers: dict[str, str]
    first: str  # charged, and the transfers' source
    second: str  # the transfers' destination

    @property
    def token(self) -> str:
        return self.headers["Authorization"].split(" ", 1)[1]


@dataclass
class Pair:
    """One kind's round: reads and writes each alone, then together, and the server's CPU."""

    kind: str
    reads: Figures
    writes: Figures
    reads_mixed: Figures
    writes_mixed: Figures
    cpu_mixed_us: float  # server CPU per answer over the mixed window, both kinds

    @property
    def reads_kept(self) -> float:
        return self.reads_mixed.rps / self.reads.rps if self.reads.rps else 0.0

    @property
    def writes_kept(self) -> float:
        return self.writes_mixed.rps / self.writes.rps if self.writes.rps else 0.0

    @property
    def reads_p99_x(self) -> float:
        return _p99_x(self.reads, self.reads_mixed)

    @property
    def writes_p99_x(self) -> float:
        return _p99_x(self.writes, self.writes_mixed)

    @property
    def cpu_predicted_us(self) -> float:
        """The mix's CPU per answer if each answer cost what it costs alone."""
        r, w = self.reads_mixed.requests, self.writes_mixed.requests
        if not (r + w) or self.reads.cpu_us is None or self.writes.cpu_us is None:
            return 0.0
        return (r * self.reads.cpu_us + w * self.writes.cpu_us) / (r + w)


def _p99_x(alone: Figures, mixed: Figures) -> float:
    """p99 together over alone; infinite when either window had no answer at all: a request still
    waiting when its window ends is in neither the percentiles nor the timeouts, so a kind
    starved outright would otherwise show a p99 of 0 ms."""
    if not alone.requests or not mixed.requests or not alone.p99_ms:
        return math.inf
    return mixed.p99_ms / alone.p99_ms


def _lua_list(values: list[str]) -> str:
    return ",".join(json.dumps(v) for v in values)


def customer(server: Server, funds: int) -> Customer:
    headers, first = funded_corporate(server, funds)
    second = call(
        "POST",
        f"{server.base}/multi/managed_accounts",
        headers,
        {
            "profileId": server.profiles["corporateManagedAccount"],
            "friendlyName": "Bench second",
            "currency": "EUR",
        },
    )
    return Customer(headers, first, str(second["id"]))


def fee_body(c: Customer) -> dict[str, object]:
    return {"feeType": "ADMIN_FEE", "source": {"type": "managed_accounts", "id": c.first}}


def transfer_body(server: Server, c: Customer) -> dict[str, object]:
    return {
        "profileId": server.profiles["transfers"],
        "source": {"type": "managed_accounts", "id": c.first},
        "destination": {"type": "managed_accounts", "id": c.second},
        "destinationAmount": {"currency": "EUR", "amount": AMOUNT},
    }


def _row(label: str, alone: Figures, mixed: Figures, kept: float, p99_x: float) -> str:
    return (
        f"{label:<30}{alone.rps:>9.0f}{mixed.rps:>10.0f}{kept:>7.3f}"
        f"{alone.p50_ms:>9.1f}{mixed.p50_ms:>9.1f}{alone.p99_ms:>9.1f}{mixed.p99_ms:>9.1f}"
        f"{p99_x:>7.2f}{alone.timeouts + mixed.timeouts:>9}{alone.non_2xx + mixed.non_2xx:>7}"
        f"{'-' if alone.cpu_us is None else f'{alone.cpu_us:.0f}':>9}"
    )


def print_pair(p: Pair, readers: int, writers: int) -> None:
    print(f"\n{p.kind} beside reads ({readers} + {writers} connections):")
    print(
        f"{'':<30}{'alone/s':>9}{'together':>10}{'kept':>7}{'p50 al':>9}{'p50 tog':>9}"
        f"{'p99 al':>9}{'p99 tog':>9}{'p99 x':>7}{'timeouts':>9}{'wrong':>7}{'cpu µs':>9}"
    )
    print(_row("reads", p.reads, p.reads_mixed, p.reads_kept, p.reads_p99_x))
    print(_row(p.kind, p.writes, p.writes_mixed, p.writes_kept, p.writes_p99_x))
    for label, f in (("reads", p.reads_mixed), (p.kind, p.writes_mixed)):
        if not f.requests:
            print(f"!!! {label} together: no answer at all in the window (p99 x counted as inf)")
    print(
        f"sum of kept: {p.reads_kept + p.writes_kept:.3f}; server CPU per answer together: "
        f"{p.cpu_mixed_us:.0f} µs over {p.reads_mixed.requests + p.writes_mixed.requests} "
        f"answers (each answer at its cost alone: {p.cpu_predicted_us:.0f} µs)",
        flush=True,
    )


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1, help="the floors are judged on the medians")
    ap.add_argument("--readers", type=int, default=64, help="connections of reads")
    ap.add_argument("--writers", type=int, default=16, help="connections of writes")
    ap.add_argument(
        "--customers", type=int, default=50, help="whose accounts the writes spread over"
    )
    ap.add_argument("--read-customers", type=int, default=8, help="whose accounts are read")
    ap.add_argument("--kinds", default="fee,transfer", help="writes measured: fee, transfer")
    ap.add_argument("--database-url", default=None, help="PostgreSQL URL (default: SQLite file)")
    add_port_base(ap)
    args = ap.parse_args()
    use_port_base(args.port_base)
    kinds = [k for k in args.kinds.split(",") if k]
    if not kinds or set(kinds) - {"fee", "transfer"}:
        ap.error("--kinds: fee, transfer or both")
    # Each kind writes alone and together in every round, at most CEILING/s, twice over.
    writes = CEILING * args.seconds * args.rounds * 2 * 2
    funds = max(writes * max(FEE, AMOUNT) * 2 // args.customers, 100_000)

    env = {"MULTIBANK_DATABASE_URL": args.database_url} if args.database_url else None
    pairs: list[Pair] = []
    measured: list[Figures] = []
    with (
        bare_server() as bare,
        multibank_server(env) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        print(f"funding {args.customers} customers ({funds} each)...", flush=True)
        customers = [customer(server, funds) for _ in range(args.customers)]
        readers = customers[: max(1, args.read_customers)]
        read_script = Path(tmp) / "reads.lua"
        read_script.write_text(
            READ_LUA
            % {
                "paths": _lua_list(
                    [f"/multi/managed_accounts/{a}" for c in readers for a in (c.first, c.second)]
                ),
                "tokens": _lua_list([c.token for c in readers for _ in (1, 2)]),
            }
        )
        reads = Load(
            "reads GET /multi/managed_accounts/{id}",
            f"{server.base}/multi/managed_accounts/{readers[0].first}",
            {"api-key": server.api_key},
            args.readers,
            read_script,
        )
        paths = {"fee": "/multi/corporates/fees/charge", "transfer": "/multi/transfers"}
        names = {"fee": "fee charges", "transfer": "transfers"}

        def bodies(kind: str) -> list[dict[str, object]]:
            return [fee_body(c) if kind == "fee" else transfer_body(server, c) for c in customers]

        for kind in kinds:  # one of each first: the system accounts are created outside the rows
            first = {**customers[0].headers, "idempotency-ref": secrets.token_hex(8)}
            call("POST", f"{server.base}{paths[kind]}", first, bodies(kind)[0])

        def write_load(kind: str) -> Load:
            script = Path(tmp) / f"{kind}-{secrets.token_hex(4)}.lua"
            script.write_text(  # a prefix of its own: every row's refs are new
                WRITE_LUA
                % {
                    "prefix": secrets.token_hex(6),
                    "tokens": _lua_list([c.token for c in customers]),
                    "bodies": _lua_list(
                        [json.dumps(b, separators=(",", ":")) for b in bodies(kind)]
                    ),
                }
            )
            return Load(
                f"{names[kind]}, {args.customers} customers",
                f"{server.base}{paths[kind]}",
                {"api-key": server.api_key},
                args.writers,
                script,
            )

        for round_ in range(1, args.rounds + 1):
            with paused(server.pid):
                [baseline], _ = run_loads(
                    [Load("bare FastAPI GET /ping", f"{bare.base}/ping", {}, args.readers)],
                    args.seconds,
                    bare.pid,
                )
            rows = [baseline]
            for kind in kinds:
                [read_alone], _ = run_loads([reads], args.seconds, server.pid)
                [write_alone], _ = run_loads([write_load(kind)], args.seconds, server.pid)
                mixed, cpu = run_loads([reads, write_load(kind)], args.seconds, server.pid)
                answers = sum(f.requests for f in mixed)
                pair = Pair(
                    names[kind],
                    read_alone,
                    write_alone,
                    mixed[0],
                    mixed[1],
                    1e6 * (cpu or 0.0) / answers if answers else 0.0,
                )
                for f, label in ((mixed[0], "reads"), (mixed[1], names[kind])):
                    f.name = f"{label}, together"
                pairs.append(pair)
                rows += [read_alone, write_alone]
                measured += [read_alone, write_alone, *mixed]
            measured.append(baseline)
            print(f"\nround {round_} of {args.rounds}, each kind alone against the bare route:")
            print(report(rows, baseline), flush=True)
            for pair in pairs[-len(kinds) :]:
                print_pair(pair, args.readers, args.writers)
        ledger_ok, ledger_out = ledger_verify_cli(server)

    print(f"\nfloors (issue 44), medians of {args.rounds} round(s):")
    for kind in kinds:
        mine = [p for p in pairs if p.kind == names[kind]]

        def med(values: list[float]) -> tuple[float, str]:
            return statistics.median(values), ", ".join(f"{v:.3f}" for v in values)

        r_kept, r_each = med([p.reads_kept for p in mine])
        w_kept, w_each = med([p.writes_kept for p in mine])
        total, t_each = med([p.reads_kept + p.writes_kept for p in mine])
        r_x, rx_each = med([p.reads_p99_x for p in mine])
        w_x, wx_each = med([p.writes_p99_x for p in mine])
        label = names[kind]
        for ok, text in (
            (r_kept >= FLOOR_KEPT, f"reads kept beside {label} {r_kept:.3f} >= {FLOOR_KEPT}"),
            (w_kept >= FLOOR_KEPT, f"{label} kept {w_kept:.3f} >= {FLOOR_KEPT}"),
            (total >= FLOOR_SUM, f"reads kept + {label} kept {total:.3f} >= {FLOOR_SUM}"),
            (w_x <= FLOOR_P99_WRITE, f"{label} p99 together/alone {w_x:.2f} <= {FLOOR_P99_WRITE}"),
            (r_x <= FLOOR_P99_READ, f"reads p99 together/alone {r_x:.2f} <= {FLOOR_P99_READ}"),
        ):
            print(f"  {verdict(ok)}  {text}")
        if args.rounds > 1:
            print(
                f"        rounds: reads kept {r_each}; {label} kept {w_each}; sum {t_each}; "
                f"p99 x reads {rx_each}, {label} {wx_each}"
            )
    timeouts = sum(f.timeouts for f in measured)
    wrong = sum(f.non_2xx for f in measured)
    # A window in which a load got no answer at all had requests waiting when it ended, which
    # are counted nowhere else: at least as bad as a timeout.
    silent = [f.name for f in measured if not f.requests]
    print(
        f"  {verdict(timeouts == 0 and not silent)}  timeouts: {timeouts}"
        + (f"; windows without a single answer: {', '.join(silent)}" if silent else "")
    )
    print(f"  {verdict(wrong == 0)}  wrong answers (not 200): {wrong}")
    print(f"  {verdict(ledger_ok)}  multibank ledger verify: {ledger_out.splitlines()[-1:]}")
    if wrong or not ledger_ok:
        for f in measured:
            if f.non_2xx:
                print(f"WRONG ANSWERS in {f.name}: {f.non_2xx} of {f.requests}: {f.statuses}")
        if not ledger_ok:
            print(ledger_out)
        sys.exit(1)


if __name__ == "__main__":
    main()
