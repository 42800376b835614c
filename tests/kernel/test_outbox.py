"""Delivery of outbox messages (D1, D9): sandbox rows never leave, live rows leave once, failures
stay pending, and SMTP really delivers to a real (in-process) SMTP server.

The module has a database of its own (migrated from empty), because delivery takes every pending
row in the database: it must not see, or send, the rows other tests leave behind.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from sqlalchemy import select, update

from multibank.app import build_container, create_app
from multibank.kernel import notify
from multibank.kernel.db import Database
from multibank.kernel.ids import new_id
from multibank.kernel.migrate import upgrade
from multibank.kernel.notify import (
    ChannelNotifier,
    LogNotifier,
    OutboxMessage,
    SmtpNotifier,
    build_notifier,
)
from multibank.kernel.outbox import DeliveryPolicy, OutboxWorker, deliver_pending
from multibank.settings import Settings
from tests.conftest import empty_database

NOW = 1_800_000_000_000


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def outbox_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    async with empty_database(tmp_path_factory.mktemp("outbox"), "outbox") as url:
        yield url


@pytest.fixture(scope="module")
async def migrated(outbox_url: str) -> str:
    db = Database(outbox_url)
    try:
        await upgrade(db)
    finally:
        await db.dispose()
    return outbox_url


@pytest.fixture
async def db(migrated: str) -> AsyncIterator[Database]:
    """The module's database, emptied of messages before each test."""
    database = Database(migrated)
    async with database.transaction() as s:
        await s.execute(OutboxMessage.__table__.delete())
    yield database
    await database.dispose()


class Recorder:
    """A notifier that remembers what it sent, optionally slowly or failing."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.sent: list[int] = []
        self.delay = delay
        self.fail = fail

    async def send(self, message: OutboxMessage) -> None:
        await asyncio.sleep(self.delay)
        if self.fail:
            raise ConnectionError("provider down")
        self.sent.append(message.id)


async def add(
    db: Database,
    n: int = 1,
    *,
    sandbox: bool = False,
    channel: str = "EMAIL",
    recipient: str = "ada@example.com",
    created_at: int = NOW,
) -> list[int]:
    ids = []
    async with db.transaction() as s:
        for i in range(n):
            m = await notify.record(
                s,
                programme_id=1,
                sandbox=sandbox,
                channel=channel,
                recipient=recipient,
                subject="Your code",
                body=f"Your code is 65432{i % 10}.",
                now_ms=created_at + i,
            )
            ids.append(m.id)
    return ids


async def rows(db: Database) -> dict[int, OutboxMessage]:
    async with db.transaction() as s:
        return {m.id: m for m in (await s.scalars(select(OutboxMessage))).all()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Mailbox:
    """aiosmtpd handler keeping every message it accepts, or refusing them all for a while."""

    def __init__(self) -> None:
        self.received: list[tuple[str, list[str], Message]] = []
        self.logins: list[bytes] = []
        self.refuse: str | None = None

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.refuse:
            return self.refuse
        if session.authenticated:
            self.logins.append(session.auth_data.login)
        self.received.append(
            (envelope.mail_from, list(envelope.rcpt_tos), message_from_bytes(envelope.content))
        )
        return "250 Message accepted"


@pytest.fixture
def smtp_server() -> Iterator[tuple[Mailbox, int]]:
    box, port = Mailbox(), free_port()

    def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
        ok = isinstance(data, LoginPassword) and data == (b"mailer", b"s3cret")
        # handled=False: aiosmtpd answers the client itself
        return AuthResult(success=ok, handled=False, auth_data=data)

    controller = Controller(
        box,
        hostname="127.0.0.1",
        port=port,
        authenticator=authenticate,
        auth_require_tls=False,
    )
    controller.start()
    try:
        yield box, port
    finally:
        controller.stop()


# --- delivery -----------------------------------------------------------------------------------


async def test_sandbox_messages_are_never_delivered(db):
    ids = await add(db, 3, sandbox=True)
    rec = Recorder()
    for later in (0, 86_400_000):
        report = await deliver_pending(db, rec, NOW + later, 10)
        assert report.claimed == 0
    assert rec.sent == []
    for m in (await rows(db)).values():
        assert m.id in ids
        assert m.delivered_at is None
        assert m.attempts == 0
        assert m.deliver is False


async def test_a_live_message_is_delivered_once(db):
    (live,) = await add(db)
    await add(db, sandbox=True)
    rec = Recorder()
    report = await deliver_pending(db, rec, NOW + 5, 10)
    assert (report.claimed, report.delivered, report.failed) == (1, 1, 0)
    assert rec.sent == [live]
    m = (await rows(db))[live]
    assert m.delivered_at == NOW + 5
    assert m.attempts == 1
    assert m.last_error is None
    # a later round, however much later, sends nothing again
    assert (await deliver_pending(db, rec, NOW + 86_400_000, 10)).claimed == 0
    assert rec.sent == [live]


async def test_oldest_first_and_at_most_limit_per_round(db):
    ids = await add(db, 5)
    rec = Recorder()
    assert (await deliver_pending(db, rec, NOW + 10, 2)).delivered == 2
    assert (await deliver_pending(db, rec, NOW + 10, 2)).delivered == 2
    assert (await deliver_pending(db, rec, NOW + 10, 2)).delivered == 1
    assert rec.sent == ids


async def test_two_concurrent_delivery_loops_deliver_each_message_once(migrated, db):
    ids = await add(db, 40)
    # two "processes": a database engine each, sends slow enough to interleave
    other = Database(migrated)
    shared: list[int] = []
    a, b = Recorder(delay=0.005), Recorder(delay=0.005)
    a.sent = b.sent = shared

    async def loop(database: Database, rec: Recorder) -> int:
        rounds = 0
        while (await deliver_pending(database, rec, NOW + 100, 3)).claimed:
            rounds += 1
        return rounds

    try:
        rounds = await asyncio.gather(loop(db, a), loop(other, b), loop(db, a), loop(other, b))
    finally:
        await other.dispose()
    assert sorted(shared) == sorted(ids), "every message sent exactly once"
    assert sum(rounds) >= len(ids) // 3  # batches of at most 3
    for m in (await rows(db)).values():
        assert m.delivered_at is not None
        assert m.attempts == 1


async def test_two_background_workers_deliver_each_message_once(migrated, db):
    ids = await add(db, 30)
    other = Database(migrated)
    shared: list[int] = []
    recs = [Recorder(delay=0.002), Recorder(delay=0.002)]
    for r in recs:
        r.sent = shared
    workers = [
        OutboxWorker(database, rec, _Clock(), interval=0.02, batch=4)
        for database, rec in zip((db, other), recs, strict=True)
    ]
    for w in workers:
        w.start()
    try:
        for _ in range(500):
            if len(shared) >= len(ids):
                break
            await asyncio.sleep(0.02)
    finally:
        for w in workers:
            await w.stop()
        await other.dispose()
    assert sorted(shared) == sorted(ids)


class _Clock:
    def system_ms(self) -> int:
        return NOW + 1_000


async def test_a_failed_send_stays_pending_with_attempts_counted(db):
    (mid,) = await add(db)
    policy = DeliveryPolicy(max_attempts=3, backoff_ms=30_000)
    down = Recorder(fail=True)
    report = await deliver_pending(db, down, NOW, 10, policy=policy)
    assert (report.claimed, report.delivered, report.failed) == (1, 0, 1)
    m = (await rows(db))[mid]
    assert m.delivered_at is None
    assert m.attempts == 1
    assert m.last_error == "ConnectionError: provider down"
    assert m.next_attempt_at == NOW + 30_000
    # it waits out its back-off...
    assert (await deliver_pending(db, down, NOW + 29_999, 10, policy=policy)).claimed == 0
    assert (await deliver_pending(db, down, NOW + 30_000, 10, policy=policy)).failed == 1
    m = (await rows(db))[mid]
    assert (m.attempts, m.next_attempt_at) == (2, NOW + 30_000 + 60_000)  # doubled
    # ...and is sent when the provider is back
    up = Recorder()
    assert (await deliver_pending(db, up, NOW + 90_000, 10, policy=policy)).delivered == 1
    m = (await rows(db))[mid]
    assert up.sent == [mid]
    assert m.delivered_at == NOW + 90_000
    assert m.attempts == 3
    assert m.last_error is None


async def test_a_message_is_given_up_after_the_last_attempt(db, caplog):
    (mid,) = await add(db)
    policy = DeliveryPolicy(max_attempts=2, backoff_ms=1_000)
    down = Recorder(fail=True)
    with caplog.at_level(logging.WARNING, logger="multibank.outbox"):
        await deliver_pending(db, down, NOW, 10, policy=policy)
        await deliver_pending(db, down, NOW + 1_000, 10, policy=policy)
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.ERROR]
    up = Recorder()
    assert (await deliver_pending(db, up, NOW + 86_400_000, 10, policy=policy)).claimed == 0
    m = (await rows(db))[mid]
    assert (m.attempts, m.delivered_at) == (2, None)  # kept, for an operator to look at
    assert m.last_error is not None


async def test_a_claimed_message_is_taken_again_only_when_its_lease_ran_out(db):
    """A process that died mid-send: its claim expires and another process sends the message."""
    (mid,) = await add(db)
    policy = DeliveryPolicy(lease_ms=60_000)
    async with db.transaction() as s:  # as `claim` leaves a row whose sender then died
        await s.execute(
            update(OutboxMessage)
            .where(OutboxMessage.id == mid)
            .values(attempts=1, next_attempt_at=NOW + 60_000)
        )
    rec = Recorder()
    assert (await deliver_pending(db, rec, NOW + 59_999, 10, policy=policy)).claimed == 0
    assert (await deliver_pending(db, rec, NOW + 60_000, 10, policy=policy)).delivered == 1
    assert (await rows(db))[mid].attempts == 2


async def test_stopping_releases_the_rest_of_the_batch(db):
    ids = await add(db, 3)
    rec = Recorder()
    asked = 0

    def stop_after_one() -> bool:
        nonlocal asked
        asked += 1
        return asked > 1

    report = await deliver_pending(db, rec, NOW, 10, should_stop=stop_after_one)
    assert (report.claimed, report.delivered, report.released) == (3, 1, 2)
    after = await rows(db)
    assert [after[i].attempts for i in ids[1:]] == [0, 0]
    assert all(after[i].next_attempt_at is None for i in ids[1:])
    assert (await deliver_pending(db, rec, NOW, 10)).delivered == 2  # at once, by anyone
    assert rec.sent == ids


async def test_the_app_lifespan_runs_the_loop_and_stops_it(migrated, db):
    (mid,) = await add(db)
    settings = Settings(database_url=migrated, admin_token="t" * 40, outbox_poll_seconds=0.02)
    container = build_container(settings)
    rec = Recorder()
    container.notifier = rec
    app = create_app(container=container)
    async with app.router.lifespan_context(app):
        for _ in range(250):
            if rec.sent:
                break
            await asyncio.sleep(0.02)
    assert rec.sent == [mid]
    assert (await rows(db))[mid].delivered_at is not None


async def test_a_poll_interval_of_zero_runs_no_loop(migrated, db):
    await add(db)
    settings = Settings(database_url=migrated, admin_token="t" * 40, outbox_poll_seconds=0)
    container = build_container(settings)
    rec = Recorder()
    container.notifier = rec
    app = create_app(container=container)
    async with app.router.lifespan_context(app):
        await asyncio.sleep(0.1)
    assert rec.sent == []


# --- SMTP ---------------------------------------------------------------------------------------


async def test_an_smtp_message_arrives_with_its_recipient_and_body(db, smtp_server):
    box, port = smtp_server
    (mid,) = await add(db, recipient="grace@example.com")
    smtp = SmtpNotifier(
        host="127.0.0.1",
        port=port,
        sender="Multibank <no-reply@bank.example>",
        username="mailer",
        password="s3cret",
        starttls=False,
    )
    report = await deliver_pending(db, smtp, NOW, 10)
    assert (report.delivered, report.failed) == (1, 0), (await rows(db))[mid].last_error
    assert len(box.received) == 1
    mail_from, rcpt_tos, mail = box.received[0]
    assert mail_from == "no-reply@bank.example"
    assert box.logins == [b"mailer"]
    assert rcpt_tos == ["grace@example.com"]
    assert mail["To"] == "grace@example.com"
    assert mail["From"] == "Multibank <no-reply@bank.example>"
    assert mail["Subject"] == "Your code"
    assert str(mid) in mail["Message-ID"]
    payload = mail.get_payload(decode=True)
    assert isinstance(payload, bytes)
    assert payload.decode().strip() == "Your code is 654320."
    assert (await rows(db))[mid].delivered_at == NOW


async def test_a_refused_smtp_send_stays_pending(db, smtp_server):
    box, port = smtp_server
    box.refuse = "451 4.3.0 Try again later"
    (mid,) = await add(db)
    smtp = SmtpNotifier(host="127.0.0.1", port=port, sender="no-reply@bank.example", starttls=False)
    report = await deliver_pending(db, smtp, NOW, 10)
    assert (report.delivered, report.failed) == (0, 1)
    m = (await rows(db))[mid]
    assert (m.delivered_at, m.attempts) == (None, 1)
    assert m.last_error is not None
    assert "451" in m.last_error
    box.refuse = None
    assert (await deliver_pending(db, smtp, NOW + 60_000, 10)).delivered == 1
    assert [r[1] for r in box.received] == [["ada@example.com"]]


async def test_an_unreachable_or_rejecting_smtp_server_is_a_failed_attempt(db, smtp_server):
    _, port = smtp_server
    (mid,) = await add(db)
    nobody = SmtpNotifier(
        host="127.0.0.1", port=free_port(), sender="a@bank.example", starttls=False, timeout=2
    )
    assert (await deliver_pending(db, nobody, NOW, 10)).failed == 1
    wrong_password = SmtpNotifier(
        host="127.0.0.1",
        port=port,
        sender="a@bank.example",
        username="mailer",
        password="wrong",
        starttls=False,
    )
    assert (await deliver_pending(db, wrong_password, NOW + 60_000, 10)).failed == 1
    m = (await rows(db))[mid]
    assert (m.delivered_at, m.attempts) == (None, 2)
    assert m.last_error is not None
    assert "SMTPAuthenticationError" in m.last_error


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_starttls_is_used_and_the_certificate_checked(db, certificate):
    cert, key = certificate
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    box, port = Mailbox(), free_port()
    controller = Controller(
        box, hostname="127.0.0.1", port=port, tls_context=server_tls, require_starttls=True
    )
    controller.start()
    try:
        await add(db)
        trusting = ssl.create_default_context(cafile=str(cert))
        smtp = SmtpNotifier(
            host="127.0.0.1", port=port, sender="a@bank.example", tls_context=trusting
        )
        assert (await deliver_pending(db, smtp, NOW, 10)).delivered == 1
        assert len(box.received) == 1
        # a server whose certificate is not trusted gets nothing
        await add(db)
        untrusting = SmtpNotifier(host="127.0.0.1", port=port, sender="a@bank.example")
        report = await deliver_pending(db, untrusting, NOW + 1, 10)
        assert report.failed == 1
        assert len(box.received) == 1
        # nor does one that is never asked for TLS, since this server requires it
        plain = SmtpNotifier(host="127.0.0.1", port=port, sender="a@bank.example", starttls=False)
        assert (await deliver_pending(db, plain, NOW + 100_000, 10)).failed == 1
    finally:
        controller.stop()


# --- choosing notifiers -------------------------------------------------------------------------


def test_without_smtp_everything_goes_to_the_log():
    assert isinstance(build_notifier(Settings(database_url="sqlite://")), LogNotifier)


def test_smtp_settings_need_a_sender():
    with pytest.raises(ValueError, match="MULTIBANK_SMTP_FROM"):
        Settings(database_url="sqlite://", smtp_host="mail.example")


async def test_with_smtp_e_mail_goes_to_smtp_and_sms_to_the_log(db, smtp_server, caplog):
    box, port = smtp_server
    settings = Settings(
        database_url="sqlite://",
        smtp_host="127.0.0.1",
        smtp_port=port,
        smtp_from="no-reply@bank.example",
        smtp_starttls=False,
        smtp_username="mailer",
        smtp_password="s3cret",
    )
    notifier = build_notifier(settings)
    assert isinstance(notifier, ChannelNotifier)
    (mail_id,) = await add(db, recipient="grace@example.com")
    (sms_id,) = await add(db, channel="SMS", recipient="+447700900123", created_at=NOW + 10)
    with caplog.at_level(logging.INFO, logger="multibank.notify"):
        report = await deliver_pending(db, notifier, NOW + 20, 10)
    assert (report.delivered, report.failed) == (2, 0)
    assert [r[1] for r in box.received] == [["grace@example.com"]]
    logged = [r for r in caplog.records if r.getMessage() == "notification"]
    assert [(r.__dict__["channel"], r.__dict__["recipient"]) for r in logged] == [
        ("SMS", "+447700900123")
    ]
    assert "654320" not in caplog.text  # the code itself never reaches the log
    assert {mail_id, sms_id} <= set(await rows(db))


async def test_smtp_refuses_other_channels():
    smtp = SmtpNotifier(host="127.0.0.1", port=1, sender="a@bank.example")
    sms = OutboxMessage(
        id=new_id(),
        programme_id=1,
        channel="SMS",
        recipient="+447700900123",
        subject="s",
        body="b",
        deliver=True,
        created_at=NOW,
    )
    with pytest.raises(ValueError, match="SMS"):
        await smtp.send(sms)
