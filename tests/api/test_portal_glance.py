"""A portal that reads at a glance (issue 41 §3, decisions 0070 and 0071), over HTTP as a browser
uses it: money typed as it is shown (major units) with the minor-unit value under the field,
webhook URLs with international host names stored in their ASCII form and refused with the
real reason, card purchases among the payments, a card's statement and test purchase, names
instead of ids, and one empty state per empty table."""

from __future__ import annotations

import html as html_lib
import re
import secrets
from typing import Any

import httpx

from tests.api.payments_support import customer
from tests.api.test_portal_web import (  # noqa: F401 (the fixture)
    PORTAL_API,
    browser,
    flash_of,
    landed,
    page,
    submit,
    submitted,
)


async def settings_of(client: httpx.AsyncClient, admin: dict[str, str], pid: str) -> Any:
    return (await client.get(f"{PORTAL_API}/{pid}", headers=admin)).json()["settings"]


async def test_money_is_typed_as_it_is_shown_with_its_minor_units_under_the_field(
    browser,  # noqa: F811
    client,
    programme,
    admin_headers,
):
    p = await programme()
    home = f"/portal/programmes/{p.id}"
    ident, acc = await customer(client, p, funds=0, sms=False)
    detail = f"{home}/customers/{ident.id}"
    shown = await page(browser, detail)
    # The field holds the amount as the page writes amounts; the line under it, minor units.
    assert re.search(r'<input name="amount" class="major"[^>]*value="100\.00"', shown)
    assert "= 10,000 minor units of EUR" in shown
    said = await submitted(browser, f"{home}/accounts/{acc}/deposit", detail, amount="1,234.56")
    assert said.startswith("Deposited 1,234.56 EUR.")
    got = await client.get(f"/multi/managed_accounts/{acc}", headers=ident.headers)
    assert got.json()["balances"]["actualBalance"] == 123456
    refused = await landed(
        browser, await submit(browser, f"{home}/accounts/{acc}/deposit", detail, amount="1.005")
    )
    assert "more decimals than EUR has (2 decimals)" in flash_of(refused)
    got = await client.get(f"/multi/managed_accounts/{acc}", headers=ident.headers)
    assert got.json()["balances"]["actualBalance"] == 123456  # nothing moved

    # Fees and settings alike: typed in major units, stored in minor units.
    assert await submitted(
        browser, f"{home}/movement_fee", home, kind="sends", currency="GBP", amount="0.35"
    ) == ("Fee set.")
    summary = (await client.get(f"{PORTAL_API}/{p.id}", headers=admin_headers)).json()
    assert summary["movementFees"]["sends"]["GBP"] == 35
    said = await submitted(browser, f"{home}/settings", home, lowValueExemptionMaxAmount="45.50")
    assert said == "Settings saved."
    settings = await settings_of(client, admin_headers, p.id)
    assert settings["lowValueExemptionMaxAmount"] == 4550
    programme_page = await page(browser, home)
    assert re.search(
        r'name="lowValueExemptionMaxAmount" class="major"[^>]*value="45\.50"', programme_page
    )
    assert "= 4,550 minor units of EUR" in programme_page


async def test_a_webhook_url_with_an_international_host_is_stored_in_ascii(
    browser,  # noqa: F811
    client,
    programme,
    admin_headers,
):
    p = await programme()
    home = f"/portal/programmes/{p.id}"
    said = await submitted(
        browser, f"{home}/settings", home, webhookUrl="https://bücher.example/hooks?für=ü"
    )
    assert said == "Settings saved.", said
    settings = await settings_of(client, admin_headers, p.id)
    assert settings["webhookUrl"] == "https://xn--bcher-kva.example/hooks?f%C3%BCr=%C3%BC"
    assert "https://xn--bcher-kva.example/hooks" in await page(browser, home)


async def test_a_refused_webhook_url_says_the_real_reason(
    browser,  # noqa: F811
    client,
    programme,
    admin_headers,
):
    p = await programme(webhookUrl="https://kept.example/hooks")
    home = f"/portal/programmes/{p.id}"
    for url, reason in (
        ("ftp://files.example/x", "must start with http:// or https://"),
        ("hooks.example/x", "must start with http:// or https://"),
        ("https://☃.example/x", "“☃.example” is not a valid name"),
        ("https://bad host.example/", "contains a space"),
        ("https:///x", "has no host name"),
        ("https://host.example:99999/x", "port is not a number from 0 to 65535"),
    ):
        refused = await landed(
            browser, await submit(browser, f"{home}/settings", home, webhookUrl=url)
        )
        said = html_lib.unescape(flash_of(refused))
        assert reason in said, (url, said)
        assert "check the values" not in said  # not the default sentence
    settings = await settings_of(client, admin_headers, p.id)
    assert settings["webhookUrl"] == "https://kept.example/hooks"


async def test_a_live_programmes_refused_webhook_url_says_why(
    browser,  # noqa: F811
    client,
    admin_headers,
):
    r = await client.post(
        PORTAL_API,
        headers=admin_headers,
        json={"name": f"live{secrets.token_hex(4)}", "mode": "live"},
    )
    assert r.status_code == 201, r.text
    pid = r.json()["programmeId"]
    home = f"/portal/programmes/{pid}"
    refused = await landed(
        browser, await submit(browser, f"{home}/settings", home, webhookUrl="http://127.0.0.1:9/x")
    )
    said = html_lib.unescape(flash_of(refused))
    assert "127.0.0.1 resolves to 127.0.0.1, a loopback address" in said, said
    assert "WEBHOOK_URL_NOT_ALLOWED" in said
