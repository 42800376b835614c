"""The operator portal readable everywhere (issue 35 §5, decision 0058), over HTTP as a browser
uses it: every amount with thousands separators and its currency's decimals, a copy button
holding the exact value next to keys, ids and IBANs, help text with its unit on every setting,
statements by date range, and refusals in plain words with the API's errorCode in small print;
a query string a page cannot use answers a portal page, never JSON or a 500. The same pages at a
phone's width in Chromium are in test_portal_readable_browser.py."""

from __future__ import annotations

import csv
import html as html_lib
import io
import re
from datetime import UTC, datetime
from typing import Any

import httpx

from tests.api.payments_support import advance, customer, entries
from tests.api.test_managed_cards import create as create_card
from tests.api.test_portal_web import (
    PORTAL_API,
    browser,
    flash_of,
    landed,
    page,
    submit,
)
from tests.factories import deposit

__all__ = ["browser"]  # the signed-in portal client fixture, shared with test_portal_web

FUNDS = 98_765_432_101  # 987,654,321.01 EUR: under the SEPA limit of one deposit
SHOWN = "987,654,321.01 EUR"


def visible(html: str) -> str:
    """The page's text as read: tags dropped, entities decoded, spaces collapsed."""
    text = html_lib.unescape(re.sub(r"<[^>]+>", " ", html))
    return re.sub(r"\s+", " ", text).replace(" ,", ",")


def copy_buttons(html: str) -> list[str]:
    """The values the page's copy buttons copy."""
    return [
        html_lib.unescape(v)
        for v in re.findall(
            r'<button[^>]*class="copy[^"]*"[^>]*'
            r'data-copy="([^"]*)"',
            html,
        )
    ]


def copy_next_to(html: str, value: str) -> bool:
    """A copy button for `value` right after the value itself, as the copy macro writes it."""
    shown = html_lib.escape(value)
    return bool(
        re.search(
            rf'<code>{re.escape(shown)}</code><button[^>]*data-copy="'
            rf'{re.escape(shown)}"',
            html,
        )
    )


def test_the_one_amount_formatter() -> None:
    from multibank.portal.overview import amount

    assert amount(9_007_199_254_861_336, "EUR") == "90,071,992,548,613.36 EUR"
    assert amount(-123_456_789, "GBP") == "-1,234,567.89 GBP"
    assert amount(0, "EUR") == "0.00 EUR"
    assert amount(5, "EUR") == "0.05 EUR"
    assert amount(1_234_567, "JPY") == "1,234,567 JPY"  # no minor unit
    assert amount(1_234_567, "BHD") == "1,234.567 BHD"  # three decimals


async def test_amounts_have_thousands_separators_on_every_page(
    browser: httpx.AsyncClient, client: httpx.AsyncClient, programme: Any
) -> None:
    p = await programme()
    ident, acc = await customer(client, p, funds=FUNDS, sms=False)
    card = await create_card(
        client, ident, mode="DEBIT_MODE", parentManagedAccountId=acc, currency="EUR"
    )
    base = f"/portal/programmes/{p.id}"
    for url in (
        f"{base}/overview",
        f"{base}/customers/{ident.id}",
        f"{base}/accounts/{acc}",
        f"{base}/ledger",
        f"{base}/cards",
        f"{base}/cards/{card['id']}",
    ):
        text = visible(await page(browser, url))
        assert SHOWN in text, url
        assert "987654321.01" not in text, url  # never without its separators
    # Fees on the programme page are amounts too: 100 minor units of ADMIN_FEE = 1.00 EUR.
    text = visible(await page(browser, base))
    assert "DEFAULT: 1.00 EUR" in text and "EUR 100" not in text


async def test_copy_buttons_hold_the_exact_key_id_or_iban(
    browser: httpx.AsyncClient, client: httpx.AsyncClient, programme: Any
) -> None:
    p = await programme()
    ident, acc = await customer(client, p, funds=1000, sms=False)
    iban = (await client.get(f"/multi/managed_accounts/{acc}/iban", headers=ident.headers)).json()
    details = iban["bankAccountDetails"][0]["details"]["iban"]
    base = f"/portal/programmes/{p.id}"
    shown = await page(browser, f"{base}/customers/{ident.id}")
    for value in (ident.id, acc, details):
        assert copy_next_to(shown, value), value
    shown = await page(browser, f"{base}/accounts/{acc}")
    assert copy_next_to(shown, acc) and copy_next_to(shown, details)
    shown = await page(browser, base)
    assert copy_next_to(shown, p.id)
    for profile in ("transfers", "corporateManagedAccount", "corporatePrepaidManagedCard"):
        assert copy_next_to(shown, p.profiles[profile]), profile
    # A new API key, shown once, with a button copying exactly it.
    made = await landed(browser, await submit(browser, f"{base}/api_keys", base, label="ci"))
    key = re.search(r'id="new-key">([^<]+)<', made)
    assert key and key.group(1).startswith("mb_sbx_")
    assert key.group(1) in copy_buttons(made)
    # The buttons work through the portal's own script, served as JavaScript; no page has an
    # inline script.
    r = await browser.get("/portal/static/portal.js")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/javascript")
    assert (
        "navigator.clipboard" in r.text
        and "default-src 'self'" in (r.headers["content-security-policy"])
    )
    assert re.findall(r"<script[^>]*>", made) == ['<script src="/portal/static/portal.js" defer>']


# Each setting's field on the programme page, and the words its help must hold: its unit.
UNITS = {
    "settings": {
        "stepUpRequired": "Yes or no",
        "failedLoginLimit": "count",
        "passwordExpiryDays": "In days",
        "ibanAllocationDelaySeconds": "In seconds",
        "sendsScaRequired": "Yes or no",
        "owtScaRequired": "Yes or no",
        "scaChallengeLimit": "count",
        "lowValueExemptionMaxAmount": "In EUR",
        "lowValueExemptionMaxCount": "since the customer's last SCA",
        "lowValueExemptionMaxTotal": "In EUR",
        "owtProcessingDelaySeconds": "In seconds",
        "webhookUrl": "https://",
    },
    "api_keys": {"label": "100 characters"},
    "movement_fee": {"kind": "payment", "currency": "ISO 4217", "amount": "In that currency"},
    "card_fee": {"kind": "purchase", "currency": "ISO 4217", "amount": "In that currency"},
    "fee_type": {
        "name": "letters",
        "group": "DEFAULT",
        "currency": "ISO 4217",
        "amount": "In that currency",
    },
    "clock": {"by": "1d, 2h, 30m, 45s"},
}


def labels_of(html: str, action: str) -> dict[str, str]:
    """The help text of each field of the form posting to `action`, by the field's name."""
    form = re.search(rf'<form[^>]*action="[^"]*/{action}"[^>]*>(.*?)</form>', html, re.S)
    assert form, f"no form {action}"
    found: dict[str, str] = {}
    for label in re.findall(r"<label(?: [^>]*)?>(.*?)</label>", form.group(1), re.S):
        name = re.search(r'name="([^"]+)"', label)
        helped = re.search(r'<small class="help">(.*?)</small>', label, re.S)
        if name and 'type="checkbox"' not in label:
            found[name.group(1)] = html_lib.unescape(helped.group(1)) if helped else ""
    return found


async def test_every_setting_has_help_text_with_its_unit(
    browser: httpx.AsyncClient,
    client: httpx.AsyncClient,
    programme: Any,
    admin_headers: dict[str, str],
) -> None:
    p = await programme()
    shown = await page(browser, f"/portal/programmes/{p.id}")
    for action, units in UNITS.items():
        helps = labels_of(shown, action)
        assert set(helps) == set(units), (action, set(helps) ^ set(units))
        for name, unit in units.items():
            assert unit in helps[name], (action, name, helps[name])
    # Each profile's form too.
    profile = p.profiles["transfers"]
    helps = labels_of(shown, f"profiles/{profile}")
    assert "ISO 4217" in helps["currencies"] and "Yes or no" in helps["active"]
    # The deposit of the customer's page says its unit with the account's own currency.
    ident, _ = await customer(client, p, sms=False, currency="GBP")
    helps = labels_of(
        await page(browser, f"/portal/programmes/{p.id}/customers/{ident.id}"), "deposit"
    )
    assert "In GBP, as shown on this page (such as 100.00)" in helps["amount"]
    # The new setting on the form, password expiry, saves and clears.
    home = f"/portal/programmes/{p.id}"
    said = flash_of(
        await landed(
            browser, await submit(browser, f"{home}/settings", home, passwordExpiryDays="90")
        )
    )
    assert said == "Settings saved."
    r = await client.get(f"{PORTAL_API}/{p.id}", headers=admin_headers)
    assert r.json()["settings"]["passwordExpiryDays"] == 90
    await landed(browser, await submit(browser, f"{home}/settings", home, passwordExpiryDays=""))
    r = await client.get(f"{PORTAL_API}/{p.id}", headers=admin_headers)
    assert r.json()["settings"]["passwordExpiryDays"] is None


def day_of(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


async def test_statements_by_date_range(
    browser: httpx.AsyncClient, client: httpx.AsyncClient, programme: Any
) -> None:
    p = await programme()
    ident, acc = await customer(client, p, funds=12_345, sms=False)
    (first,) = [e["processedTimestamp"] for e in await entries(client, ident, acc)]
    await advance(client, p, 3 * 86_400)
    assert await deposit(client, p, acc, 67_890) == "COMPLETED"  # three days later
    day1, day2 = day_of(first), day_of(first + 2 * 86_400_000)
    url = f"/portal/programmes/{p.id}/accounts/{acc}"

    everything = await page(browser, url)
    assert 'id="statement-range"' in everything and 'name="from"' in everything
    assert "Showing entries of all dates" in visible(everything)
    assert "123.45 EUR" in visible(everything) and "678.90 EUR" in visible(everything)

    ranged = await page(browser, f"{url}?from={day1}&to={day1}")
    text = visible(ranged)
    assert f"Showing entries from {day1} to {day1}" in text
    assert "123.45 EUR" in text and "678.90 EUR" not in text
    # Its downloads are of the same range: JSON in the API's shape, CSV, PDF.
    links = dict(re.findall(r'href="([^"]*statement\.(json|csv|pdf)[^"]*)"', ranged))
    links = {kind: html_lib.unescape(link) for link, kind in links.items()}
    assert set(links) == {"json", "csv", "pdf"}
    r = await browser.get(links["json"])
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    amounts = [e["transactionAmount"]["amount"] for e in body["entry"]]
    assert body["count"] == len(amounts) and 12_345 in amounts and 67_890 not in amounts
    r = await browser.get(links["csv"])
    amounts = [row["transactionAmount.amount"] for row in csv_rows(r.text)]
    assert "12345" in amounts and "67890" not in amounts  # the machine format kept
    r = await browser.get(links["pdf"])
    assert r.status_code == 200 and r.content.startswith(b"%PDF")
    later = visible(await page(browser, f"{url}?from={day2}"))
    assert f"Showing entries from {day2} to now" in later
    assert "678.90 EUR" in later and "123.45 EUR" not in later

    # A date that is not one is said on the page, which shows every date meanwhile.
    bad = await browser.get(f"{url}?from=yesterday&to={day1}")
    assert bad.status_code == 200
    assert "From must be a date written as YYYY-MM-DD" in visible(bad.text)
    assert f"Showing entries from the first entry to {day1}" in visible(bad.text)
    swapped = await page(browser, f"{url}?from={day2}&to={day1}")
    assert "From must not be after To" in visible(swapped)
    assert "Showing entries of all dates" in visible(swapped)
    assert "statement.csv?offset=0" in html_lib.unescape(swapped)  # its downloads: all dates
    r = await browser.get(f"{url}/statement.csv?from=2026-02-30")
    assert r.status_code == 400 and r.headers["content-type"].startswith("text/html")
    assert "must be a date written as YYYY-MM-DD" in r.text


def small_print(html: str) -> str:
    found = re.search(
        r'<div class="flash error"[^>]*>.*?<small class="muted">([^<]*)</small>', html, re.S
    )
    return found.group(1) if found else ""


async def test_refusals_in_plain_words_with_the_error_code_in_small_print(
    browser: httpx.AsyncClient,
    client: httpx.AsyncClient,
    programme: Any,
    admin_headers: dict[str, str],
) -> None:
    p = await programme()
    name = (await client.get(f"{PORTAL_API}/{p.id}", headers=admin_headers)).json()["name"]
    # A programme name that is taken.
    refused = await landed(
        browser, await submit(browser, "/portal/programmes", "/portal/", name=name)
    )
    said = flash_of(refused)
    assert said.startswith("A programme of that name exists already: choose another name")
    assert small_print(refused) == "PROGRAMME_NAME_NOT_UNIQUE"
    assert "Refused" not in said
    # A name the pattern refuses: the rule in words, never the pattern.
    refused = await landed(
        browser, await submit(browser, "/portal/programmes", "/portal/", name="two words")
    )
    said = flash_of(refused)
    assert "The name may hold only letters, digits" in said and "[A-Za-z" not in said
    assert small_print(refused) == "invalid: name"
    # Malformed amounts: a setting's, a fee's.
    home = f"/portal/programmes/{p.id}"
    refused = await landed(
        browser,
        await submit(browser, f"{home}/settings", home, lowValueExemptionMaxAmount="30.001"),
    )
    said = flash_of(refused)
    assert said.startswith("Exempt amount per payment has more decimals than EUR has")
    assert small_print(refused) == "invalid: lowValueExemptionMaxAmount"
    assert "int_" not in said and "Input should" not in said
    refused = await landed(
        browser,
        await submit(
            browser, f"{home}/movement_fee", home, kind="sends", currency="EUR", amount=""
        ),
    )
    assert "The fee must be written in EUR with the digits 0-9" in flash_of(refused)
    assert "invalid literal" not in refused
    refused = await landed(
        browser, await submit(browser, f"{home}/settings", home, failedLoginLimit="1000")
    )
    assert flash_of(refused).startswith("Wrong passwords before lock-out must be at most 100")
    # A service's refusal: its sentence says what to do next; the code follows in small print.
    refused = await landed(
        browser,
        await submit(
            browser, f"{home}/movement_fee", home, kind="sends", currency="JPY", amount="5"
        ),
    )
    assert "add it to the profile's currencies first" in html_lib.unescape(flash_of(refused))
    assert small_print(refused) == "CURRENCY_NOT_SUPPORTED_BY_PROFILE"
    ident, acc = await customer(client, p, funds=1000, sms=False)
    page_url = f"{home}/customers/{ident.id}"
    refused = await landed(
        browser, await submit(browser, f"{home}/accounts/{acc}/deposit", page_url, amount="0")
    )
    assert "The amount must be more than zero" in flash_of(refused)
    assert small_print(refused) == "DENIED_AMOUNT_NOT_POSITIVE"
    # A code the mapping does not know still reads as a sentence, with its code.
    from multibank.portal.readable import DEFAULT_SENTENCE, sentence

    assert sentence("SOMETHING_NEW") == DEFAULT_SENTENCE
    assert "nothing changed" in DEFAULT_SENTENCE


async def test_query_strings_a_page_cannot_use_answer_a_portal_page(
    browser: httpx.AsyncClient, client: httpx.AsyncClient, programme: Any
) -> None:
    p = await programme()
    ident, acc = await customer(client, p, funds=1000, sms=False)
    base = f"/portal/programmes/{p.id}"
    for url in (
        f"{base}/customers?offset=abc",
        f"{base}/customers?offset=-1",
        f"{base}/customers/{ident.id}?offset=1e3",
        f"{base}/accounts/{acc}?offset=x&from=2026-13-01",
        f"{base}/accounts/{acc}/statement.csv?offset=%FF",
        f"{base}/ledger?offset=99999999999999999999",
        f"{base}/payments?offset=",
        f"{base}/webhooks?state=LOST",
        f"{base}/webhooks?eventType={'x' * 200}",
        f"{base}/cards?identity={'9' * 60}",
        f"{base}/cards/1?offset=abc",
        f"{base}/inbox?offset=[]",
    ):
        r = await browser.get(url)
        assert r.status_code in (200, 400, 404), (url, r.status_code)
        assert r.headers["content-type"].startswith("text/html"), (url, r.text[:200])
        assert r.headers["content-security-policy"].startswith("default-src 'self'"), url
        if r.status_code == 400:
            text = visible(r.text)
            assert "has a value it cannot use" in text and "follow the page's own" in text, url
            assert '<small class="muted">invalid: ' in r.text, url
    r = await browser.get(f"{base}/customers?offset=abc")
    assert r.status_code == 400 and "(offset)" in r.text
    assert 'href="/portal/"' in r.text  # a way back into the portal


async def test_an_unknown_portal_address_is_the_portals_own_not_found_page(
    client: Any, admin_headers: Any
) -> None:
    r = await client.get("/portal/programmes/1/no-such-page")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert "No such page" in r.text
    assert "default-src 'self'" in r.headers["content-security-policy"]
    # The operator API under /portal/api keeps its JSON answers, and its docs redirect.
    api = await client.get("/portal/api/no-such-route", headers=admin_headers)
    assert api.status_code == 404
    assert api.headers["content-type"].startswith("application/json")
    assert (await client.get("/portal/api")).status_code in (307, 308)
