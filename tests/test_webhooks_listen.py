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
from pathlib import Path

import httpx
from sqlalchemy import select

from multibank.kernel.context import Container
from multibank.programmes.models import Programme
from multibank.webhooks.delivery import Claimed, send, signatures
from multibank.webhooks.listen import listen
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
    task = asyncio.create_task(listen(container.db, name, "127.0.0.1", 0, lines.append, stop))
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
    assert lines[1:] == [
        "POST /managed_accounts/watch  managed_accounts CREATED  resource 123"
        "  signature ok  signature-v2 ok",
        "POST /transfers/watch  transfers COMPLETED  resource 456"
        "  signature ok  signature-v2 MISMATCH",
        "POST /login/watch  login VERIFIED  resource 7  signature MISMATCH  signature-v2 MISMATCH",
        "POST /fees/watch  not JSON: b'not json'  signature missing  signature-v2 missing",
        "POST /managed_accounts/watch  managed_accounts CREATED  resource 123"
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
    assert (proc.returncode, out, err.decode()) == (
        1,
        b"",
        "Programme 'no-such-programme' not found\n",
    )


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
