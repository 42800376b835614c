"""Rate limits on login, code sending and code verifying (D7), seen from a client.

Each test builds its own server (container and app) with tight limits, on the session's database,
and signs its users up through the session's own server, whose generous default limits it never
touches. The Redis test runs two servers against one Redis, as two processes would; it is skipped
when Redis is not reachable at `MULTIBANK_TEST_REDIS_URL` (default redis://127.0.0.1:6379), or
fails when `CI=true`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from multibank.app import build_container, create_app
from multibank.container import Container
from multibank.kernel.notify import OutboxMessage
from multibank.settings import Settings
from tests.conftest import Prog
from tests.factories import CODE, PASSWORD, email, login, sign_up

REDIS_URL = os.environ.get("MULTIBANK_TEST_REDIS_URL", "redis://127.0.0.1:6379")
LIMIT_HEADER = re.compile(r"^\d+(, \d+;w=\d+)+$")
IP = "192.0.2.10"
LOOSE = "1000/minute"


class Server:
    """A server of its own: its container (and limiter) and a way to call it from any IP."""

    def __init__(self, container: Container) -> None:
        self.container = container
        self.app = create_app(container=container)
        self.clients: list[httpx.AsyncClient] = []

    def client(self, ip: str = IP) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False, client=(ip, 4000))
        c = httpx.AsyncClient(transport=transport, base_url="http://testserver")
        self.clients.append(c)
        return c


ServerFactory = Callable[..., Awaitable[Server]]


@pytest.fixture
async def server(settings: Settings, container: Container) -> AsyncIterator[ServerFactory]:
    """`await server(rate_limit_login="3/minute", ...)`: a server with these settings changed.
    Every limit not named is loose, so a test sees only the one it is about."""
    made: list[Server] = []

    async def make(**overrides: Any) -> Server:
        values: dict[str, Any] = {
            "rate_limit_login": LOOSE,
            "rate_limit_code_send": LOOSE,
            "rate_limit_code_verify": LOOSE,
            "rate_limit_ip": LOOSE,
            "rate_limit_api_key": LOOSE,
            "outbox_poll_seconds": 0,
            **overrides,
        }
        c = build_container(settings.model_copy(update=values))
        c.keyring, c.admin_token = container.keyring, container.admin_token  # one "deployment"
        s = Server(c)
        made.append(s)
        return s

    yield make
    for s in made:
        for cl in s.clients:
            await cl.aclose()
        if s.container.settings.redis_url:
            with contextlib.suppress(Exception):  # (the unreachable-Redis test has none)
                await s.container.limiter.reset()  # only this test's namespace
        await s.container.db.dispose()


def assert_limited(r: httpx.Response, limit_header: str | None = None) -> None:
    assert r.status_code == 429, r.text
    assert r.content == b""
    assert "content-type" not in r.headers
    assert LIMIT_HEADER.match(r.headers["x-ratelimit-limit"]), r.headers
    if limit_header is not None:
        assert r.headers["x-ratelimit-limit"] == limit_header
    reset = r.headers["x-ratelimit-reset"]
    assert reset.isdigit()
    assert 0 <= int(reset) <= 3601
    assert r.headers["request-ref"]


def login_body(email_: str, password: str = PASSWORD) -> dict[str, Any]:
    return {"email": email_, "password": {"value": password}}


async def outbox_rows(container: Container, p: Prog) -> int:
    async with container.db.transaction() as s:
        count = await s.scalar(
            select(func.count())
            .select_from(OutboxMessage)
            .where(OutboxMessage.programme_id == int(p.id))
        )
    return int(count or 0)


# --- login --------------------------------------------------------------------------------------


async def test_n_logins_pass_then_429_with_headers_and_no_body(client, programme, server):
    p = await programme()
    ident = await sign_up(client, p)
    srv = await server(rate_limit_login="3/minute;10/hour")
    c = srv.client()
    # one limit across every base URL: the same operation, whichever version is called
    for base in ("/multi", "/3.29.1/multi", "/3.1.0/multi"):
        r = await login(c, p, ident.email, base=base)
        assert r.status_code == 200, r.text
    r = await login(c, p, ident.email)
    assert_limited(r, "3, 3;w=60, 10;w=3600")
    assert 50 <= int(r.headers["x-ratelimit-reset"]) <= 61
    assert_limited(await login(c, p, ident.email, base="/3.1.0/multi"))


async def test_the_e_mail_limit_spares_other_e_mails_of_the_same_key_and_ip(
    client, programme, server
):
    p = await programme()
    alice, bob = await sign_up(client, p), await sign_up(client, p)
    c = (await server(rate_limit_login="2/minute")).client()
    assert (await login(c, p, alice.email)).status_code == 200
    r = await login(c, p, alice.email.upper(), "Wrong-passw0rd!")
    assert r.status_code == 403  # the same e-mail...
    assert_limited(await login(c, p, f"  {alice.email} "), "2, 2;w=60")  # ...however written
    assert (await login(c, p, bob.email)).status_code == 200
    assert (await login(c, p, bob.email)).status_code == 200
    assert_limited(await login(c, p, bob.email))


async def test_the_e_mail_limit_is_per_programme(client, programme, server):
    p, q = await programme(), await programme()
    mail = email()
    a = await sign_up(client, p, rootUser={**_root(), "email": mail})
    b = await sign_up(client, q, rootUser={**_root(), "email": mail})
    c = (await server(rate_limit_login="1/minute")).client()
    assert (await login(c, p, a.email)).status_code == 200
    assert_limited(await login(c, p, a.email))
    assert (await login(c, q, b.email)).status_code == 200  # another tenant's user of that e-mail


def _root() -> dict[str, Any]:
    return {
        "name": "Ada",
        "surname": "Lovelace",
        "email": email(),
        "mobile": {"countryCode": "+44", "number": "7700900123"},
        "companyPosition": "DIRECTOR",
        "dateOfBirth": {"year": 1980, "month": 12, "day": 10},
    }


async def test_the_ip_limit_counts_every_e_mail_and_key_from_one_ip(client, programme, server):
    p, q = await programme(), await programme()
    a, b, d = await sign_up(client, p), await sign_up(client, p), await sign_up(client, q)
    srv = await server(rate_limit_ip="3/minute")
    c = srv.client("198.51.100.1")
    assert (await login(c, p, a.email)).status_code == 200
    assert (await login(c, p, b.email)).status_code == 200
    assert (await login(c, q, d.email)).status_code == 200
    assert_limited(await login(c, q, email()), "3, 3;w=60")  # unknown e-mail: no 403 either
    # X-Forwarded-For is not trusted by default: claiming another IP changes nothing
    r = await c.post(
        "/multi/login_with_password",
        headers={**p.headers, "X-Forwarded-For": "203.0.113.5"},
        json=login_body(a.email),
    )
    assert_limited(r)
    other = srv.client("198.51.100.2")
    assert (await login(other, p, a.email)).status_code == 200
    # the IP limit of login is not the IP limit of code sending
    r = await c.post(
        "/multi/corporates/verification/email/send", headers=p.headers, json={"email": a.email}
    )
    assert r.status_code == 204


async def test_a_trusted_forwarded_for_names_the_client_ip(client, programme, server):
    p = await programme()
    ident = await sign_up(client, p)
    srv = await server(rate_limit_ip="2/minute", trust_forwarded_for=True)
    c = srv.client("10.0.0.1")  # the proxy

    async def from_(forwarded: str) -> httpx.Response:
        return await c.post(
            "/multi/login_with_password",
            headers={**p.headers, "X-Forwarded-For": forwarded},
            json=login_body(ident.email),
        )

    assert (await from_("203.0.113.7")).status_code == 200
    # the client may prepend whatever it likes; the last entry is the one the proxy added
    assert (await from_("192.0.2.99, 203.0.113.7")).status_code == 200
    assert_limited(await from_("192.0.2.98,203.0.113.7"))
    assert (await from_("203.0.113.8")).status_code == 200
    assert (await login(c, p, ident.email)).status_code == 200  # no header: the proxy's own IP


async def test_the_api_key_limit_counts_every_e_mail_and_ip_of_one_key(client, programme, server):
    p, q = await programme(), await programme()
    users = [await sign_up(client, p) for _ in range(3)]
    other = await sign_up(client, q)
    srv = await server(rate_limit_api_key="2/minute")
    assert (await login(srv.client("198.51.100.11"), p, users[0].email)).status_code == 200
    assert (await login(srv.client("198.51.100.12"), p, users[1].email)).status_code == 200
    assert_limited(await login(srv.client("198.51.100.13"), p, users[2].email), "2, 2;w=60")
    assert (await login(srv.client("198.51.100.13"), q, other.email)).status_code == 200


async def test_a_refused_key_or_missing_key_answers_as_before(client, programme, server):
    p = await programme()
    ident = await sign_up(client, p)
    c = (await server(rate_limit_ip="1/minute")).client()
    r = await c.post("/multi/login_with_password", json=login_body(ident.email))
    assert r.status_code == 400
    r = await c.post(
        "/multi/login_with_password", headers={"api-key": "nope"}, json=login_body(ident.email)
    )
    assert r.status_code == 401
    assert (await login(c, p, ident.email)).status_code == 200  # neither was counted


async def test_malformed_bodies_answer_400_never_500(programme, server):
    p = await programme()
    c = (await server(rate_limit_login="100/minute")).client()
    url = "/multi/login_with_password"
    for content in (b"{not json", b"[1, 2]", b'"text"', b"null", b"[" * 5000, b"\xff\xfe"):
        r = await c.post(
            url, headers={**p.headers, "content-type": "application/json"}, content=content
        )
        assert r.status_code == 400, (content[:20], r.status_code, r.text)
    for body in ({"email": 5, "password": {"value": PASSWORD}}, {"email": None}, {}):
        r = await c.post(url, headers=p.headers, json=body)
        assert r.status_code == 400, (body, r.text)


async def test_a_limited_login_is_not_a_failed_login(client, programme, server):
    p = await programme(failedLoginLimit=5)
    ident = await sign_up(client, p)
    srv = await server(rate_limit_login="3/minute")
    c = srv.client()
    for _ in range(3):
        assert (await login(c, p, ident.email, "Wrong-passw0rd!")).status_code == 403
    for _ in range(5):  # had these counted, the root user would now be locked (423)
        assert_limited(await login(c, p, ident.email, "Wrong-passw0rd!"))
    ref = {"idempotency-ref": secrets.token_hex(8)}
    r = await c.post(
        "/multi/login_with_password", headers={**p.headers, **ref}, json=login_body(ident.email)
    )
    assert_limited(r)
    await srv.container.limiter.reset()
    # the refused call stored nothing under its idempotency-ref: the same ref runs now
    r = await c.post(
        "/multi/login_with_password", headers={**p.headers, **ref}, json=login_body(ident.email)
    )
    assert r.status_code == 200, r.text
    # and the failures so far are the three real ones: a wrong password is still a plain 403
    assert (await login(c, p, ident.email, "Wrong-passw0rd!")).status_code == 403


# --- codes --------------------------------------------------------------------------------------


async def test_code_sending_is_limited_and_a_refused_send_sends_nothing(
    client, programme, server, container
):
    p = await programme()
    ident = await sign_up(client, p, verify_email=False)
    c = (await server(rate_limit_code_send="2/minute")).client()
    url = "/multi/corporates/verification/email/send"
    before = await outbox_rows(container, p)
    for _ in range(2):
        r = await c.post(url, headers=p.headers, json={"email": ident.email})
        assert r.status_code == 204, r.text
    assert await outbox_rows(container, p) == before + 2
    r = await c.post(url, headers=p.headers, json={"email": ident.email})
    assert_limited(r, "2, 2;w=60")
    assert await outbox_rows(container, p) == before + 2
    # the 3.1.0 base URL counts against the same e-mail
    r = await c.post("/3.1.0/multi" + url[6:], headers=p.headers, json={"email": ident.email})
    assert_limited(r)
    # verifying is limited apart: the code sent still verifies
    r = await c.post(
        "/multi/corporates/verification/email/verify",
        headers=p.headers,
        json={"email": ident.email, "verificationCode": CODE},
    )
    assert r.status_code == 204, r.text


async def test_code_verifying_is_limited(client, programme, server):
    p = await programme()
    ident = await sign_up(client, p, kind="consumers", verify_email=False)
    r = await client.post(
        "/multi/consumers/verification/email/send", headers=p.headers, json={"email": ident.email}
    )
    assert r.status_code == 204
    srv = await server(rate_limit_code_verify="2/minute")
    c = srv.client()
    url = "/multi/consumers/verification/email/verify"
    for _ in range(2):
        r = await c.post(
            url, headers=p.headers, json={"email": ident.email, "verificationCode": "654321"}
        )
        assert r.status_code == 409, r.text
    r = await c.post(url, headers=p.headers, json={"email": ident.email, "verificationCode": CODE})
    assert_limited(r)
    await srv.container.limiter.reset()
    r = await c.post(url, headers=p.headers, json={"email": ident.email, "verificationCode": CODE})
    assert r.status_code == 204, r.text


async def test_invites_are_limited_per_invited_user(client, programme, server):
    p = await programme()
    ident = await sign_up(client, p)
    users = []
    for _ in range(2):
        r = await client.post(
            "/multi/users",
            headers=ident.headers,
            json={"name": "Bob", "surname": "Builder", "email": email()},
        )
        assert r.status_code == 200, r.text
        users.append(r.json()["id"])
    c = (await server(rate_limit_code_send="2/minute")).client()
    for _ in range(2):
        r = await c.post(f"/multi/users/{users[0]}/invite", headers=ident.headers)
        assert r.status_code == 204, r.text
    assert_limited(await c.post(f"/multi/users/{users[0]}/invite", headers=ident.headers))
    r = await c.post(f"/multi/users/{users[1]}/invite", headers=ident.headers)
    assert r.status_code == 204, r.text


async def test_a_forged_token_cannot_use_up_another_users_budget(client, programme, server):
    """Issue 10: 15 invites sent with a forged token left the real owner at 429. The per-user
    limit of a logged-in operation is counted only once the token is checked; the IP and key
    limits stay in front."""
    p = await programme()
    ident = await sign_up(client, p)
    r = await client.post(
        "/multi/users",
        headers=ident.headers,
        json={"name": "Bob", "surname": "Builder", "email": email()},
    )
    user_id = r.json()["id"]
    c = (await server(rate_limit_code_send="2/minute")).client()
    forged = {**p.headers, "Authorization": "Bearer " + ident.token[:-4] + "AAAA"}
    for _ in range(15):
        r = await c.post(f"/multi/users/{user_id}/invite", headers=forged)
        assert r.status_code == 401
    for _ in range(2):
        r = await c.post(f"/multi/users/{user_id}/invite", headers=ident.headers)
        assert r.status_code == 204, r.text
    assert_limited(await c.post(f"/multi/users/{user_id}/invite", headers=ident.headers))
    # Another identity's valid token is refused (404) and counts against its own user only.
    intruder = await sign_up(client, p)
    for _ in range(3):
        r = await c.post(f"/multi/users/{user_id}/invite", headers=intruder.headers)
        assert r.status_code in (404, 429), r.text
    ip_limited = (await server(rate_limit_ip="2/minute")).client()
    for _ in range(2):
        r = await ip_limited.post(f"/multi/users/{user_id}/invite", headers=forged)
        assert r.status_code == 401
    assert_limited(await ip_limited.post(f"/multi/users/{user_id}/invite", headers=forged))


async def test_legacy_mobile_code_sending_is_limited(client, programme, server):
    p = await programme()
    ident = await sign_up(client, p, kind="consumers", base="/3.1.0/multi")
    c = (await server(rate_limit_ip="1/minute")).client()
    url = "/3.1.0/multi/consumers/verification/mobile/send"
    r = await c.post(url, headers=ident.headers)
    assert r.status_code == 200, r.text
    assert_limited(await c.post(url, headers=ident.headers))  # 429 comes before the 15 s rule


async def test_logged_in_code_operations_are_limited_per_user(client, programme, server):
    """The budget follows the user, not the session: logging in again does not renew it."""
    p = await programme()
    ident = await sign_up(client, p, kind="consumers", base="/3.1.0/multi")
    r = await login(client, p, ident.email, base="/3.1.0/multi")
    assert r.status_code == 200
    second = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
    c = (await server(rate_limit_code_verify="2/minute")).client()
    url = "/3.1.0/multi/consumers/verification/mobile/verify"
    wrong = {"verificationCode": "654321"}
    for _ in range(2):
        r = await c.post(url, headers=ident.headers, json=wrong)
        assert r.status_code == 409, r.text
    assert_limited(await c.post(url, headers=ident.headers, json=wrong), "2, 2;w=60")
    assert_limited(await c.post(url, headers=second, json=wrong))  # another session, same user
    other = await sign_up(client, p, kind="consumers", base="/3.1.0/multi")
    r = await c.post(url, headers=other.headers, json=wrong)  # another user: a budget of its own
    assert r.status_code == 409, r.text
    # a token that does not verify is not a session: only the IP and key limits, then 401
    r = await c.post(url, headers={**p.headers, "Authorization": "Bearer nope"}, json=wrong)
    assert r.status_code == 401


# --- several processes --------------------------------------------------------------------------


_redis_problem: dict[str, str | None] = {}


async def _require_redis(container: Container) -> None:
    if REDIS_URL not in _redis_problem:
        try:
            ok = await asyncio.wait_for(container.limiter.storage.check(), timeout=3)
            _redis_problem[REDIS_URL] = None if ok else "check() answered False"
        except Exception as exc:
            _redis_problem[REDIS_URL] = f"{type(exc).__name__}: {exc}"
    problem = _redis_problem[REDIS_URL]
    if problem is not None:
        reason = f"Redis not reachable at {REDIS_URL} ({problem})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true requires it")
        pytest.skip(f"{reason}; set CI=true to make this a failure")


async def test_two_servers_on_one_redis_share_the_limits(client, programme, server):
    p = await programme()
    ident = await sign_up(client, p)
    namespace = f"multibank-test-{os.getpid()}-{secrets.token_hex(4)}"
    limits = {"rate_limit_login": "3/minute", "redis_url": REDIS_URL}
    one = await server(rate_limit_namespace=namespace, **limits)
    await _require_redis(one.container)
    two = await server(rate_limit_namespace=namespace, **limits)
    assert one.container.limiter is not two.container.limiter
    assert one.container.db is not two.container.db
    assert (await login(one.client(), p, ident.email)).status_code == 200
    assert (await login(two.client(), p, ident.email)).status_code == 200
    assert (await login(one.client(), p, ident.email)).status_code == 200
    assert_limited(await login(two.client(), p, ident.email), "3, 3;w=60")
    assert_limited(await login(one.client(), p, ident.email))
    # another namespace (another deployment on the same Redis) counts apart
    elsewhere = await server(rate_limit_namespace=f"{namespace}-b", **limits)
    assert (await login(elsewhere.client(), p, ident.email)).status_code == 200


async def test_an_unreachable_redis_lets_calls_through_and_logs_it(
    client, programme, server, caplog
):
    p = await programme()
    ident = await sign_up(client, p)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    srv = await server(rate_limit_login="1/minute", redis_url=f"redis://127.0.0.1:{port}")
    with caplog.at_level(logging.ERROR, logger="multibank.ratelimit"):
        for _ in range(2):
            assert (await login(srv.client(), p, ident.email)).status_code == 200
    assert "rate-limit storage unavailable" in caplog.text


async def test_without_redis_each_server_counts_alone(client, programme, server):
    p = await programme()
    ident = await sign_up(client, p)
    one, two = await server(rate_limit_login="1/minute"), await server(rate_limit_login="1/minute")
    assert (await login(one.client(), p, ident.email)).status_code == 200
    assert_limited(await login(one.client(), p, ident.email))
    assert (await login(two.client(), p, ident.email)).status_code == 200


async def test_default_limits_are_generous_for_ip_and_key(settings):
    defaults = Settings(database_url=settings.database_url)
    for text in (defaults.rate_limit_ip, defaults.rate_limit_api_key):
        assert int(text.split("/")[0]) >= 1000
