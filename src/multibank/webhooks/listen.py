"""`multibank webhooks listen`: receive a programme's webhook events on this machine.

The programme's webhook URL is pointed at a small HTTP server started here. Each event that
arrives is printed on one line (path, event type, resource id) with whether each of its two
signatures verifies with the programme's secret, and answered 204 (400 when the body is not
JSON). When the listener stops, the previous URL is put back, unless the URL was changed by
someone else meanwhile.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import socketserver
import threading
from collections.abc import Callable
from email.message import Message
from http.server import BaseHTTPRequestHandler
from typing import Any

from multibank.audit import service as audit
from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.programmes.service import require_programme, require_programme_by_name
from multibank.webhooks.delivery import secret_of, signatures
from multibank.webhooks.events import topic

Out = Callable[[str], None]

MAX_BODY = 1_000_000
# Where the payloads (events.py) keep the event type and the id of what they are about.
TYPE_FIELDS = ("eventType", "status", "type", "state")
RESOURCE_PATHS = (
    ("account", "id", "id"),
    ("transfer", "id", "id"),
    ("send", "id", "id"),
    ("chargeFee", "source", "id"),
    ("iban", "id"),
    ("id", "id"),
    ("corporateId",),
    ("consumerId",),
    ("credential", "id"),
    ("credentialId",),
)


class ListenError(Exception):
    """The listener cannot start: the programme has no signing secret, or the address is taken."""


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, str | int) and not isinstance(value, bool) else None


def _dig(payload: Any, path: tuple[str, ...]) -> str | None:
    for key in path:
        if not isinstance(payload, dict):
            return None
        payload = payload.get(key)
    return _text(payload)


def describe(path: str, payload: Any) -> str:
    """`managed_accounts CREATED  resource 123` for an event of `path` with `payload`."""
    if not isinstance(payload, dict):
        return f"{topic(path)} (payload is JSON but not an object)"
    kind = next((t for f in TYPE_FIELDS if (t := _text(payload.get(f)))), None)
    if kind is None:  # an outgoing wire transfer's is its state
        nested = (_dig(v, ("state",)) for v in payload.values())
        kind = next((t for t in nested if t), "?")
    resource = next((r for p in RESOURCE_PATHS if (r := _dig(payload, p))), "?")
    return f"{topic(path)} {kind}  resource {resource}"


def verdicts(secret: str, headers: Message, body: bytes) -> str:
    """`signature ok  signature-v2 MISMATCH`: each header checked on its own."""
    stamp = headers.get("published-timestamp", "")
    expected: tuple[str | None, str | None] = (None, None)
    if stamp.isascii() and stamp.isdigit():
        expected = signatures(secret, headers.get("call-ref", ""), body, int(stamp))
    out = []
    for name, want in zip(("signature", "signature-v2"), expected, strict=True):
        got = headers.get(name)
        if got is None:
            verdict = "missing"
        elif want is not None and hmac.compare_digest(got.encode("latin-1"), want.encode()):
            verdict = "ok"
        else:
            verdict = "MISMATCH"
        out.append(f"{name} {verdict}")
    return "  ".join(out)


def _handler(secret: str, out: Out) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the delivering server expects
        timeout = 60  # an idle connection ends
        server_version = "multibank-listen"

        def do_POST(self) -> None:
            length = self.headers.get("content-length", "")
            if not length.isdigit() or int(length) > MAX_BODY:
                out(f"POST {self.path}  no content-length, or over {MAX_BODY} bytes: not read")
                self.close_connection = True
                self._answer(411 if not length.isdigit() else 413)
                return
            body = self.rfile.read(int(length))
            checks = verdicts(secret, self.headers, body)
            try:
                payload = json.loads(body)
            except ValueError:
                out(f"POST {self.path}  not JSON: {body[:80]!r}  {checks}")
                self._answer(400)
                return
            out(f"POST {self.path}  {describe(self.path, payload)}  {checks}")
            self._answer(204)

        def _answer(self, status: int) -> None:
            self.send_response(status)
            if status != 204:  # a 204 has no body, and says no length
                self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per event is printed by do_POST

    return Handler


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _bind(host: str, port: int, secret: str, out: Out) -> _Server:
    try:
        return _Server((host, port), _handler(secret, out))
    except OSError as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


async def _swap_url(
    db: Database, programme_id: int, old: str | None, new: str | None, note: str
) -> bool:
    """Sets the programme's webhook URL to `new` if it is still `old`; answers whether it did.
    Recorded in the audit log, as any change of a programme's settings is (issue 41 §5)."""
    async with db.transaction() as session:
        programme = await require_programme(session, programme_id)
        if programme.webhook_url != old:
            return False
        programme.webhook_url = new
        await audit.record(
            session,
            Clock().system_ms(),
            audit.CLI,
            "webhooks.listen",
            programme_id,
            changes={"settings.webhookUrl": [old, new]},
            note=note,
        )
        return True


async def listen(
    db: Database, programme_name: str, host: str, port: int, out: Out, stop: asyncio.Event
) -> None:
    """Receives the programme's events on `host`:`port` (0: any free port) until `stop` is set,
    then puts its previous webhook URL back. Raises NotFound for an unknown programme and
    ListenError when it cannot start."""
    async with db.transaction() as session:
        programme = await require_programme_by_name(session, programme_name)
        pid, previous, live = programme.id, programme.webhook_url, programme.mode != "sandbox"
        secret = await secret_of(session, programme)
    if secret is None:
        why = (
            f"no webhook secret: create one with POST /portal/api/programmes/{pid}/webhook_secret"
            if live
            else "no API key left to sign its events with"
        )
        raise ListenError(f"programme {programme_name!r} has {why}")
    server = _bind(host, port, secret, out)
    url = f"http://{host}:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, name="webhooks-listen", daemon=True).start()
    name, was = programme_name, previous or "none"
    try:
        if not await _swap_url(db, pid, previous, url, "webhooks listen started"):
            raise ListenError(f"the webhook URL of programme {name!r} changed just now")
        out(f"listening on {url} for programme {name} (previous URL: {was})")
        if live:
            out(
                "note: the server delivers a live programme's events to a loopback or private "
                "address only when it runs with MULTIBANK_WEBHOOKS_ALLOW_PRIVATE=true"
            )
        try:
            await stop.wait()
        finally:
            if await _swap_url(db, pid, url, previous, "webhooks listen ended"):
                out(f"restored the webhook URL of programme {name}: {was}")
            else:
                out(f"the webhook URL of programme {name} was changed meanwhile: left as it is")
    finally:
        await asyncio.to_thread(server.shutdown)
        server.server_close()
