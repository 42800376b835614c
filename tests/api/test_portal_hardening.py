"""Issue 32, points 4 to 8: the admin token and the web portal under a hostile operator's eye.

- wrong admin tokens are limited per client address on every door that takes the token (the
  operator API, the portal's sign-in, /metrics): 429 with Retry-After, the right token included,
  counted in the database every process shares (across restarts, without Redis), failing closed
  when it cannot count (issue 41 §5); live mode wants a token of 32 characters;
  a portal session ends when the server's token changes;
- every portal answer carries the CSP, X-Frame-Options and Referrer-Policy; the sign-in form has
  a CSRF token; no URL makes the portal show a message of its choosing;
- the portal's forms take the same checks as the API and the simulator (the clock's bounds, an
  IBAN nobody asked for, a programme's mode, a profile's new currency, numbers written with
  ASCII digits only) and no page answers 500 whatever the data;
- every post redirects (reload repeats nothing), irreversible actions ask first;
- every list is paged: row 201 and later are reachable.

Each test signs in as a browser would (tests/api/test_portal_web.py) and checks what the pages and
the public APIs then say.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from multibank.container import Container
from multibank.programmes.models import Programme
from multibank.settings import Settings
from tests.api import test_ratelimits
from tests.api.payments_support import customer
from tests.api.test_portal_web import (
    PORTAL_API,
    csrf_of,
    flash_of,
    landed,
    page,
    sign_in,
    submit,
)
from tests.conftest import ADMIN_TOKEN, LIVE_CARD_ENV, LIVE_CARD_KEYS
from tests.factories import CODE, open_account, sign_up

DOC_BASES = ("/multi", "/3.29.1/multi", "/3.1.0/multi", "/simulate/api", "/portal/api")

MULTIBANK = Path(sys.executable).with_name("multibank")
# Servers of their own, with limits of their own, on the session's database.
server = test_ratelimits.server
WRONG = {"Authorization": "Bearer not-the-admin-token"}
RIGHT = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def assert_throttled(r: httpx.Response) -> None:
    assert r.status_code == 429, (r.status_code, r.text[:200])
    assert r.headers["retry-after"].isdigit() and 1 <= int(r.headers["retry-after"]) <= 61
    assert r.headers["x-ratelimit-limit"].startswith("3, 3;w=60")


# 4. The admin token -----------------------------------------------------------------------------


async def test_wrong_admin_tokens_are_limited_per_address_on_every_door(server):
    srv = await server(rate_limit_admin_auth="3/minute")
    guesser, other = srv.client("198.51.100.7"), srv.client("198.51.100.8")
    # Right tokens are not counted: an operator who works all day is never refused.
    for _ in range(5):
        assert (await guesser.get(PORTAL_API, headers=RIGHT)).status_code == 200
    # One budget for every door: the operator API, /metrics, the portal's sign-in.
    assert (await guesser.get(PORTAL_API, headers=WRONG)).status_code == 401
    assert (await guesser.get("/metrics", headers=WRONG)).status_code == 401
    assert (await sign_in(guesser, "not-the-admin-token")).status_code == 401
    # Spent: every admin authentication from the address is refused, the right token included
    # (else 401 against 200 would still tell the guesser which guess was right).
    assert_throttled(await guesser.get(PORTAL_API, headers=WRONG))
    assert_throttled(await guesser.get(PORTAL_API, headers=RIGHT))
    assert_throttled(await guesser.get("/metrics", headers=RIGHT))
    refused = await sign_in(guesser)
    assert_throttled(refused)
    assert "Too many wrong admin tokens" in refused.text
    assert "mb_portal=" not in refused.headers.get("set-cookie", "")
    # A request without a token guesses nothing: it is the plain 401 it always was.
    assert (await guesser.get(PORTAL_API)).status_code == 401
    # Another address is not affected.
    assert (await other.get(PORTAL_API, headers=RIGHT)).status_code == 200
    assert (await other.get("/metrics", headers=RIGHT)).status_code == 200


async def test_a_trusted_forwarded_for_names_the_guessing_address(server):
    srv = await server(rate_limit_admin_auth="3/minute", trust_forwarded_for=True)
    proxy = srv.client("10.0.0.1")
    one = {**WRONG, "X-Forwarded-For": "203.0.113.1"}
    for _ in range(3):
        assert (await proxy.get(PORTAL_API, headers=one)).status_code == 401
    assert_throttled(await proxy.get(PORTAL_API, headers=one))
    # Another client behind the same proxy still gets in.
    two = {**RIGHT, "X-Forwarded-For": "203.0.113.2"}
    assert (await proxy.get(PORTAL_API, headers=two)).status_code == 200


async def test_two_servers_without_redis_share_the_count_of_wrong_tokens(server):
    """Two processes of one deployment (two containers on one database, no Redis): the wrong
    guesses one takes count in the other, on every door (issue 41 §5)."""
    limits = {"rate_limit_admin_auth": "3/minute", "redis_url": None}
    one, two = await server(**limits), await server(**limits)
    address = f"192.0.2.{secrets.randbelow(200) + 20}"
    a, b = one.client(address), two.client(address)
    assert (await a.get(PORTAL_API, headers=WRONG)).status_code == 401
    assert (await b.get("/metrics", headers=WRONG)).status_code == 401
    assert (await sign_in(a, "not-the-admin-token")).status_code == 401
    assert_throttled(await b.get(PORTAL_API, headers=RIGHT))
    assert_throttled(await a.get("/metrics", headers=RIGHT))


async def test_a_restart_forgets_no_wrong_token(server):
    """The count lives in the database, not in the process: a server started afresh on the same
    database (a restart, a new worker) refuses an address that spent its guesses."""
    address = f"198.18.0.{secrets.randbelow(200) + 20}"
    first = await server(rate_limit_admin_auth="3/minute")
    guesser = first.client(address)
    for _ in range(3):
        assert (await guesser.get(PORTAL_API, headers=WRONG)).status_code == 401
    await first.container.db.dispose()  # the process is gone
    restarted = await server(rate_limit_admin_auth="3/minute")
    assert_throttled(await restarted.client(address).get(PORTAL_API, headers=RIGHT))
    # Concurrent guesses from one address are taken one at a time: none slips past the limit.
    fresh = restarted.client(f"198.18.1.{secrets.randbelow(200) + 20}")
    answers = await asyncio.gather(*(fresh.get("/metrics", headers=WRONG) for _ in range(8)))
    assert sorted(r.status_code for r in answers) == [401] * 3 + [429] * 5


async def test_an_unreachable_store_fails_closed(server, database_url, tmp_path):
    """When the database that counts the guesses cannot be reached, no token is compared: 429
    with Retry-After, the right token included (an uncounted guess would be a free one)."""
    if database_url.startswith("sqlite"):
        gone = f"sqlite+aiosqlite:///{tmp_path / 'no' / 'such' / 'folder' / 'x.db'}"
    else:
        gone = "postgresql+asyncpg://postgres@127.0.0.1:1/nothing"
    srv = await server(
        rate_limit_admin_auth="3/minute",
        database_url=gone,
        database_pool_timeout_seconds=1,
    )
    client = srv.client("203.0.113.99")
    for headers in (RIGHT, WRONG):
        r = await client.get("/metrics", headers=headers)
        assert_throttled(r)
        assert r.headers["retry-after"] == "5"
    assert_throttled(await sign_in(client))
    # No token guesses nothing: still the plain 401.
    assert (await client.get("/metrics")).status_code == 401


async def test_the_operator_api_declares_its_429(client):
    doc = (await client.get("/portal/api/openapi.json")).json()
    for item in doc["paths"].values():
        for operation in item.values():
            refused = operation["responses"]["429"]
            assert "Retry-After" in refused["headers"], operation["operationId"]
            assert "wrong admin tokens" in refused["description"]
    assert "Retry-After" in doc["components"]["headers"]


def test_live_mode_wants_an_admin_token_of_32_characters():
    keys = "k1:" + "s" * 48
    with pytest.raises(ValueError, match="shorter than 32 characters"):
        Settings(mode="live", admin_token="x" * 31, jwt_keys=keys, **LIVE_CARD_KEYS)
    live = Settings(mode="live", admin_token="x" * 32, jwt_keys=keys, **LIVE_CARD_KEYS)
    assert live.admin_token == "x" * 32
    # A sandbox may keep a short token of its own choosing.
    assert Settings(mode="sandbox", admin_token="x").admin_token == "x"


@pytest.mark.any_database  # its own SQLite file, or no database at all
async def test_serve_in_live_mode_refuses_a_short_admin_token_in_one_line(tmp_path):
    env = {
        **os.environ,
        "MULTIBANK_MODE": "live",
        "MULTIBANK_ADMIN_TOKEN": "1",
        "MULTIBANK_JWT_KEYS": "k1:" + "s" * 48,
        **LIVE_CARD_ENV,
        "MULTIBANK_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'live.db'}",
    }
    proc = await asyncio.create_subprocess_exec(
        str(MULTIBANK),
        "serve",
        "--port",
        "1",
        env=env,
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    said = err.decode().strip()
    assert proc.returncode == 2, (out, err)
    assert said.count("\n") == 0 and "Traceback" not in said, said
    assert "admin token shorter than 32 characters" in said
    assert b"serving on" not in out
    assert not (tmp_path / "live.db").exists()  # refused before anything was made


async def test_a_portal_session_ends_when_the_admin_token_changes(server):
    before = await server()  # the deployment, running with the suite's token
    c = before.client()
    assert (await sign_in(c)).status_code == 303
    assert (await c.get("/portal/")).status_code == 200
    # The same database served again with a rotated token (a restart with a new one).
    after = await server()
    after.container.admin_token = "rotated-admin-token-" + "y" * 32
    c2 = after.client()
    c2.cookies = c.cookies
    r = await c2.get("/portal/")
    assert (r.status_code, r.headers["location"]) == (303, "/portal/login")
    r = await c2.post("/portal/programmes", data={"csrf": "x", "name": "n"})
    assert (r.status_code, r.headers["location"]) == (303, "/portal/login")
    # The new token signs in; the old one no longer does.
    assert (await sign_in(c2, ADMIN_TOKEN)).status_code == 401
    assert (await sign_in(c2, after.container.admin_token)).status_code == 303
    assert (await c2.get("/portal/")).status_code == 200


# 5. Headers and forms ---------------------------------------------------------------------------

CSP = "default-src 'self'; frame-ancestors 'none'"


def assert_guarded(r: httpx.Response) -> None:
    where = f"{r.request.method} {r.request.url.path}"
    assert r.headers.get("content-security-policy", "").startswith(CSP), where
    assert r.headers.get("x-frame-options") == "DENY", where
    assert r.headers.get("referrer-policy") == "no-referrer", where


async def test_every_portal_answer_carries_the_security_headers(app, browser, client, programme):
    p = await programme()
    ident, acc = await customer(client, p, funds=1000, sms=False)
    base = f"/portal/programmes/{p.id}"
    keys = (await client.get(f"{PORTAL_API}/{p.id}/api_keys", headers=RIGHT)).json()
    for url in (
        "/portal/",
        base,
        f"{base}/customers",
        f"{base}/customers/{ident.id}",
        f"{base}/customers/{ident.id}/reject",
        f"{base}/accounts/{acc}",
        f"{base}/accounts/{acc}/statement.csv",
        f"{base}/accounts/{acc}/statement.pdf",
        f"{base}/ledger",
        f"{base}/payments",
        f"{base}/webhooks",
        f"{base}/inbox",
        f"{base}/api_keys/{keys[0]['id']}/revoke",
        f"{base}/webhook_secret",
        "/portal/programmes/1",  # not found
        "/portal/static/portal.css",
        "/portal/static/portal.js",
    ):
        r = await browser.get(url)
        assert r.status_code in (200, 404), (url, r.status_code)
        assert_guarded(r)
    assert_guarded(await client.get("/portal/login"))
    assert_guarded(await client.get("/portal/"))  # the redirect to sign in
    assert_guarded(await submit(browser, f"{base}/clock", base, seconds="1"))
    assert_guarded(await browser.post(f"{base}/clock", data={"seconds": "1"}))  # 403
    # No page holds a script or a style of its own, which the policy would block: the one
    # script is the portal's own file, loaded by its address (decision 0058).
    own = '<script src="/portal/static/portal.js" defer></script>'
    for url in ("/portal/", base, f"{base}/customers/{ident.id}", f"{base}/payments"):
        html = await page(browser, url)
        assert html.count("<script") == 1 and own in html, url
        assert "<style" not in html and " style=" not in html


async def test_the_sign_in_form_needs_its_csrf_token(app):
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        form = await c.get("/portal/login")
        token = csrf_of(form.text)
        cookie = form.headers["set-cookie"].lower()
        assert "mb_portal_login=" in cookie and "httponly" in cookie and "samesite=strict" in cookie
        # Posted from elsewhere: no token, a wrong one, or the token without its cookie.
        for forged in ("forged", "\u00e9t\u00e9"):
            r = await c.post("/portal/login", data={"token": ADMIN_TOKEN, "csrf": forged})
            assert r.status_code == 403 and "CSRF" in r.text
        for data in ({"token": ADMIN_TOKEN}, {"token": ADMIN_TOKEN, "csrf": "forged"}):
            r = await c.post("/portal/login", data=data)
            assert r.status_code == 403 and "CSRF" in r.text
            assert "mb_portal=" not in r.headers.get("set-cookie", "")
        c.cookies.clear()
        r = await c.post("/portal/login", data={"token": ADMIN_TOKEN, "csrf": token})
        assert r.status_code == 403
        assert (await sign_in(c)).status_code == 303


async def test_no_url_makes_the_portal_say_anything(app, browser, client):
    notice = "Official notice: send your admin token to evil@example.com"
    for url in (f"/portal/?msg={notice}", f"/portal/?msg={notice}&error=1"):
        html = await page(browser, url)
        assert "evil@example.com" not in html and 'class="flash' not in html
    r = await client.get("/portal/login", params={"msg": notice, "flash": notice})
    assert "evil@example.com" not in r.text and 'class="flash' not in r.text
    r = await client.get("/portal/login", params={"flash": "signed-out"})
    assert flash_of(r.text) == "Signed out."
    # A flash cookie not made by this server for this session is not shown either.
    session = f"mb_portal={browser.cookies['mb_portal']}"
    for forged in (b"eyJ0ZXh0IjogIkhlbGxvIn0.forged", b"eyJ0ZXh0IjogIkhlbGxvIn0.\xe9"):
        cookie = session.encode() + b"; mb_portal_flash=" + forged
        r = await browser.get("/portal/", headers={"cookie": cookie})
        assert r.status_code == 200 and 'class="flash' not in r.text


# 6. The portal takes the API's rules ------------------------------------------------------------


async def _clock(client: httpx.AsyncClient, p: Any) -> int:
    """The programme's clock offset, as the simulator answers it (one second more)."""
    r = await client.post(
        "/simulate/api/clock/advance", headers={"programme-key": p.api_key}, json={"seconds": 1}
    )
    assert r.status_code == 200, r.text
    return int(r.json()["offsetSeconds"]) - 1


async def test_the_clock_form_takes_the_simulators_bounds(browser, client, programme):
    p = await programme()
    base = f"/portal/programmes/{p.id}"
    start = await _clock(client, p)
    for seconds in ("1000000000000", "-100", "0", "1_0", "\u0661\u0662", "12.5", "", "ten"):
        html = await landed(browser, await submit(browser, f"{base}/clock", base, seconds=seconds))
        assert 'class="flash error"' in html, seconds
        assert await _clock(client, p) == start + 1, seconds  # unchanged (but for the probe)
        start += 1
    said = flash_of(
        await landed(browser, await submit(browser, f"{base}/clock", base, seconds="60"))
    )
    assert said.startswith("The clock moved on to ")
    assert await _clock(client, p) == start + 1 + 60


async def test_the_clock_runs_at_most_100_years_ahead_on_both_surfaces(browser, client, programme):
    p = await programme()
    base = f"/portal/programmes/{p.id}"
    ten_years = 10 * 365 * 86400
    sim = {"programme-key": p.api_key}
    for _ in range(9):
        r = await client.post(
            "/simulate/api/clock/advance", headers=sim, json={"seconds": ten_years}
        )
        assert r.status_code == 200, r.text
    html = await landed(
        browser, await submit(browser, f"{base}/clock", base, seconds=str(ten_years))
    )
    assert flash_of(html).startswith("The clock moved on to ")
    r = await client.post("/simulate/api/clock/advance", headers=sim, json={"seconds": 1})
    assert r.status_code == 409 and r.json()["errorCode"] == "CLOCK_LIMIT_REACHED"
    html = await landed(browser, await submit(browser, f"{base}/clock", base, seconds="1"))
    assert "CLOCK_LIMIT_REACHED" in flash_of(html)
    for url in (base, f"{base}/customers", f"{base}/ledger"):
        await page(browser, url)


async def test_no_page_answers_500_for_a_clock_moved_absurdly_far_before(
    browser, client, programme, container: Container
):
    """A programme whose clock an older server let run 10^12 seconds ahead (the data is there):
    every page still renders."""
    p = await programme()
    ident = await sign_up(client, p)
    async with container.db.transaction() as session:
        await session.execute(
            update(Programme).where(Programme.id == int(p.id)).values(clock_offset_ms=10**15)
        )
    base = f"/portal/programmes/{p.id}"
    for url in ("/portal/", base, f"{base}/customers", f"{base}/customers/{ident.id}"):
        await page(browser, url)
    for url in (f"{base}/ledger", f"{base}/payments", f"{base}/webhooks", f"{base}/inbox"):
        await page(browser, url)


async def test_an_iban_nobody_asked_for_is_not_allocated(browser, client, programme):
    p = await programme()
    ident = await sign_up(client, p, "corporates")
    r = await client.post(
        f"/simulate/api/corporates/{ident.id}/verify", headers={"programme-key": p.api_key}
    )
    assert r.status_code == 204
    acc = (await open_account(client, ident, "EUR"))["id"]
    detail = f"/portal/programmes/{p.id}/customers/{ident.id}"
    html = await page(browser, detail)
    assert f"/accounts/{acc}/iban" not in html  # no button for it
    html = await landed(
        browser, await submit(browser, f"/portal/programmes/{p.id}/accounts/{acc}/iban", detail)
    )
    assert "IBAN_NOT_PENDING" in flash_of(html) and 'class="flash error"' in html
    r = await client.get(f"/multi/managed_accounts/{acc}/iban", headers=ident.headers)
    assert r.json()["state"] == "UNALLOCATED"
    # As the simulator answers.
    r = await client.post(
        f"/simulate/api/managed_accounts/{acc}/iban/allocate", headers={"programme-key": p.api_key}
    )
    assert r.status_code == 409 and r.json()["errorCode"] == "IBAN_NOT_PENDING"


async def test_a_programme_of_no_mode_is_refused(browser, client):
    name = f"bogus{secrets.token_hex(4)}"
    r = await submit(browser, "/portal/programmes", "/portal/", name=name, mode="bogus")
    html = await landed(browser, r)
    assert "mode" in flash_of(html) and 'class="flash error"' in html
    listed = (await client.get(PORTAL_API, headers=RIGHT)).json()
    assert name not in {p["name"] for p in listed}


async def test_a_profile_adds_a_currency_to_the_programme_only_when_told(
    browser, client, programme
):
    p = await programme()
    home = f"/portal/programmes/{p.id}"
    sends = p.profiles["sends"]
    html = await landed(
        browser,
        await submit(
            browser, f"{home}/profiles/{sends}", home, currencies="EUR,JPY", active="true"
        ),
    )
    assert "JPY is not a currency of this programme" in flash_of(html)
    got = (await client.get(f"{PORTAL_API}/{p.id}", headers=RIGHT)).json()
    assert got["currencies"] == ["EUR", "GBP", "USD"]
    profiles = (await client.get(f"{PORTAL_API}/{p.id}/profiles", headers=RIGHT)).json()
    assert next(x for x in profiles if x["id"] == sends)["currencies"] == ["EUR", "GBP", "USD"]
    html = await landed(
        browser,
        await submit(
            browser,
            f"{home}/profiles/{sends}",
            home,
            currencies="EUR,JPY",
            active="true",
            addCurrencies="yes",
        ),
    )
    assert flash_of(html) == "Profile saved. The programme now also has JPY."
    got = (await client.get(f"{PORTAL_API}/{p.id}", headers=RIGHT)).json()
    assert got["currencies"] == ["EUR", "GBP", "JPY", "USD"]


async def test_numbers_are_written_with_ascii_digits_only(browser, client, programme):
    p = await programme()
    ident, acc = await customer(client, p, funds=1000, sms=False)
    base = f"/portal/programmes/{p.id}"
    detail = f"{base}/customers/{ident.id}"
    for amount in ("1_0", "\u0661\u0662", "\uff11\uff12", "10.5.0", "1e3", "", " "):
        r = await submit(browser, f"{base}/accounts/{acc}/deposit", detail, amount=amount)
        html = await landed(browser, r)
        assert "written in EUR" in flash_of(html), amount
    r = await submit(browser, f"{base}/accounts/{acc}/deposit", detail, amount="-5")
    assert "DENIED_AMOUNT_NOT_POSITIVE" in flash_of(await landed(browser, r))
    got = await client.get(f"/multi/managed_accounts/{acc}", headers=ident.headers)
    assert got.json()["balances"]["actualBalance"] == 1000
    # Settings and fees alike.
    r = await submit(browser, f"{base}/settings", base, failedLoginLimit="\u0661\u0662")
    assert 'class="flash error"' in await landed(browser, r)
    r = await submit(
        browser, f"{base}/movement_fee", base, kind="sends", currency="EUR", amount="2_5"
    )
    assert "written in EUR" in flash_of(await landed(browser, r))
    got = (await client.get(f"{PORTAL_API}/{p.id}", headers=RIGHT)).json()
    assert got["settings"]["failedLoginLimit"] == 5
    assert got["movementFees"]["sends"]["EUR"] == 0


async def test_the_wire_buttons_act_on_wire_transfers_only(browser, client, programme):
    p = await programme()
    r = await client.patch(
        f"{PORTAL_API}/{p.id}/settings", headers=RIGHT, json={"sendsScaRequired": False}
    )
    assert r.status_code == 200
    ident, acc = await customer(client, p, funds=10_000, sms=False)
    _, friend_acc = await customer(client, p, funds=0, sms=False)
    r = await client.post(
        "/multi/sends",
        headers=ident.headers,
        json={
            "profileId": p.profiles["sends"],
            "source": {"type": "managed_accounts", "id": acc},
            "destination": {"type": "managed_accounts", "id": friend_acc},
            "destinationAmount": {"currency": "EUR", "amount": 100},
        },
    )
    assert r.status_code == 200, r.text
    send_id = r.json()["id"]
    base = f"/portal/programmes/{p.id}"
    html = await page(browser, f"{base}/payments")
    r = await browser.post(f"{base}/wire/{send_id}/accept", data={"csrf": csrf_of(html)})
    assert r.status_code == 404 and "No such wire transfer" in r.text


# 7. POST/redirect/GET and confirmations ---------------------------------------------------------


async def test_reloading_after_create_api_key_creates_nothing(browser, client, programme):
    p = await programme()
    home = f"/portal/programmes/{p.id}"
    before = (await client.get(f"{PORTAL_API}/{p.id}/api_keys", headers=RIGHT)).json()
    r = await submit(browser, f"{home}/api_keys", home, label="reload me")
    assert r.status_code == 303 and r.headers["location"] == home
    assert "mb_" not in r.headers["location"]
    shown = await page(browser, home)
    key = re.search(r'id="new-key">([^<]+)<', shown)
    assert key, "the new key is shown once, after the redirect"
    reloaded = await page(browser, home)  # the reload: a GET
    assert 'id="new-key"' not in reloaded and key.group(1) not in reloaded
    after = (await client.get(f"{PORTAL_API}/{p.id}/api_keys", headers=RIGHT)).json()
    assert len(after) == len(before) + 1


async def test_every_portal_post_redirects(browser, client, programme):
    p = await programme()
    ident, acc = await customer(client, p, funds=1000, sms=False)
    base = f"/portal/programmes/{p.id}"
    sends = p.profiles["sends"]
    posts = [
        ("/portal/programmes", {"name": f"prg{secrets.token_hex(4)}"}),
        ("/portal/programmes", {"name": "no spaces allowed"}),  # refused: still a redirect
        (f"{base}/settings", {"failedLoginLimit": "6"}),
        (f"{base}/api_keys", {"label": "x"}),
        (f"{base}/movement_fee", {"kind": "sends", "currency": "EUR", "amount": "1"}),
        (f"{base}/fee_type", {"name": "F", "currency": "EUR", "amount": "1"}),
        (f"{base}/profiles/{sends}", {"active": "true"}),
        (f"{base}/clock", {"seconds": "1"}),
        (f"{base}/customers/{ident.id}/verify", {}),
        (f"{base}/accounts/{acc}/deposit", {"amount": "5"}),
        (f"{base}/accounts/{acc}/iban", {}),  # refused (allocated already)
    ]
    for url, fields in posts:
        r = await submit(browser, url, "/portal/", **fields)
        assert r.status_code == 303, (url, r.status_code, r.text[:200])
        await page(browser, r.headers["location"])


async def test_revoking_a_key_asks_first_and_warns_of_the_last(browser, client, programme):
    p = await programme()
    home = f"/portal/programmes/{p.id}"
    keys = (await client.get(f"{PORTAL_API}/{p.id}/api_keys", headers=RIGHT)).json()
    (only,) = keys
    revoke = f"{home}/api_keys/{only['id']}/revoke"
    assert f'href="{revoke}"' in await page(browser, home)  # a link to the question, no form
    # A post without the confirmation (an old form, a script) is sent to the question.
    r = await submit(browser, revoke, home)
    assert (r.status_code, r.headers["location"]) == (303, revoke)
    assert (
        await client.post(
            "/multi/passwords/validate",
            headers=p.headers,
            json={"password": {"value": "Str0ng-Passw0rd!"}},
        )
    ).status_code == 204
    question = await page(browser, revoke)
    assert "last active key" in question and 'name="confirm" value="yes"' in question
    r = await browser.post(revoke, data={"csrf": csrf_of(question), "confirm": "yes"})
    assert flash_of(await landed(browser, r)) == "API key revoked."
    assert (
        await client.post(
            "/multi/passwords/validate",
            headers=p.headers,
            json={"password": {"value": "Str0ng-Passw0rd!"}},
        )
    ).status_code == 401


async def test_rejecting_a_wire_transfer_asks_first(browser, client, programme):
    p = await programme()
    r = await client.patch(
        f"{PORTAL_API}/{p.id}/settings", headers=RIGHT, json={"owtScaRequired": False}
    )
    assert r.status_code == 200
    ident, acc = await customer(client, p, funds=100_000, sms=False)
    owt_id = await _wire(client, p, ident, acc)
    base = f"/portal/programmes/{p.id}"
    reject = f"{base}/wire/{owt_id}/reject"
    r = await submit(browser, reject, f"{base}/payments")
    assert (r.status_code, r.headers["location"]) == (303, reject)
    got = await client.get(f"/multi/outgoing_wire_transfers/{owt_id}", headers=ident.headers)
    assert got.json()["state"] == "SUBMITTED"
    question = await page(browser, reject)
    r = await browser.post(reject, data={"csrf": csrf_of(question), "confirm": "yes"})
    assert flash_of(await landed(browser, r)) == ("Rejected: its money is back on the account.")
    got = await client.get(f"/multi/outgoing_wire_transfers/{owt_id}", headers=ident.headers)
    assert got.json()["state"] == "REJECTED"


async def _wire(client: httpx.AsyncClient, p: Any, ident: Any, acc: str) -> str:
    r = await client.post(
        "/multi/outgoing_wire_transfers",
        headers=ident.headers,
        json={
            "profileId": p.profiles["outgoingWireTransfers"],
            "sourceInstrument": {"type": "managed_accounts", "id": acc},
            "transferAmount": {"currency": "EUR", "amount": 500},
            "description": "Rent",
            "destinationBeneficiary": {
                "name": "Landlord",
                "bankAccountDetails": {
                    "iban": "WV38WEAV502015555551",
                    "bankIdentifierCode": "COBADEFFXXX",
                },
            },
        },
    )
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


# 8. Paging --------------------------------------------------------------------------------------


async def _all_pages(browser: httpx.AsyncClient, url: str) -> list[str]:
    pages = [await page(browser, url)]
    while True:
        older = re.search(r'<a href="(\?[^"]*)" rel="next">', pages[-1])
        if older is None:
            return pages
        pages.append(await page(browser, url.split("?")[0] + older.group(1).replace("&amp;", "&")))


async def test_a_wire_transfer_behind_200_payments_can_still_be_settled(browser, client, programme):
    p = await programme()
    r = await client.patch(
        f"{PORTAL_API}/{p.id}/settings", headers=RIGHT, json={"owtScaRequired": False}
    )
    assert r.status_code == 200
    ident, acc = await customer(client, p, funds=1_000_000, sms=False)
    other = (await open_account(client, ident, "EUR"))["id"]
    owt_id = await _wire(client, p, ident, acc)
    for _ in range(205):
        r = await client.post(
            "/multi/transfers",
            headers=ident.headers,
            json={
                "profileId": p.profiles["transfers"],
                "source": {"type": "managed_accounts", "id": acc},
                "destination": {"type": "managed_accounts", "id": other},
                "destinationAmount": {"currency": "EUR", "amount": 1},
            },
        )
        assert r.status_code == 200, r.text
    pages = await _all_pages(browser, f"/portal/programmes/{p.id}/payments")
    assert len(pages) == 5  # 206 payments, 50 a page
    assert "Rows 1 to 50 of 206" in pages[0] and "Rows 201 to 206 of 206" in pages[-1]
    # The oldest payment, but waiting for the operator: listed first (issue 35), not on page 5.
    assert owt_id in pages[0] and f"/wire/{owt_id}/accept" in pages[0]
    assert all(owt_id not in html for html in pages[1:])


async def test_customers_and_the_inbox_are_paged(browser, client, programme):
    p = await programme()
    first = await sign_up(client, p, "corporates")  # its e-mail code: the inbox's oldest message
    for _ in range(205):
        await sign_up(client, p, "consumers")
    base = f"/portal/programmes/{p.id}"
    pages = await _all_pages(browser, f"{base}/customers")
    assert len(pages) == 5 and "Rows 201 to 206 of 206" in pages[-1]
    assert first.email in pages[-1]
    # A search keeps its words from page to page.
    found = await _all_pages(browser, f"{base}/customers?q=example.com")
    assert len(found) == 5 and "Rows 201 to 206 of 206" in found[-1]
    assert "q=example.com" in found[0]
    inbox = await _all_pages(browser, f"{base}/inbox")
    assert len(inbox) == 5 and "Rows 201 to 206 of 206" in inbox[-1]
    assert first.email in inbox[-1] and CODE in inbox[-1]


async def test_a_page_past_the_end_is_empty_not_an_error(browser, programme):
    p = await programme()
    base = f"/portal/programmes/{p.id}"
    for url in ("payments", "customers", "inbox", "webhooks", "ledger"):
        await page(browser, f"{base}/{url}?offset=100000")
    r = await browser.get(f"{base}/payments?offset=-1")
    assert r.status_code in (400, 422)


@pytest.fixture
async def browser(app: Any) -> Any:
    from tests.api.test_portal_web import signed_in_client

    c = await signed_in_client(app)
    try:
        yield c
    finally:
        await c.aclose()


async def test_every_html_page_refuses_framing_and_says_nosniff_once(client, programme):
    """Issue 41 §5: the API and simulator docs, the KYC sandbox page, the landing page and the
    portal's pages all refuse to be framed, each with one `X-Content-Type-Options`."""
    p = await programme()
    c = await sign_up(client, p, "consumers")
    r = await client.post("/multi/consumers/kyc", headers=c.headers)
    assert r.status_code == 200, r.text
    pages = [f"{base}/{page}" for base in DOC_BASES for page in ("docs", "redoc")]
    pages += [f"/kyc/{r.json()['reference']}", "/", "/portal/login"]
    for url in pages:
        r = await client.get(url)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), url
        assert r.headers.get_list("x-content-type-options") == ["nosniff"], url
        assert r.headers.get("x-frame-options") == "DENY", url
        policies = r.headers.get_list("content-security-policy")
        assert any("frame-ancestors 'none'" in policy for policy in policies), (url, policies)
    # A JSON answer is not a page: nosniff once, nothing more.
    r = await client.get("/multi/consumers", headers=c.headers)
    assert r.headers.get_list("x-content-type-options") == ["nosniff"]
    assert "x-frame-options" not in r.headers
