"""`multibank webhooks listen`: the listener in-process (an event sent by the server's own
sender, badly signed and unsigned ones, a body that is not JSON, the programme's webhook URL
while listening and after), and the real command as a subprocess stopped with Ctrl-C (SIGINT).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from multibank.container import Container
from multibank.devloop.listen import ListenError, listen
from multibank.kernel.ids import new_id
from multibank.programmes.models import Programme
from multibank.webhooks.delivery import Claimed, send, signatures
from multibank.webhooks.models import PENDING, WebhookEvent
from tests.api.webhook_support import receiving
from tests.conftest import ProgrammeFactory

MULTIBANK = Path(sys.executable).with_name("multibank")
OLD_URL = "http://example.invalid/old"
STAMP = 1_700_000_000_000
ACCOUNT_EVENT = {
    "account": {"id": {"id": "123", "type": "managed_accounts"}, "currency": "EUR"},
    "publishedTimestamp": str(STAMP),
    "type": "CREATED",
}
TRANSFER_EVENT = {
    "eventType": "COMPLETED",
    "transfer": {"id": {"type": "transfers", "id": "456"}, "state": "COMPLETED"},
    "publishedTimestamp": str(STAMP),
}
LOGIN_EVENT = {"credential": {"type": "ROOT", "id": "7"}, "type": "PASSWORD", "status": "VERIFIED"}
# A card authorisation refused for want of money, as cards/events.py writes one (abridged).
DECLINED_EVENT = {
    "id": {"type": "managed_cards", "id": "555"},
    "transactionId": "901",
    "transactionAmount": {"currency": "EUR", "amount": "-5000"},
    "approved": False,
    "declineReason": "INSUFFICIENT_FUNDS",
    "authRuleFailedReason": "",
    "authorisationType": "DECLINED",
    "transactionType": "SALE_PURCHASE",
}
AUTHORISED_EVENT = {**DECLINED_EVENT, "approved": True, "declineReason": "NO_REASON"}
AUTHORISED_EVENT["authorisationType"] = "AUTHORISED"
AT = datetime(2026, 12, 7, 17, 30, 1, tzinfo=UTC)
WHEN = "2026-12-07 17:30:01"


def at() -> datetime:
    return AT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MULTIBANK_")}
    env["MULTIBANK_DATABASE_URL"] = database_url
    env["MULTIBANK_LOG_LEVEL"] = "WARNING"
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "multibank-pycache"))
    return env


async def _new_programme(container: Container, programme: ProgrammeFactory) -> tuple[str, str]:
    """A sandbox programme whose webhook URL is OLD_URL: its name and API key (its secret)."""
    p = await programme(webhookUrl=OLD_URL)
    async with container.db.transaction() as session:
        row = await session.get(Programme, int(p.id))
        assert row is not None
        return row.name, p.api_key


async def _url_of(container: Container, name: str) -> str | None:
    async with container.db.transaction() as session:
        query = select(Programme.webhook_url).where(Programme.name == name)
        return (await session.execute(query)).scalar_one()


def _signed(
    secret: str, call_ref: str, body: bytes, signed_body: bytes | None = None
) -> dict[str, str]:
    v1, v2 = signatures(secret, call_ref, body if signed_body is None else signed_body, STAMP)
    return {
        "content-type": "application/json",
        "call-ref": call_ref,
        "published-timestamp": str(STAMP),
        "signature": v1,
        "signature-v2": v2,
    }


async def _listening(lines: list[str], task: asyncio.Task[None]) -> str:
    """The URL of the listener once it says it listens."""
    for _ in range(600):
        if task.done():
            raise AssertionError(task.result(), lines)
        for line in lines:
            if line.startswith("listening on "):
                return line.split()[2]
        await asyncio.sleep(0.05)
    raise AssertionError(lines)


async def test_the_listener_checks_both_signatures_and_puts_the_url_back(
    container: Container, programme: ProgrammeFactory
) -> None:
    name, secret = await _new_programme(container, programme)
    lines: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(
        listen(container.db, name, "127.0.0.1", 0, lines.append, stop, now=at)
    )
    url = await _listening(lines, task)
    assert lines == [f"listening on {url} for programme {name} (previous URL: {OLD_URL})"]
    assert await _url_of(container, name) == url

    async with httpx.AsyncClient(timeout=10) as client:
        # As the server sends an event: its own signing and HTTP client.
        body = json.dumps(ACCOUNT_EVENT).encode()
        event = Claimed(1, f"{url}/managed_accounts/watch", secret, "ref-1", body, 0, False)
        result = await send(client, event, STAMP, allow_private=False)
        assert (result.status, result.error) == (204, None)
        # signature-v2 over another body; then both made with another key.
        body = json.dumps(TRANSFER_EVENT).encode()
        headers = _signed(secret, "ref-2", body, signed_body=b"{}")
        r = await client.post(f"{url}/transfers/watch", content=body, headers=headers)
        assert r.status_code == 204
        body = json.dumps(LOGIN_EVENT).encode()
        headers = _signed("another-key", "ref-3", body)
        r = await client.post(f"{url}/login/watch", content=body, headers=headers)
        assert r.status_code == 204
        # Not JSON, not signed: said so, answered 400, and the listener keeps working.
        r = await client.post(f"{url}/fees/watch", content=b"not json")
        assert r.status_code == 400
        body = json.dumps(ACCOUNT_EVENT).encode()
        headers = _signed(secret, "ref-4", body)
        r = await client.post(f"{url}/managed_accounts/watch", content=body, headers=headers)
        assert r.status_code == 204

    stop.set()
    await asyncio.wait_for(task, 30)
    # Sent by hand, these events are in no database: their id is not known.
    assert lines[1:] == [
        f"{WHEN}  event ?  POST /managed_accounts/watch  managed_accounts CREATED  resource 123"
        "  signature ok  signature-v2 ok",
        f"{WHEN}  event ?  POST /transfers/watch  transfers COMPLETED  resource 456"
        "  signature ok  signature-v2 MISMATCH",
        f"{WHEN}  event ?  POST /login/watch  login VERIFIED  resource 7"
        "  signature MISMATCH  signature-v2 MISMATCH",
        f"{WHEN}  event ?  POST /fees/watch  not JSON: b'not json'"
        "  signature missing  signature-v2 missing",
        f"{WHEN}  event ?  POST /managed_accounts/watch  managed_accounts CREATED  resource 123"
        "  signature ok  signature-v2 ok",
        f"restored the webhook URL of programme {name}: {OLD_URL}",
    ]
    assert await _url_of(container, name) == OLD_URL


async def test_the_command_puts_the_url_back_on_ctrl_c(
    container: Container, programme: ProgrammeFactory, database_url: str
) -> None:
    name, secret = await _new_programme(container, programme)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = await asyncio.create_subprocess_exec(
        str(MULTIBANK),
        *("webhooks", "listen", "--programme", name, "--port", str(port)),
        env=_env(database_url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        first = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert first == f"listening on {url} for programme {name} (previous URL: {OLD_URL})\n", (
            first or (await proc.stderr.read()).decode()
        )
        assert await _url_of(container, name) == url
        body = json.dumps(ACCOUNT_EVENT).encode()
        async with httpx.AsyncClient(timeout=10) as client:
            r = await client.post(
                f"{url}/managed_accounts/watch", content=body, headers=_signed(secret, "r", body)
            )
        assert r.status_code == 204
        printed = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert printed.endswith("resource 123  signature ok  signature-v2 ok\n"), printed
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert out.decode() == f"restored the webhook URL of programme {name}: {OLD_URL}\n"
    assert await _url_of(container, name) == OLD_URL


async def test_an_unknown_programme_is_refused(container: Container, database_url: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        str(MULTIBANK),
        *("webhooks", "listen", "--programme", "no-such-programme", "--port", "0"),
        env=_env(database_url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    # The database it opened, named first (decision 0066), then the refusal alone.
    said = err.decode().splitlines()
    assert (proc.returncode, out) == (1, b""), err
    assert len(said) == 2 and said[0].startswith("database: "), said
    assert said[1] == "Programme 'no-such-programme' not found"


async def test_the_listeners_url_changes_are_audited(
    container: Container, programme: ProgrammeFactory
) -> None:
    """Issue 41 §5: pointing the programme's webhook URL at the listener, and back, are changes
    of its settings: each is in the audit log, by `cli`, with the URL before and after."""
    from multibank.audit.models import AuditRecord

    name, _ = await _new_programme(container, programme)
    lines: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(listen(container.db, name, "127.0.0.1", 0, lines.append, stop))
    url = await _listening(lines, task)
    stop.set()
    await asyncio.wait_for(task, 30)
    async with container.db.transaction() as session:
        pid = (await session.execute(select(Programme.id).where(Programme.name == name))).scalar()
        rows = list(
            await session.scalars(
                select(AuditRecord).where(AuditRecord.programme_id == pid).order_by(AuditRecord.seq)
            )
        )
    assert [(r.actor, r.action, r.changes, r.note) for r in rows] == [
        (
            "cli",
            "webhooks.listen",
            {"settings.webhookUrl": [OLD_URL, url]},
            "webhooks listen started",
        ),
        (
            "cli",
            "webhooks.listen",
            {"settings.webhookUrl": [url, OLD_URL]},
            "webhooks listen ended",
        ),
    ]


async def _stored(container: Container, programme_name: str, path: str, body: bytes) -> int:
    """An event recorded for the programme as `emit` records one: its id."""
    event_id = new_id()
    async with container.db.transaction() as session:
        pid = (
            await session.execute(select(Programme.id).where(Programme.name == programme_name))
        ).scalar_one()
        kind = json.loads(body)["authorisationType"]
        session.add(
            WebhookEvent(
                id=event_id,
                programme_id=pid,
                path=path,
                event_type=f"{path.removesuffix('/watch').lstrip('/')}.{kind}",
                resource="managed_cards:555",
                call_ref=f"ref-{event_id}",
                payload=body.decode(),
                state=PENDING,
                attempts=0,
                next_attempt_at=STAMP,
                created_at=STAMP,
            )
        )
    return event_id


AUTHORISATIONS = "/managed_cards/authorisations/watch"


async def test_each_line_names_the_event_id_and_a_declined_authorisation_says_why(
    container: Container, programme: ProgrammeFactory
) -> None:
    """The id printed is the stored event's (the one `webhooks replay` takes), found by the
    call-ref it came with; a card authorisation shows AUTHORISED or DECLINED and the reason.
    An event of another programme sent here is not named."""
    name, secret = await _new_programme(container, programme)
    other, _ = await _new_programme(container, programme)
    declined = json.dumps(DECLINED_EVENT).encode()
    authorised = json.dumps(AUTHORISED_EVENT).encode()
    refused_id = await _stored(container, name, AUTHORISATIONS, declined)
    approved_id = await _stored(container, name, AUTHORISATIONS, authorised)
    foreign_id = await _stored(container, other, AUTHORISATIONS, authorised)
    lines: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(
        listen(container.db, name, "127.0.0.1", 0, lines.append, stop, now=at)
    )
    url = await _listening(lines, task)
    async with httpx.AsyncClient(timeout=10) as client:
        for event_id, body in (
            (refused_id, declined),
            (approved_id, authorised),
            (foreign_id, authorised),
        ):
            event = Claimed(
                event_id, f"{url}{AUTHORISATIONS}", secret, f"ref-{event_id}", body, 0, False
            )
            result = await send(client, event, STAMP, allow_private=False)
            assert result.status == 204
    stop.set()
    await asyncio.wait_for(task, 30)
    topic = "managed_cards/authorisations"
    assert lines[1:4] == [
        f"{WHEN}  event {refused_id}  POST {AUTHORISATIONS}  {topic} DECLINED (INSUFFICIENT_FUNDS)"
        "  resource 555  signature ok  signature-v2 ok",
        f"{WHEN}  event {approved_id}  POST {AUTHORISATIONS}  {topic} AUTHORISED"
        "  resource 555  signature ok  signature-v2 ok",
        f"{WHEN}  event ?  POST {AUTHORISATIONS}  {topic} AUTHORISED"
        "  resource 555  signature ok  signature-v2 ok",
    ]


async def test_forward_to_sends_each_event_on_as_it_came_and_answers_with_the_app_status(
    container: Container, programme: ProgrammeFactory
) -> None:
    """As `stripe listen --forward-to`: the developer's app gets the body and the headers
    (call-ref, timestamp, both signatures) the server sent, at the app's URL plus the event's
    path; its status is printed and is what the server is answered, so its retries work as
    against the app itself; an app that does not answer is a 502."""
    name, secret = await _new_programme(container, programme)
    body = json.dumps(AUTHORISED_EVENT).encode()
    event_id = await _stored(container, name, AUTHORISATIONS, body)
    lines: list[str] = []
    stop = asyncio.Event()
    with receiving() as app:
        app.answer = lambda path, n: (204, b"", {}) if n == 0 else (500, b"app broke", {})
        task = asyncio.create_task(
            listen(container.db, name, "127.0.0.1", 0, lines.append, stop, app.url, now=at)
        )
        url = await _listening(lines, task)
        assert lines[1] == f"forwarding each event to {app.url} + its path"
        event = Claimed(
            event_id, f"{url}{AUTHORISATIONS}", secret, f"ref-{event_id}", body, 0, False
        )
        async with httpx.AsyncClient(timeout=10) as client:
            first = await send(client, event, STAMP, allow_private=False)
            second = await send(client, event, STAMP + 1, allow_private=False)
        assert (first.status, first.delivered) == (204, True)
        assert (second.status, second.delivered) == (500, False)
        assert second.excerpt == "app broke"
        got = app.of(f"/hooks{AUTHORISATIONS}")
        assert [r.body for r in got] == [body, body]
        for r, stamp in zip(got, (STAMP, STAMP + 1), strict=True):
            assert r.headers["call-ref"] == f"ref-{event_id}"
            assert r.headers["published-timestamp"] == str(stamp)
            v1, v2 = signatures(secret, f"ref-{event_id}", body, stamp)
            assert (r.headers["signature"], r.headers["signature-v2"]) == (v1, v2)
            assert r.headers["content-type"] == "application/json"
    # The app is gone: the server is told 502, the line says why.
    async with httpx.AsyncClient(timeout=10) as client:
        gone = await send(client, event, STAMP + 2, allow_private=False)
    assert gone.status == 502
    stop.set()
    await asyncio.wait_for(task, 30)
    arrived = f"{WHEN}  event {event_id}  POST {AUTHORISATIONS}"
    forwarded = f"{WHEN}  event {event_id}  -> POST {app.url}{AUTHORISATIONS}"
    assert lines[2].startswith(arrived) and lines[2].endswith("signature ok  signature-v2 ok")
    assert lines[3] == f"{forwarded}  [204]"
    assert lines[4].startswith(arrived)
    assert lines[5] == f"{forwarded}  [500]"
    assert lines[6].startswith(arrived)
    assert lines[7].startswith(f"{forwarded}  [not answered: ConnectError"), lines[7]


async def test_forward_to_must_be_a_base_url(
    container: Container, programme: ProgrammeFactory
) -> None:
    name, _ = await _new_programme(container, programme)
    for wrong in ("localhost:3000", "ftp://x/", "http://x/?a=1"):
        with pytest.raises(ListenError, match="not an http\\(s\\) base URL"):
            await listen(container.db, name, "127.0.0.1", 0, print, asyncio.Event(), wrong)
    port = _free_port()
    itself = f"http://127.0.0.1:{port}/"
    with pytest.raises(ListenError, match="it is this listener itself"):
        await listen(container.db, name, "127.0.0.1", port, print, asyncio.Event(), itself)
    assert await _url_of(container, name) == OLD_URL
