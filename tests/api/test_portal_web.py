"""The operator web portal at /portal/ (issue 14, D17), over HTTP as a browser would use it:
sign-in with the admin token (an HttpOnly, SameSite=Strict session cookie), every page refusing a
visitor without a session, every form refusing a post without its CSRF token, and the operator's
work end to end: programmes, settings, keys, fees, customers and their verification, deposits and
IBANs, statements and their downloads, the ledger, payments, webhooks, the inbox, the clock.
The same journey in a real browser is in test_portal_browser.py."""

from __future__ import annotations

import html
import re
import secrets
from typing import Any

import httpx
import pytest

from multibank.portal.web import WRONG_TOKEN_FROM_ENV
from tests.api.payments_support import customer
from tests.conftest import ADMIN_TOKEN
from tests.factories import open_account, sign_up

PORTAL_API = "/portal/api/programmes"


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


async def sign_in(c: httpx.AsyncClient, token: str = ADMIN_TOKEN) -> httpx.Response:
    """The sign-in form posted as a browser posts it: with the CSRF token of the page."""
    form = await c.get("/portal/login")
    assert form.status_code == 200, form.text
    return await c.post("/portal/login", data={"token": token, "csrf": csrf_of(form.text)})


async def signed_in_client(app: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    c = httpx.AsyncClient(transport=transport, base_url="http://testserver")
    r = await sign_in(c)
    assert r.status_code == 303 and r.headers["location"] == "/portal/"
    return c


@pytest.fixture
async def browser(app: Any) -> Any:
    c = await signed_in_client(app)
    try:
        yield c
    finally:
        await c.aclose()


async def page(c: httpx.AsyncClient, url: str) -> str:
    r = await c.get(url)
    assert r.status_code == 200, (url, r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("text/html")
    return r.text


async def submit(c: httpx.AsyncClient, url: str, form_page: str, **fields: Any) -> httpx.Response:
    html = await page(c, form_page)
    return await c.post(url, data={"csrf": csrf_of(html), **fields})


async def landed(c: httpx.AsyncClient, r: httpx.Response) -> str:
    """The page a form's post redirected to (POST/redirect/GET), as the browser shows it."""
    assert r.status_code == 303, (r.status_code, r.text[:300])
    return await page(c, r.headers["location"])


def flash_of(html: str) -> str:
    """The flash's text as read, its errorCode in small print included (tags dropped)."""
    found = re.search(r'<div class="flash[^"]*" role="status">(.*?)</div>', html, re.S)
    return re.sub(r"<[^>]+>", "", found.group(1)) if found else ""


async def submitted(c: httpx.AsyncClient, url: str, form_page: str, **fields: Any) -> str:
    """The flash message the page after the post shows."""
    return flash_of(await landed(c, await submit(c, url, form_page, **fields)))


async def test_sign_in_sets_a_strict_http_only_cookie(client):
    r = await client.get("/portal/login")
    assert r.status_code == 200 and "Admin token" in r.text
    wrong = await sign_in(client, "nope")
    assert wrong.status_code == 401 and "Wrong admin token" in wrong.text
    assert "mb_portal=" not in wrong.headers.get("set-cookie", "")
    r = await sign_in(client)
    assert r.status_code == 303
    cookie = r.headers["set-cookie"].lower()
    for part in ("mb_portal=", "httponly", "samesite=strict", "path=/portal"):
        assert part in cookie, cookie
    client.cookies.clear()
    r = await client.get("/portal")
    assert r.status_code == 308 and r.headers["location"] == "/portal/"


async def test_a_wrong_token_is_told_where_the_servers_comes_from(client):
    """The server's token is MULTIBANK_ADMIN_TOKEN's here (the suite sets it): the page says
    so, and nothing else (issue 41 §1; a sandbox's generated one: tests/test_cli_database.py)."""
    form = await client.get("/portal/login")
    assert "the value of its <code>MULTIBANK_ADMIN_TOKEN</code>" in form.text
    wrong = await sign_in(client, "nope")
    assert wrong.status_code == 401
    assert WRONG_TOKEN_FROM_ENV in html.unescape(wrong.text)
    assert "multibank serve" not in wrong.text and "multibank admin-token" not in wrong.text


async def test_every_page_refuses_a_visitor_without_a_session(client, programme):
    p = await programme()
    ident = await sign_up(client, p, "corporates")
    client.cookies.clear()
    base = f"/portal/programmes/{p.id}"
    for url in (
        "/portal/",
        base,
        f"{base}/customers",
        f"{base}/customers/{ident.id}",
        f"{base}/ledger",
        f"{base}/payments",
        f"{base}/webhooks",
        f"{base}/inbox",
        f"{base}/accounts/1",
        f"{base}/accounts/1/statement.csv",
    ):
        r = await client.get(url)
        assert (r.status_code, r.headers.get("location")) == (303, "/portal/login"), url
    for url in (
        "/portal/programmes",
        f"{base}/settings",
        f"{base}/api_keys",
        f"{base}/clock",
        f"{base}/customers/{ident.id}/verify",
        "/portal/logout",
    ):
        r = await client.post(url, data={"csrf": "x"})
        assert (r.status_code, r.headers.get("location")) == (303, "/portal/login"), url
    # A forged or ended session cookie is no session.
    client.cookies.set("mb_portal", "forged", path="/portal")
    assert (await client.get("/portal/")).status_code == 303
    client.cookies.clear()


async def test_a_form_without_its_csrf_token_is_refused_and_changes_nothing(
    browser, client, admin_headers
):
    name = f"web{secrets.token_hex(4)}"
    for fields in ({"name": name}, {"name": name, "csrf": "wrong"}):
        r = await browser.post("/portal/programmes", data=fields)
        assert r.status_code == 403 and "CSRF" in r.text
    listed = (await client.get(PORTAL_API, headers=admin_headers)).json()
    assert name not in {p["name"] for p in listed}


async def test_programme_settings_keys_and_fees(browser, client, admin_headers):
    name = f"web{secrets.token_hex(4)}"
    r = await submit(browser, "/portal/programmes", "/portal/", name=name, currencies="EUR,GBP")
    html = await landed(browser, r)
    assert name in html
    key = re.search(r'id="new-key">([^<]+)<', html)
    assert key, "the new programme's API key is shown once"
    listed = (await client.get(PORTAL_API, headers=admin_headers)).json()
    pid = next(p["programmeId"] for p in listed if p["name"] == name)
    # The key works on the public API.
    r = await client.post(
        "/multi/passwords/validate",
        headers={"api-key": key.group(1)},
        json={"password": {"value": "Str0ng-Passw0rd!"}},
    )
    assert r.status_code == 204
    home = f"/portal/programmes/{pid}"
    said = await submitted(
        browser,
        f"{home}/settings",
        home,
        stepUpRequired="true",
        failedLoginLimit="7",
        sendsScaRequired="false",
        webhookUrl="https://hooks.example.com/x",
    )
    assert said == "Settings saved."
    settings = (await client.get(f"{PORTAL_API}/{pid}", headers=admin_headers)).json()["settings"]
    assert settings["stepUpRequired"] is True and settings["failedLoginLimit"] == 7
    assert settings["sendsScaRequired"] is False
    assert settings["webhookUrl"] == "https://hooks.example.com/x"
    bad = await landed(
        browser, await submit(browser, f"{home}/settings", home, failedLoginLimit="0")
    )
    assert 'class="flash error"' in bad and "failedLoginLimit" in flash_of(bad)
    said = await submitted(
        browser, f"{home}/movement_fee", home, kind="sends", currency="GBP", amount="0.25"
    )
    assert said == "Fee set."
    summary = (await client.get(f"{PORTAL_API}/{pid}", headers=admin_headers)).json()
    assert summary["movementFees"]["sends"]["GBP"] == 25
    said = await submitted(
        browser,
        f"{home}/fee_type",
        home,
        name="CARD_FEE",
        group="PREMIUM",
        currency="EUR",
        amount="0.40",
    )
    assert said == "Fee type CARD_FEE saved."
    await submit(
        browser,
        f"{home}/fee_type",
        home,
        name="CARD_FEE",
        group="DEFAULT",
        currency="EUR",
        amount="0.90",
    )
    fee_types = (await client.get(f"{PORTAL_API}/{pid}/fee_types", headers=admin_headers)).json()
    card = next(f for f in fee_types if f["name"] == "CARD_FEE")
    assert card["amounts"] == {"PREMIUM": {"EUR": 40}, "DEFAULT": {"EUR": 90}}
    profiles = (await client.get(f"{PORTAL_API}/{pid}/profiles", headers=admin_headers)).json()
    sends = next(x for x in profiles if x["kind"] == "sends")
    said = await submitted(
        browser, f"{home}/profiles/{sends['id']}", home, currencies="EUR", active="false"
    )
    assert said == "Profile saved."
    profiles = (await client.get(f"{PORTAL_API}/{pid}/profiles", headers=admin_headers)).json()
    sends = next(x for x in profiles if x["kind"] == "sends")
    assert (sends["currencies"], sends["active"]) == (["EUR"], False)
    r = await submit(browser, f"{home}/api_keys", home, label="mobile app")
    second = re.search(r'id="new-key">([^<]+)<', await landed(browser, r))
    assert second and second.group(1) != key.group(1)
    keys = (await client.get(f"{PORTAL_API}/{pid}/api_keys", headers=admin_headers)).json()
    labelled = next(k for k in keys if k["label"] == "mobile app")
    revoke = f"{home}/api_keys/{labelled['id']}/revoke"
    said = await submitted(browser, revoke, revoke, confirm="yes")
    assert said == "API key revoked."
    r = await client.post(
        "/multi/passwords/validate",
        headers={"api-key": second.group(1)},
        json={"password": {"value": "Str0ng-Passw0rd!"}},
    )
    assert r.status_code == 401  # revoked


async def test_customers_verification_deposit_statement_and_sandbox_tools(
    browser, client, programme, admin_headers
):
    p = await programme()
    base = f"/portal/programmes/{p.id}"
    ident = await sign_up(client, p, "corporates")
    found = await page(browser, f"{base}/customers?q={ident.email}")
    assert ident.email in found and "NOT_STARTED" in found
    detail = f"{base}/customers/{ident.id}"
    html = await landed(browser, await submit(browser, f"{detail}/verify", detail))
    assert flash_of(html) == "Approved." and 'id="dd-status">APPROVED<' in html
    # IBANs wait for the portal's button, not for the programme's delay.
    r = await client.patch(
        f"{PORTAL_API}/{p.id}/settings",
        headers=admin_headers,
        json={"ibanAllocationDelaySeconds": 86400},
    )
    assert r.status_code == 200, r.text
    acc = (await open_account(client, ident, "EUR"))["id"]
    # The owner asks for the IBAN (the portal finishes only an allocation asked for).
    r = await client.post(f"/multi/managed_accounts/{acc}/iban", headers=ident.headers)
    assert r.status_code == 200, r.text
    said = await submitted(browser, f"{base}/accounts/{acc}/iban", detail)
    assert said.startswith("IBAN ") and said.endswith(" allocated.")
    said = await submitted(browser, f"{base}/accounts/{acc}/deposit", detail, amount="123.45")
    assert said == "Deposited 123.45 EUR. COMPLETED"  # the code in small print
    got = await client.get(f"/multi/managed_accounts/{acc}", headers=ident.headers)
    assert got.json()["balances"]["actualBalance"] == 12345
    statement = await page(browser, f"{base}/accounts/{acc}")
    assert "DEPOSIT" in statement and "123.45 EUR" in statement
    csv_ = await browser.get(f"{base}/accounts/{acc}/statement.csv")
    assert csv_.status_code == 200 and "12345" in csv_.text
    pdf = await browser.get(f"{base}/accounts/{acc}/statement.pdf")
    assert pdf.content.startswith(b"%PDF")
    ledger = await page(browser, f"{base}/ledger")
    assert 'id="verify">ledger verify: ok' in ledger and "DEPOSIT" in ledger
    inbox = await page(browser, f"{base}/inbox")
    assert ident.email in inbox and "123456" in inbox  # the e-mail verification code it "sent"
    said = await submitted(browser, f"{base}/clock", base, seconds="60")
    assert said.startswith("The clock moved on to ")
    missing = await browser.get("/portal/programmes/1")
    assert missing.status_code == 404 and "No such programme" in missing.text


async def test_payments_and_webhooks_pages(browser, client, programme, admin_headers):
    p = await programme()
    base = f"/portal/programmes/{p.id}"
    r = await client.patch(
        f"{PORTAL_API}/{p.id}/settings", headers=admin_headers, json={"owtScaRequired": False}
    )
    assert r.status_code == 200
    ident, acc = await customer(client, p, funds=100_000, sms=False)
    r = await client.post(
        "/multi/outgoing_wire_transfers",
        headers=ident.headers,
        json={
            "profileId": p.profiles["outgoingWireTransfers"],
            "sourceInstrument": {"type": "managed_accounts", "id": acc},
            "transferAmount": {"currency": "EUR", "amount": 5000},
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
    owt_id = r.json()["id"]
    payments = await page(browser, f"{base}/payments")
    assert owt_id in payments and "SUBMITTED" in payments
    said = await submitted(browser, f"{base}/wire/{owt_id}/accept", f"{base}/payments")
    assert said == ("Settled: the wire transfer has left the account.")
    r = await client.get(f"/multi/outgoing_wire_transfers/{owt_id}", headers=ident.headers)
    assert r.json()["state"] == "COMPLETED"
    hooks = await page(browser, f"{base}/webhooks")
    assert "no webhook URL" in hooks


async def test_sign_out_ends_the_session_everywhere(app, client):
    c = await signed_in_client(app)
    try:
        cookie = c.cookies.get("mb_portal")
        html = await page(c, "/portal/")
        r = await c.post("/portal/logout", data={"csrf": csrf_of(html)})
        assert r.status_code == 303 and r.headers["location"].startswith("/portal/login")
        # The old cookie, kept by someone, opens nothing any more.
        c.cookies.set("mb_portal", cookie or "", path="/portal")
        assert (await c.get("/portal/")).status_code == 303
    finally:
        await c.aclose()


async def test_the_programmes_page_is_paged_newest_first(browser, programme, container):
    """A server holding many programmes (a client's test suite makes one per test) shows them
    fifty at a time, the newest on the first page, with links to the older ones."""
    from multibank.programmes import repository

    async with container.db.transaction() as session:
        before = len(await repository.list_programmes(session))
    made = [await programme() for _ in range(max(3, 51 - before))]
    async with container.db.transaction() as session:
        everyone = [int(p.id) for p in await repository.list_programmes(session)]
    assert len(everyone) > 50
    first = await page(browser, "/portal/")
    ids = re.findall(r'href="/portal/programmes/(\d+)/overview"', first)
    assert ids == [str(i) for i in sorted(everyone, reverse=True)[:50]]
    assert ids[:3] == [p.id for p in reversed(made)][:3]
    assert f"of {len(everyone)}" in first and 'rel="next"' in first
    last = await page(browser, f"/portal/?offset={len(everyone) - 1}")
    assert re.findall(r'href="/portal/programmes/(\d+)/overview"', last) == [str(min(everyone))]


async def test_the_portal_lists_every_interface_base_with_its_docs(browser):
    """D34: the portal lists the base URLs as the home page does, the 3.63 line's among them,
    each with a link to its docs that the server answers."""
    home = await page(browser, "/portal/")
    for base, version in (
        ("/multi", "3.29.1"),
        ("/3.29.1/multi", "3.29.1"),
        ("/3.1.0/multi", "3.1.0"),
        ("/3.63.4/multi", "3.63.4"),
    ):
        assert f'<a href="{base}/docs">' in home, base
        docs = await browser.get(f"{base}/docs")
        assert docs.status_code == 200 and f"{base}/openapi.json" in docs.text
        info = (await browser.get(f"{base}/openapi.json")).json()["info"]
        assert info["version"] == version
