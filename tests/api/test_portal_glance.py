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
from urllib.parse import urlencode

import httpx

from multibank.cards.models import ManagedCard
from multibank.portal.overview import amount as portal_amount
from tests.api.payments_support import customer
from tests.api.test_managed_cards import create
from tests.api.test_portal_cards import DEFAULT_CARD_FEES, buy, fund, simulate
from tests.api.test_portal_web import (  # noqa: F401 (the fixture)
    PORTAL_API,
    browser,
    flash_of,
    landed,
    page,
    submit,
    submitted,
)
from tests.factories import sign_up, verified


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


# Cards: a funded prepaid card, a purchase (authorised and settled at once), an open hold.


async def card_world(client: httpx.AsyncClient, p: Any, container: Any) -> dict[str, Any]:
    """A company (named) with an account of 100.00 EUR and a card "Travel card" funded with a
    50.00 EUR transfer from it; a purchase of 12.34 at Corner Café and an authorisation of 5.00
    still open."""
    ident, acc = await customer(client, p, funds=10_000, sms=False)
    card = await create(client, ident, friendlyName="Travel card")
    r = await client.post(
        "/multi/transfers",
        headers=ident.headers,
        json={
            "profileId": p.profiles["transfers"],
            "source": {"type": "managed_accounts", "id": acc},
            "destination": {"type": "managed_cards", "id": card["id"]},
            "destinationAmount": {"currency": "EUR", "amount": 5000},
        },
    )
    assert r.status_code == 200 and r.json()["state"] == "COMPLETED", r.text
    bought = await simulate(client, p.api_key, f"{card['id']}/purchase", buy(1234))
    held = await simulate(client, p.api_key, f"{card['id']}/authorise", buy(500))
    company = (await client.get("/multi/corporates", headers=ident.headers)).json()
    return {
        "ident": ident,
        "acc": acc,
        "card": card,
        "transfer": r.json()["id"],
        "bought": bought,
        "held": held,
        "company": company["company"]["name"],
    }


def rows_of(html: str) -> list[str]:
    body = re.search(r'<table class="rows payments">.*?<tbody>(.*?)</tbody>', html, re.S)
    assert body
    return re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)


async def test_card_purchases_are_among_the_payments_with_filters_and_counts(
    browser,  # noqa: F811
    client,
    programme,
    container,
):
    p = await programme()
    w = await card_world(client, p, container)
    base = f"/portal/programmes/{p.id}"
    listed = await page(browser, f"{base}/payments")
    rows = rows_of(listed)
    # The transfer, the purchase's authorisation and settlement, the open authorisation.
    assert len(rows) == 4, rows
    assert "Rows 1 to 4 of 4" in listed
    kinds = [re.search(r'data-label="Kind">([^<]*)<', row).group(1) for row in rows]
    assert sorted(kinds) == sorted(
        ["transfer", "card authorisation", "card settlement", "card authorisation"]
    )
    settlement = next(row for row in rows if "card settlement" in row)
    assert "Travel card" in settlement and html_lib.escape("Corner Café") in settlement
    assert w["company"] in settlement  # the card's owner by name
    assert "12.34 EUR" in settlement and "COMPLETED" in settlement
    assert f'href="{base}/cards/{w["card"]["id"]}#tx-' in settlement
    # Filters and counts apply to card steps as to payments.
    only = await page(browser, f"{base}/payments?kind=CARD_SETTLEMENT")
    assert len(rows_of(only)) == 1 and "12.34 EUR" in only
    pending = rows_of(await page(browser, f"{base}/payments?state=PENDING"))
    assert len(pending) == 1 and "5.00 EUR" in pending[0], pending
    ranged = rows_of(await page(browser, f"{base}/payments?min=12&max=13"))
    assert len(ranged) == 2 and all("12.34 EUR" in row for row in ranged), ranged
    assert 'value="CARD_AUTHORISATION"' in listed  # the kind filter offers them
    # The overview's payments by state counts them too.
    shown = await page(browser, f"{base}/overview")

    def count(name: str) -> int:
        found = re.search(rf'data-count="{name}">([0-9,]+)<', shown)
        assert found, name
        return int(found.group(1).replace(",", ""))

    assert count("payments") == 4
    assert count("payments-PENDING") == 1 and count("payments-COMPLETED") == 3
    # Another programme sees none of them.
    other = await programme()
    assert "No payment." in await page(browser, f"/portal/programmes/{other.id}/payments")


async def test_a_card_purchase_beyond_32_bits_is_listed_and_filtered(
    browser,  # noqa: F811
    client,
    programme,
    container,
):
    p = await programme()
    ident, _ = await customer(client, p, sms=False)
    card = await create(client, ident)
    big = 3_000_000_000  # 30,000,000.00 EUR: more than a 32-bit integer holds
    await fund(container, p.id, card["id"], big + 1_000)
    await simulate(client, p.api_key, f"{card['id']}/purchase", buy(big))
    base = f"/portal/programmes/{p.id}/payments"
    rows = rows_of(await page(browser, f"{base}?min=29,999,999.99&max=30000000"))
    assert len(rows) == 2 and all("30,000,000.00 EUR" in row for row in rows), rows
    assert "No payment matches." in await page(browser, f"{base}?min=30000000.01")


async def test_a_card_page_shows_its_statement_its_money_and_a_test_purchase(
    browser,  # noqa: F811
    client,
    programme,
    container,
):
    p = await programme()
    w = await card_world(client, p, container)
    base = f"/portal/programmes/{p.id}"
    url = f"{base}/cards/{w['card']['id']}"
    shown = await page(browser, url)
    statement = re.search(r'<section id="card-statement">(.*?)</section>', shown, re.S)
    assert statement
    text = html_lib.unescape(statement.group(1))
    # Funding, the purchase (authorisation and settlement) and the hold, balances after each.
    assert f'href="{base}/payments/{w["transfer"]}"' in text  # the funding links its payment
    assert "at Corner Café" in text
    assert "50.00 EUR" in text and "-12.34 EUR" in text
    # The card's balance after the purchase and the hold: 50.00 - 12.34 - fees - 5.00 held.
    r = await client.get(f"/multi/managed_cards/{w['card']['id']}", headers=w["ident"].headers)
    balances = r.json()["balances"]
    assert portal_amount(balances["availableBalance"], "EUR") in text
    assert portal_amount(balances["actualBalance"], "EUR") in text
    # The owner by name; what becomes of the money said.
    assert re.search(rf'<a id="card-owner"[^>]*>{re.escape(w["company"])}</a>', shown)
    assert "money stays on it" in shown or "balance stays on it" in shown

    # The test purchase: the simulator's purchase, typed in major units.
    said = await submitted(browser, f"{url}/purchase", url, merchant="Book shop", amount="3.21")
    assert said.startswith("Purchase at Book shop of 3.21 EUR settled."), said
    after = await client.get(f"/multi/managed_cards/{w['card']['id']}", headers=w["ident"].headers)
    fee = DEFAULT_CARD_FEES["purchase"]["EUR"]
    assert after.json()["balances"]["actualBalance"] == balances["actualBalance"] - 321 - fee
    assert "at Book shop" in await page(browser, url)
    # A refusal (more than the card holds) moves nothing and says why.
    refused = await landed(
        browser, await submit(browser, f"{url}/purchase", url, merchant="Car", amount="9,999")
    )
    assert "DENIED_NOT_ENOUGH_FUNDS" in flash_of(refused)
    again = await client.get(f"/multi/managed_cards/{w['card']['id']}", headers=w["ident"].headers)
    assert again.json()["balances"] == after.json()["balances"]
    # Another programme's card page and purchase are not found.
    other = await programme()
    r = await submit(
        browser,
        f"/portal/programmes/{other.id}/cards/{w['card']['id']}/purchase",
        f"/portal/programmes/{other.id}",
        amount="1.00",
    )
    assert r.status_code == 404
    unchanged = await client.get(
        f"/multi/managed_cards/{w['card']['id']}", headers=w["ident"].headers
    )
    assert unchanged.json()["balances"] == after.json()["balances"]


async def test_a_destroyed_cards_page_says_where_its_money_is(
    browser,  # noqa: F811
    client,
    programme,
    container,
):
    p = await programme()
    ident, _ = await customer(client, p, sms=False)
    card = await create(client, ident)
    await fund(container, p.id, card["id"], 700)
    async with container.db.transaction() as session:
        stored = await session.get(ManagedCard, int(card["id"]))
        assert stored is not None
        stored.state, stored.destroyed_reason = "DESTROYED", "EXPIRED"
    url = f"/portal/programmes/{p.id}/cards/{card['id']}"
    shown = html_lib.unescape(await page(browser, url))
    money = re.search(r'<p id="card-money">(.*?)</p>', shown, re.S)
    assert money and "Destroyed (EXPIRED)" in money.group(1), money
    assert "7.00 EUR, stays on the card" in money.group(1)
    assert 'id="test-purchase"' not in shown  # no purchase form for a card that cannot pay


async def test_cards_are_found_by_last_four_card_name_and_owner_name(
    browser,  # noqa: F811
    client,
    programme,
):
    p = await programme()
    ada = await verified(client, p)
    bob = await verified(client, p, "consumers")
    travel = await create(client, ada, friendlyName="Travel card")
    fuel = await create(client, ada, friendlyName="Fuel")
    bobs = await create(client, bob, friendlyName="Groceries")
    base = f"/portal/programmes/{p.id}/cards"
    ada_name = (await client.get("/multi/corporates", headers=ada.headers)).json()["company"][
        "name"
    ]
    bob_root = (await client.get("/multi/consumers", headers=bob.headers)).json()["rootUser"]

    async def found(q: str) -> set[str]:
        html = await page(browser, f"{base}?{urlencode({'q': q})}")
        return set(re.findall(r'<tr data-card="([0-9]+)">', html))

    assert await found("travel") == {travel["id"]}  # the card's name, any case
    assert await found(ada_name.upper()) == {travel["id"], fuel["id"]}  # the owner's name
    assert await found(bob_root["surname"]) == {bobs["id"]}
    four = bobs["cardNumberLastFour"]
    assert bobs["id"] in await found(four)
    assert bobs["id"] in await found(f"•{four}")
    by_four = await found(four)
    assert by_four == {c["id"] for c in (travel, fuel, bobs) if c["cardNumberLastFour"] == four}
    assert await found("nobody-has-this") == set()
    assert "No card matches “nobody-has-this”." in html_lib.unescape(
        await page(browser, f"{base}?q=nobody-has-this")
    )
    # Owners by name in the list.
    listed = await page(browser, base)
    assert html_lib.escape(ada_name) in listed and f"corporate {ada.id}" not in listed


async def test_owners_accounts_and_cards_are_named_not_numbered(
    browser,  # noqa: F811
    client,
    programme,
    container,
):
    p = await programme()
    w = await card_world(client, p, container)
    base = f"/portal/programmes/{p.id}"
    account = await page(browser, f"{base}/accounts/{w['acc']}")
    assert re.search(rf'<a id="account-owner"[^>]*>{re.escape(w["company"])}</a>', account)
    assert f"corporate {w['ident'].id}</a>" not in account
    # The statement's transfer row links to its payment.
    assert f'href="{base}/payments/{w["transfer"]}"' in account
    # The transfer to the card names the card, not "managed account EUR".
    detail = await page(browser, f"{base}/payments/{w['transfer']}")
    assert "Travel card (card)" in detail and "managed account EUR" not in detail
    assert "Transfer to Travel card" in account  # the statement's description names it
    # The ledger names the customers' accounts and cards, each linked to its page.
    ledger = await page(browser, f"{base}/ledger")
    assert f'<a href="{base}/cards/{w["card"]["id"]}">Travel card (card)</a>' in ledger
    assert f'<a href="{base}/accounts/{w["acc"]}">' in ledger


async def test_approve_is_offered_only_when_it_changes_something(
    browser,  # noqa: F811
    client,
    programme,
):
    p = await programme()
    ident = await sign_up(client, p, "corporates")
    url = f"/portal/programmes/{p.id}/customers/{ident.id}"
    shown = await page(browser, url)
    assert f'action="{url}/verify"' in shown and 'id="dd-done"' not in shown
    assert await submitted(browser, f"{url}/verify", url) == "Approved."
    done = await page(browser, url)
    assert f'action="{url}/verify"' not in done and 'id="dd-done"' in done
    assert f'href="{url}/reject"' in done  # rejecting still changes something
    # A stale page's Approve is said, not done again (no second webhook event).
    refused = await landed(browser, await submit(browser, f"{url}/verify", url))
    assert "approved already: nothing changed" in flash_of(refused)


async def test_an_empty_table_says_so_once(
    browser,  # noqa: F811
    client,
    programme,
):
    p = await programme()
    ident = await verified(client, p)
    base = f"/portal/programmes/{p.id}"
    for url, empty in (
        (f"{base}/customers/{ident.id}", "None."),
        (f"{base}/payments", "No payment."),
        (f"{base}/cards", "No card."),
        (f"{base}/webhooks", "No delivery."),
    ):
        html = await page(browser, url)
        assert html.count(empty) == 1, (url, empty)
        assert "No row" not in html, url  # the pager does not say it again
