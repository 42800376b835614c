"""`multibank webhooks listen`: receive a programme's webhook events on this machine.

The programme's webhook URL is pointed at a small HTTP server started here. Each event that
arrives is printed on one line: the time it arrived, its event id (looked up by its `call-ref`:
the id `webhooks replay` takes), path, event type (a card authorisation's AUTHORISED or
DECLINED with the decline reason), resource id, and whether each of its two signatures
verifies with the programme's secret. It is answered 204 (400 when the body is not JSON); with
`forward_to`, it is sent on, body and headers as they came (signatures included), to the
developer's own app, whose status is printed and answered back to the server, so the server's
retries behave as they would against the app itself (decision 0068). When the listener stops,
the previous URL is put back, unless the URL was changed by someone else meanwhile.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import socketserver
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from email.message import Message
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

import httpx

from multibank.audit import service as audit
from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.programmes.service import require_programme, require_programme_by_name
from multibank.webhooks.delivery import TIMEOUT_SECONDS, secret_of, signatures
from multibank.webhooks.events import topic
from multibank.webhooks.service import by_call_ref

Out = Callable[[str], None]
Now = Callable[[], datetime]

MAX_BODY = 1_000_000
# What of the app's answer goes back to the server (which keeps its first 200 characters).
ANSWER_EXCERPT = 1000
LOOKUP_SECONDS = 5.0
# Where the payloads (events.py, cards/events.py) keep the event type and the id of what they
# are about; the type as stored with the event is used when the event is found.
TYPE_FIELDS = (
    "authorisationType",
    "settlementType",
    "adjustmentType",
    "eventType",
    "status",
    "type",
    "state",
)
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
# Headers that belong to one connection, not to the event: never forwarded (RFC 9110 §7.6.1),
# nor `host` and `content-length`, which the forwarding request sets for its own target.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
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


def _reason(payload: dict[str, Any]) -> str:
    """` (INSUFFICIENT_FUNDS)` for a declined card authorisation, with the spend rule that
    failed when one did; empty for anything else."""
    if payload.get("approved") is not False:
        return ""
    said = [
        r
        for f in ("declineReason", "authRuleFailedReason")
        if (r := _text(payload.get(f))) and r not in ("NO_REASON", "")
    ]
    return f" ({', '.join(said) or 'no reason given'})"


def describe(path: str, payload: Any, event_type: str | None = None) -> str:
    """`managed_accounts CREATED  resource 123` for an event of `path` with `payload`; the kind
    is `event_type`'s (`{topic}.{kind}`, as stored) when the event is known."""
    if not isinstance(payload, dict):
        return f"{topic(path)} (payload is JSON but not an object)"
    kind = event_type.rsplit(".", 1)[-1] if event_type else None
    if kind is None:
        kind = next((t for f in TYPE_FIELDS if (t := _text(payload.get(f)))), None)
    if kind is None:  # an outgoing wire transfer's is its state
        nested = (_dig(v, ("state",)) for v in payload.values())
        kind = next((t for t in nested if t), "?")
    resource = next((r for p in RESOURCE_PATHS if (r := _dig(payload, p))), "?")
    return f"{topic(path)} {kind}{_reason(payload)}  resource {resource}"


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


@dataclass(frozen=True)
class Known:
    """What the database says of an arriving event: its id and type as stored."""

    event_id: int
    event_type: str


@dataclass(frozen=True)
class Receiver:
    """What each request of the listener needs: the programme's secret, where to print, how to
    find an event by its call-ref, the clock of the printed times, and the app to forward to."""

    secret: str
    out: Out
    lookup: Callable[[str], Known | None]
    now: Now
    forward_to: str | None
    client: httpx.Client | None


def local_now() -> datetime:
    return datetime.now().astimezone()


def _forward(
    r: Receiver, path: str, headers: Message, body: bytes
) -> tuple[int, bytes, str | None, str]:
    """Sends the event on to the app: (status to answer the server, body, its content type,
    what to print)."""
    assert r.forward_to is not None and r.client is not None
    url = f"{r.forward_to}{path}"
    kept = [(k, v) for k, v in headers.items() if k.lower() not in HOP_BY_HOP]
    try:
        answer = r.client.post(url, content=body, headers=kept)
    except httpx.HTTPError as exc:
        said = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return 502, b"", None, f"-> POST {url}  [not answered: {said}]"
    return (
        answer.status_code,
        answer.content[:ANSWER_EXCERPT],
        answer.headers.get("content-type"),
        f"-> POST {url}  [{answer.status_code}]",
    )


def _handler(r: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the delivering server expects
        timeout = 60  # an idle connection ends
        server_version = "multibank-listen"

        def do_POST(self) -> None:
            at = r.now().strftime("%Y-%m-%d %H:%M:%S")
            length = self.headers.get("content-length", "")
            if not length.isdigit() or int(length) > MAX_BODY:
                r.out(f"{at}  POST {self.path}  no content-length, or over {MAX_BODY} bytes")
                self.close_connection = True
                self._answer(411 if not length.isdigit() else 413)
                return
            body = self.rfile.read(int(length))
            checks = verdicts(r.secret, self.headers, body)
            call_ref = self.headers.get("call-ref")
            known = r.lookup(call_ref) if call_ref else None
            event = f"event {known.event_id}" if known else "event ?"
            try:
                payload = json.loads(body)
            except ValueError:
                r.out(f"{at}  {event}  POST {self.path}  not JSON: {body[:80]!r}  {checks}")
                self._answer(400)
                return
            kind = known.event_type if known else None
            said = describe(self.path, payload, kind)
            r.out(f"{at}  {event}  POST {self.path}  {said}  {checks}")
            if r.forward_to is None:
                self._answer(204)
                return
            status, content, content_type, line = _forward(r, self.path, self.headers, body)
            r.out(f"{r.now().strftime('%Y-%m-%d %H:%M:%S')}  {event}  {line}")
            self._answer(status, content, content_type)

        def _answer(self, status: int, body: bytes = b"", content_type: str | None = None) -> None:
            self.send_response(status)
            if status in (204, 304) or status < 200:  # no body, and no length said
                self.end_headers()
                return
            if body and content_type:
                self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per event is printed by do_POST

    return Handler


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _bind(host: str, port: int, receiver: Receiver) -> _Server:
    try:
        return _Server((host, port), _handler(receiver))
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


def _finder(
    db: Database, programme_id: int, loop: asyncio.AbstractEventLoop
) -> Callable[[str], Known | None]:
    """Looks an event up by call-ref from a request's thread, on the listener's event loop
    (where the database is used); an event of another programme, or none, is not known."""

    async def find(call_ref: str) -> Known | None:
        async with db.transaction() as session:
            event = await by_call_ref(session, call_ref)
            if event is None or event.programme_id != programme_id:
                return None
            return Known(event.id, event.event_type)

    def lookup(call_ref: str) -> Known | None:
        future = asyncio.run_coroutine_threadsafe(find(call_ref), loop)
        try:
            return future.result(LOOKUP_SECONDS)
        except Exception:  # a timeout, a database error: the line is printed without the id
            future.cancel()
            return None

    return lookup


def forward_target(url: str) -> str:
    """`url` as the base URL events are forwarded to; ListenError unless it is one."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise ListenError(f"cannot forward to {url!r}: not an http(s) base URL")
    return url.rstrip("/")


async def listen(
    db: Database,
    programme_name: str,
    host: str,
    port: int,
    out: Out,
    stop: asyncio.Event,
    forward_to: str | None = None,
    now: Now = local_now,
) -> None:
    """Receives the programme's events on `host`:`port` (0: any free port) until `stop` is set,
    then puts its previous webhook URL back. With `forward_to` (a base URL), sends each on to
    `{forward_to}{path}`. Raises NotFound for an unknown programme and ListenError when it
    cannot start."""
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
    target = forward_target(forward_to) if forward_to else None
    client = None
    if target is not None:
        # As the server sends: its timeout, and no redirects followed.
        client = httpx.Client(timeout=TIMEOUT_SECONDS, follow_redirects=False)
    lookup = _finder(db, pid, asyncio.get_running_loop())
    receiver = Receiver(secret, out, lookup, now, target, client)
    try:
        server = _bind(host, port, receiver)
    except ListenError:
        if client is not None:
            client.close()
        raise
    url = f"http://{host}:{server.server_address[1]}"
    if target is not None and target.startswith(f"{url}"):
        server.server_close()
        if client is not None:
            client.close()
        raise ListenError(f"cannot forward to {forward_to!r}: it is this listener itself")
    threading.Thread(target=server.serve_forever, name="webhooks-listen", daemon=True).start()
    name, was = programme_name, previous or "none"
    try:
        if not await _swap_url(db, pid, previous, url, "webhooks listen started"):
            raise ListenError(f"the webhook URL of programme {name!r} changed just now")
        out(f"listening on {url} for programme {name} (previous URL: {was})")
        if target is not None:
            out(f"forwarding each event to {target} + its path")
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
        if client is not None:
            client.close()
