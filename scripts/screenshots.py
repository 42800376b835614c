"""Screenshots of the web portal's main pages, for reviews and the README (not committed).

Starts `multibank serve` on a fresh SQLite database, signs in, makes a customer with a funded
account, makes a transfer and an outgoing wire transfer waiting for the operator happen
(`multibank webhooks trigger`, which also writes their webhook events), and saves a PNG of each
main page at a laptop's and at a phone's width: the overview, customers, a customer, its
statement, payments, a payment's detail, webhook events, a delivery's detail, the audit log,
cards, the ledger and the inbox.

Usage: .venv/bin/python scripts/screenshots.py [--out screenshots]
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, sync_playwright

from multibank.identities.samples import corporate_signup

BIN = Path(sys.executable).parent
ADMIN = f"shots-{secrets.token_hex(12)}"


class Received(http.server.BaseHTTPRequestHandler):
    """A webhook receiver that takes every event."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


def call(base: str, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{base}{path}",
        data=data,
        method=method,
        headers={"content-type": "application/json", **headers},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        raw = answer.read()
        return json.loads(raw) if raw else None


def customer(base: str, key: str, profiles: dict[str, str]) -> str:
    """A verified corporate with a funded EUR account; answers its id."""
    h = {"api-key": key}
    email = f"ada{secrets.token_hex(3)}@example.com"
    created = call(
        base,
        "POST",
        "/multi/corporates",
        h,
        corporate_signup(profiles["corporate"], email, company="Analytical Engines Ltd"),
    )
    for step, extra in (("send", {}), ("verify", {"verificationCode": "123456"})):
        call(
            base,
            "POST",
            f"/multi/corporates/verification/email/{step}",
            h,
            {"email": email, **extra},
        )
    token = call(
        base,
        "POST",
        f"/multi/passwords/{created['rootUser']['id']['id']}/create",
        h,
        {"password": {"value": "Screen-Shot1"}},
    )["token"]
    sim = {"programme-key": key}
    call(base, "POST", f"/simulate/api/corporates/{created['id']['id']}/verify", sim)
    auth = {**h, "Authorization": f"Bearer {token}"}
    account = call(
        base,
        "POST",
        "/multi/managed_accounts",
        auth,
        {
            "profileId": profiles["corporateManagedAccount"],
            "friendlyName": "Operations",
            "currency": "EUR",
        },
    )["id"]
    if call(base, "POST", f"/multi/managed_accounts/{account}/iban", auth)["state"] != "ALLOCATED":
        call(base, "POST", f"/simulate/api/managed_accounts/{account}/iban/allocate", sim)
    call(
        base,
        "POST",
        f"/simulate/api/accounts/{account}/deposit",
        sim,
        {"depositAmount": {"currency": "EUR", "amount": 250000}},
    )
    return str(created["id"]["id"])


def shoot(page: Page, base: str, out: Path, pid: str, identity: str, width: str) -> None:
    home = f"{base}/portal/programmes/{pid}"
    pages = {
        "programmes": f"{base}/portal/",
        "overview": f"{home}/overview",
        "programme": home,
        "customers": f"{home}/customers",
        "customer": f"{home}/customers/{identity}",
        "ledger": f"{home}/ledger",
        "inbox": f"{home}/inbox",
        "webhooks": f"{home}/webhooks",
        "payments": f"{home}/payments",
        "cards": f"{home}/cards",
        "audit": f"{home}/audit",
    }
    for name, url in pages.items():
        answer = page.goto(url)
        if answer is None or not answer.ok:
            sys.exit(f"{url} answered {answer and answer.status}")
        page.screenshot(path=str(out / f"{name}-{width}.png"), full_page=True)
    # Pages reached by a link on another: the first one of each list.
    for name, start, link in (
        ("statement", f"{home}/customers/{identity}", "table a[href*='/accounts/']"),
        ("payment", f"{home}/payments", "table a[href*='/payments/']"),
        ("delivery", f"{home}/webhooks", "table a[href*='/webhooks/']"),
    ):
        page.goto(start)
        with page.expect_navigation() as went:
            page.click(f"{link} >> nth=0")
        answer = went.value
        if answer is None or not answer.ok:
            sys.exit(f"{page.url} ({name}) answered {answer and answer.status}")
        page.screenshot(path=str(out / f"{name}-{width}.png"), full_page=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="screenshots")
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with tempfile.TemporaryDirectory() as tmp:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {
            **os.environ,
            "MULTIBANK_DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/shots.db",
            "MULTIBANK_ADMIN_TOKEN": ADMIN,
            "MULTIBANK_LOG_LEVEL": "WARNING",
        }
        server = subprocess.Popen(
            [str(BIN / "multibank"), "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            key, profiles = "", {}
            assert server.stdout is not None
            for raw in server.stdout:
                line = raw.strip()
                if line.startswith("api-key:"):
                    key = line.split(":", 1)[1].strip()
                elif line.startswith("profiles:"):
                    profiles = json.loads(line.split(":", 1)[1])
                    break
            base = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    urllib.request.urlopen(f"{base}/readyz", timeout=1)
                    break
                except OSError:
                    time.sleep(0.2)
            identity = customer(base, key, profiles)
            admin = {"Authorization": f"Bearer {ADMIN}"}
            pid = next(
                p["programmeId"]
                for p in call(base, "GET", "/portal/api/programmes", admin)
                if p["name"] == "default"
            )
            # Events need a webhook URL: a receiver in this process answers each with 200.
            receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Received)
            threading.Thread(target=receiver.serve_forever, daemon=True).start()
            call(
                base,
                "PATCH",
                f"/portal/api/programmes/{pid}/settings",
                admin,
                {"webhookUrl": f"http://127.0.0.1:{receiver.server_address[1]}/hooks"},
            )
            for event in ("transfers.COMPLETED", "outgoing_wire_transfers.SUBMITTED"):
                made = subprocess.run(
                    [str(BIN / "multibank"), "webhooks", "trigger", event],
                    env=env,
                    capture_output=True,
                    text=True,
                )
                if made.returncode:
                    sys.exit(f"webhooks trigger {event}: {made.stdout[-800:]}{made.stderr[-800:]}")
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                for width, size in (("laptop", (1280, 800)), ("phone", (390, 844))):
                    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
                    page.goto(f"{base}/portal/login")
                    page.fill("input[name=token]", ADMIN)
                    page.click("button[type=submit]")
                    page.wait_for_url(re.compile(r".*/portal/$"))
                    shoot(page, base, out, pid, identity, width)
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=20)
    print(f"screenshots in {out}/: " + ", ".join(sorted(p.name for p in out.glob("*.png"))))


if __name__ == "__main__":
    main()
