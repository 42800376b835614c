"""Shared bench plumbing: start servers on loopback (on the ports `--port-base` gives), drive them
with wrk (every answer's status counted), read the servers' CPU from /proc, parse the figures."""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"


@dataclass
class Server:
    base: str
    api_key: str
    profiles: dict[str, str]
    pid: int = 0  # the `multibank serve` process (one worker: the server itself)
    database_url: str = ""  # what it serves from (`multibank ledger verify` reads the same)


@dataclass
class Bare:
    """The bare FastAPI route's server (bare_app.py): its base URL and process id."""

    base: str
    pid: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# The ports the servers of a run listen on: N, N+1, ... in the order they start when
# `--port-base N` is given (two benches, or a bench and the test suite, then never meet on one
# port), else free ports the OS picks.
_port_base: int | None = None
_ports_given = 0


def add_port_base(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--port-base",
        type=int,
        default=None,
        help="servers this bench starts listen on N, N+1, ... in order (default: free ports)",
    )


def use_port_base(base: int | None) -> None:
    global _port_base, _ports_given
    _port_base, _ports_given = base, 0


def next_port() -> int:
    """The next port of `--port-base` (refused loudly if something already listens on it), or a
    free one."""
    global _ports_given
    if _port_base is None:
        return free_port()
    port = _port_base + _ports_given
    _ports_given += 1
    with socket.socket() as s:
        # As uvicorn binds: a port whose last connections are in TIME_WAIT is free, one that a
        # process listens on is not.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            sys.exit(f"port {port} (--port-base {_port_base} + {_ports_given - 1}) is taken: {e}")
    return port


def wait_ready(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not become ready")


@contextmanager
def multibank_server(env: dict[str, str] | None = None) -> Iterator[Server]:
    """A `multibank serve` on a fresh SQLite file (or MULTIBANK_DATABASE_URL from `env`)."""
    port = next_port()
    with tempfile.TemporaryDirectory() as tmp:
        full_env: dict[str, str] = {
            **os.environ,
            "MULTIBANK_DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/bench.db",
            "MULTIBANK_LOG_LEVEL": "WARNING",
            **(env or {}),
        }
        proc = subprocess.Popen(
            [str(VENV_BIN / "multibank"), "serve", "--port", str(port)],
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            key, profiles = "", {}
            assert proc.stdout is not None
            for line in proc.stdout:
                text = line.strip()
                if text.startswith("api-key:"):
                    key = text.split(":", 1)[1].strip()
                elif text.startswith("profiles:"):
                    profiles = json.loads(text.split(":", 1)[1])
                    break
            base = f"http://127.0.0.1:{port}"
            wait_ready(f"{base}/readyz")
            yield Server(base, key, profiles, proc.pid, full_env["MULTIBANK_DATABASE_URL"])
        finally:
            proc.terminate()
            proc.wait(timeout=20)


@contextmanager
def paused(pid: int) -> Iterator[None]:
    """The process stopped meanwhile (SIGSTOP, then SIGCONT): a server idle between rows still
    wakes for its own timers, which must not weigh on the baseline measured beside it."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@contextmanager
def bare_server() -> Iterator[Bare]:
    port = next_port()
    proc = subprocess.Popen(
        [str(VENV_BIN / "python"), "bare_app.py", "--port", str(port)],
        cwd=Path(__file__).parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(f"{base}/ping")
        yield Bare(base, proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def call(method: str, url: str, headers: dict[str, str], body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method=method, headers={"content-type": "application/json", **headers}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        raw = r.read()
        return json.loads(raw) if raw else None


# The most one EUR deposit may carry (SEPA's scheme limit, minor units): a larger one is refused
# (DENIED_OTHER) and the account stays empty, so every charge against it would answer 409.
DEPOSIT_LIMIT = 99_999_999_999


def fund(base: str, api_key: str, headers: dict[str, str], account_id: str, amount: int) -> None:
    """Gives the account its IBAN (owner's upgrade, simulator allocation) and deposits `amount`,
    in deposits within the scheme limit: money from outside reaches only an account with an
    allocated IBAN."""
    iban = call("POST", f"{base}/multi/managed_accounts/{account_id}/iban", headers)
    sim = {"programme-key": api_key}
    if iban["state"] == "PENDING_ALLOCATION":
        call("POST", f"{base}/simulate/api/managed_accounts/{account_id}/iban/allocate", sim)
    while amount > 0:
        part = min(amount, DEPOSIT_LIMIT)
        body = {"depositAmount": {"currency": "EUR", "amount": part}}
        out = call("POST", f"{base}/simulate/api/accounts/{account_id}/deposit", sim, body)
        if out != {"code": "COMPLETED"}:
            sys.exit(f"a deposit of {part} that funds the run was refused: {out}")
        amount -= part


def corporate_signup(profile_id: str, email: str) -> dict[str, Any]:
    """The body of `POST /multi/corporates` every bench signs its corporate up with."""
    return {
        "profileId": profile_id,
        "rootUser": {
            "name": "Bench",
            "surname": "Mark",
            "email": email,
            "mobile": {"countryCode": "+44", "number": "7700900000"},
            "companyPosition": "DIRECTOR",
        },
        "company": {"type": "LLC", "name": "Bench Ltd", "registrationCountry": "GB"},
        "acceptedTerms": True,
        "ipAddress": "127.0.0.1",
        "baseCurrency": "EUR",
    }


# Server CPU per request: utime + stime of the server's process and of its living descendants
# (uvicorn's workers when there are several), from /proc, over the measured window, divided by
# the answers it gave. A busy machine slows a server down without making each request cost
# more CPU, so this holds where req/s does not (issue 40).
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """The parent pid and CPU seconds (user + system, every thread) of a living process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def server_cpu(pid: int) -> float:
    """CPU seconds used so far by `pid` and every living descendant of it."""
    parent_of: dict[int, int] = {}
    cpu_of: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            found = _stat(int(entry.name))
            if found is not None:
                parent_of[int(entry.name)], cpu_of[int(entry.name)] = found
    tree = {pid}
    grew = True
    while grew:
        children = {p for p, parent in parent_of.items() if parent in tree} - tree
        tree |= children
        grew = bool(children)
    return sum(cpu_of.get(p, 0.0) for p in tree)


@dataclass
class Figures:
    name: str
    rps: float  # answers with the expected status (and body) per second
    p50_ms: float
    p99_ms: float
    non_2xx: int  # answers other than the expected one, whatever their status
    requests: int = 0  # every answer
    timeouts: int = 0  # answers slower than TIMEOUT_S, and requests never answered
    socket_errors: int = 0  # connect, read and write errors
    statuses: dict[str, int] = field(default_factory=dict)  # "200": n, "409": n, "200 body": n
    cpu_us: float | None = None  # server CPU per answer, µs (None: not measured)


@dataclass
class Load:
    """One wrk process: `connections` connections on `url`; `script` a wrk Lua script (`-s`) that
    may build each request itself. Only `expect` counts as an answer (and, with `body_has`, only
    a body containing that text): every other answer is counted apart and is a wrong answer."""

    name: str
    url: str
    headers: dict[str, str]
    connections: int
    script: str | Path | None = None
    expect: int = 200
    body_has: str = ""


# A request unanswered after this long is a timeout (wrk's default, which issue 44's floors use).
# wrk itself waits longer (WRK_WAIT_S): an answer slower than TIMEOUT_S still counts in the
# latency percentiles (a starved request's p99 is seconds, not "none") and as a timeout.
TIMEOUT_S = 2
WRK_WAIT_S = 60

# Appended to every script: counts each answer's status in each wrk thread (`response`), then
# sums them in `done` and prints them with wrk's own totals, one `bench-` line each.
_TALLY_LUA = """
-- appended by bench/common.py: every answer's status counted
local bench_threads = {}
local bench_expect = "%(expect)s"
local bench_body_has = %(body_has)s
function setup(thread)
  table.insert(bench_threads, thread)
end
function response(status, headers, body)
  bench_statuses = bench_statuses or {}
  local key = tostring(status)
  if key == bench_expect and bench_body_has ~= "" and
      not string.find(body or "", bench_body_has, 1, true) then
    key = key .. " body"
  end
  bench_statuses[key] = (bench_statuses[key] or 0) + 1
end
-- How many recorded latencies are at least `limit` µs: the smallest rank whose value reaches
-- it, by bisection on latency:percentile (wrk's rank is round(p / 100 * count + 0.5)).
local function bench_slower(latency, limit, count)
  if count <= 0 or latency.max < limit then return 0 end
  if latency.min >= limit then return count end
  local lo, hi = 1, count
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if latency:percentile(100 * (mid - 0.5) / count) >= limit then hi = mid else lo = mid + 1 end
  end
  return count - lo + 1
end
function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(bench_threads) do
    local counted = t:get("bench_statuses")
    if counted then
      for k, v in pairs(counted) do total[k] = (total[k] or 0) + v end
    end
  end
  local e = summary.errors
  local slow = bench_slower(latency, %(timeout_us)d, summary.requests - e.timeout)
  io.write(string.format("bench-totals %%d %%d %%d %%d %%d %%d %%d %%d\\n",
    summary.duration, summary.requests, e.timeout + slow, e.connect + e.read + e.write,
    latency:percentile(50), latency:percentile(99), latency.max, e.status))
  for k, v in pairs(total) do io.write("bench-status ", k, "=", v, "\\n") end
end
"""


def _script(load: Load, folder: str) -> Path:
    own = Path(load.script).read_text() if load.script is not None else ""
    path = Path(folder) / f"load{secrets.token_hex(4)}.lua"
    path.write_text(
        own
        + _TALLY_LUA
        % {
            "expect": load.expect,
            "body_has": json.dumps(load.body_has),
            "timeout_us": TIMEOUT_S * 1_000_000,
        }
    )
    return path


def _figures(load: Load, out: str) -> Figures:
    m = re.search(r"^bench-totals (.*)$", out, re.M)
    if m is None:
        raise RuntimeError(f"wrk printed no totals for {load.name}:\n{out}")
    duration_us, requests, timeouts, errors, p50, p99, _max, _ = (
        int(x) for x in m.group(1).split()
    )
    statuses = {k: int(v) for k, v in re.findall(r"^bench-status (.+)=(\d+)$", out, re.M)}
    ok = statuses.get(str(load.expect), 0)
    wrong = sum(statuses.values()) - ok
    if wrong:  # loudly, at once: the bench fails at its end (check_answers)
        print(
            f"!!! {load.name}: {wrong} of {requests} answers were not {load.expect}"
            f"{' with ' + repr(load.body_has) if load.body_has else ''}: {statuses}",
            file=sys.stderr,
            flush=True,
        )
    return Figures(
        load.name,
        ok / (duration_us / 1e6),
        p50 / 1000,
        p99 / 1000,
        wrong,
        requests,
        timeouts,
        errors,
        statuses,
    )


def run_loads(
    loads: Sequence[Load], seconds: int, pid: int = 0
) -> tuple[list[Figures], float | None]:
    """Runs every load at the same time, one wrk process each (`-t1`), for `seconds`. With `pid`,
    the server's CPU seconds over the window (before the first wrk starts, after the last ends);
    a lone load's figures then carry its CPU per answer."""
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed on PATH (Debian: apt-get install wrk)")
    with tempfile.TemporaryDirectory() as folder:
        commands = []
        for load in loads:
            cmd = ["wrk", "-t1", f"-c{load.connections}", f"-d{seconds}s"]
            cmd += ["--timeout", f"{WRK_WAIT_S}s"]
            cmd += ["-s", str(_script(load, folder)), load.url]
            for k, v in load.headers.items():
                cmd += ["-H", f"{k}: {v}"]
            commands.append(cmd)
        before = server_cpu(pid) if pid else 0.0
        procs = [
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for cmd in commands
        ]
        outs = [p.communicate() for p in procs]
        cpu = server_cpu(pid) - before if pid else None
    figures = []
    for load, proc, (out, err) in zip(loads, procs, outs, strict=True):
        if proc.returncode != 0:
            raise RuntimeError(f"wrk failed for {load.name} ({proc.returncode}): {err}")
        figures.append(_figures(load, out))
    if cpu is not None and len(figures) == 1 and figures[0].requests:
        figures[0].cpu_us = 1e6 * cpu / figures[0].requests
    return figures, cpu


def wrk(
    name: str,
    url: str,
    headers: dict[str, str],
    seconds: int,
    connections: int,
    script: str | Path | None = None,
    *,
    pid: int = 0,
    expect: int = 200,
    body_has: str = "",
) -> Figures:
    """One load alone. `script`: a wrk Lua script (`-s`), e.g. one that builds each request
    itself; `pid`: the server's process, whose CPU per answer the figures then carry; `expect`
    (and `body_has`): the answer counted, any other one is counted as wrong."""
    load = Load(name, url, headers, connections, script, expect, body_has)
    return run_loads([load], seconds, pid)[0][0]


def _cpu(f: Figures) -> str:
    return "-" if f.cpu_us is None else f"{f.cpu_us:.0f}"


def cpu_share(f: Figures, baseline: Figures) -> float | None:
    """The bare route's CPU per answer over this row's: its share of the bare route in CPU."""
    if f.cpu_us is None or baseline.cpu_us is None or not f.cpu_us:
        return None
    return baseline.cpu_us / f.cpu_us


def report(rows: list[Figures], baseline: Figures) -> str:
    """One line per row: its figures, its req/s as a share of the baseline's (`vs base`), its p99
    as a multiple of the baseline's (`p99 x`), the server's CPU per answer (`cpu µs`) and the
    baseline's CPU per answer over it (`cpu share`: the share of the bare route in CPU terms);
    then the answers not counted (`wrong`: any status but the expected one) and wrk's timeouts."""
    lines = [
        f"{'target':<44}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'vs base':>9}{'p99 x':>7}"
        f"{'cpu µs':>8}{'cpu share':>10}{'wrong':>7}{'timeouts':>9}"
    ]
    for f in rows:
        share = cpu_share(f, baseline)
        lines.append(
            f"{f.name:<44}{f.rps:>9.0f}{f.p50_ms:>9.2f}{f.p99_ms:>9.2f}"
            f"{f.rps / baseline.rps:>9.3f}{f.p99_ms / baseline.p99_ms:>7.2f}{_cpu(f):>8}"
            f"{'-' if share is None else f'{share:.3f}':>10}{f.non_2xx:>7}{f.timeouts:>9}"
        )
    return "\n".join(lines)


def check_answers(rows: Sequence[Figures]) -> None:
    """Exits non-zero, naming each row, when any measured row had answers other than the
    expected one: its rate would be a rate of refusals."""
    wrong = [f for f in rows if f.non_2xx]
    if wrong:
        for f in wrong:
            print(f"WRONG ANSWERS in {f.name}: {f.non_2xx} of {f.requests}: {f.statuses}")
        sys.exit(1)


def ledger_verify_cli(server: Server) -> tuple[bool, str]:
    """`multibank ledger verify` on the server's database: clean or not, and what it printed."""
    env = {**os.environ, "MULTIBANK_DATABASE_URL": server.database_url}
    env["MULTIBANK_LOG_LEVEL"] = "WARNING"
    out = subprocess.run(
        [str(VENV_BIN / "multibank"), "ledger", "verify"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return out.returncode == 0, (out.stdout + out.stderr).strip()
