"""Shared bench plumbing: start servers on loopback, drive them with wrk, parse the figures."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        full_env = {
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
            yield Server(base, key, profiles, proc.pid)
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
def bare_server() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [str(VENV_BIN / "python"), "bare_app.py", "--port", str(port)],
        cwd=Path(__file__).parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(f"{base}/ping")
        yield base
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


def fund(base: str, api_key: str, headers: dict[str, str], account_id: str, amount: int) -> None:
    """Gives the account its IBAN (owner's upgrade, simulator allocation) and deposits `amount`:
    money from outside reaches only an account with an allocated IBAN."""
    iban = call("POST", f"{base}/multi/managed_accounts/{account_id}/iban", headers)
    sim = {"programme-key": api_key}
    if iban["state"] == "PENDING_ALLOCATION":
        call("POST", f"{base}/simulate/api/managed_accounts/{account_id}/iban/allocate", sim)
    body = {"depositAmount": {"currency": "EUR", "amount": amount}}
    out = call("POST", f"{base}/simulate/api/accounts/{account_id}/deposit", sim, body)
    assert out == {"code": "COMPLETED"}, out


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


@dataclass
class Figures:
    name: str
    rps: float
    p50_ms: float
    p99_ms: float
    non_2xx: int


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    if not m:
        raise ValueError(text)
    return float(m.group(1)) * _UNITS[m.group(2)]


def wrk(
    name: str,
    url: str,
    headers: dict[str, str],
    seconds: int,
    connections: int,
    script: str | Path | None = None,
) -> Figures:
    """`script`: a wrk Lua script (`-s`), e.g. one that builds each request itself."""
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed on PATH (Debian: apt-get install wrk)")
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
    if script is not None:
        cmd += ["-s", str(script)]
    cmd.append(url)
    for k, v in headers.items():
        cmd += ["-H", f"{k}: {v}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    # Anchored: a "+/- Stdev" figure such as "81.50%" must not pass for the 50% percentile.
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return Figures(name, rps, p50, p99, int(bad.group(1)) if bad else 0)


def report(rows: list[Figures], baseline: Figures) -> str:
    """One line per row: its figures, its req/s as a share of the baseline's (`vs base`) and its
    p99 as a multiple of the baseline's (`p99 x`)."""
    lines = [
        f"{'target':<44}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'vs base':>10}{'p99 x':>8}"
        f"{'non-2xx':>9}"
    ]
    for f in rows:
        lines.append(
            f"{f.name:<44}{f.rps:>10.0f}{f.p50_ms:>10.2f}{f.p99_ms:>10.2f}"
            f"{f.rps / baseline.rps:>10.3f}{f.p99_ms / baseline.p99_ms:>8.2f}{f.non_2xx:>9}"
        )
    return "\n".join(lines)
