"""The web portal's card pages (D17, D32), over HTTP as a browser uses them: the Cards page with
masked numbers and its customer filter, a card's page with its authorisations and the SYSTEM
block and unblock buttons (CSRF-checked forms, POST/redirect/GET), the card fees form of the
programme page; and the full card number on no page."""

from __future__ import annotations

import html as html_lib

from tests.api.test_managed_cards import act, create, debit_card, get
from tests.api.test_portal_cards import DEFAULT_CARD_FEES, buy, full_number, fund, simulate
from tests.api.test_portal_web import (  # noqa: F401 (the fixture)
    PORTAL_API,
    browser,
    flash_of,
    landed,
    page,
    submit,
    submitted,
)
from tests.factories import verified


async def test_the_cards_page_lists_masked_cards_and_filters_by_customer(
    browser,  # noqa: F811
    client,
    programme,
    container,
):
    p = await programme()
    ada = await verified(client, p)
    bob = await verified(client, p, "consumers")
    prepaid = await create(client, ada, friendlyName="Ada <travel>")
    debit = await debit_card(client, ada)
    bobs = await create(client, bob, friendlyName="Bob's")
    await fund(container, p.id, prepaid["id"], 1234)
    base = f"/portal/programmes/{p.id}"

    home = await page(browser, base)
    assert f'href="{base}/cards"' in home  # in the programme's navigation
    listed = await page(browser, f"{base}/cards")
    for card in (prepaid, debit, bobs):
        assert f'href="{base}/cards/{card["id"]}"' in listed
        assert f"{card['cardNumberFirstSix']}******{card['cardNumberLastFour']}" in listed
    assert "Ada &lt;travel&gt;" in listed and "Ada <travel>" not in listed  # escaped
    assert "12.34" in listed and "PREPAID_MODE" in listed and "DEBIT_MODE" in listed

    customer = await page(browser, f"{base}/customers/{ada.id}")
    assert f'href="{base}/cards?identity={ada.id}"' in customer
    mine = await page(browser, f"{base}/cards?identity={ada.id}")
    assert f"{base}/cards/{prepaid['id']}" in mine and f"{base}/cards/{debit['id']}" in mine
    assert f"{base}/cards/{bobs['id']}" not in mine
    none = await page(browser, f"{base}/cards?identity=nobody")
    assert "No card of this customer." in none

    numbers = [await full_number(container, c["id"]) for c in (prepaid, debit, bobs)]
    pages = [listed, mine]
    pages += [await page(browser, f"{base}/cards/{c['id']}") for c in (prepaid, debit, bobs)]
    for text in pages:
        for number in numbers:
            assert number not in text


async def test_a_card_page_shows_its_authorisations(
    browser,  # noqa: F811
    client,
    programme,
    container,
):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    await fund(container, p.id, card["id"], 1000)
    auth = await simulate(
        client, p.api_key, f"{card['id']}/authorise", buy(250, merchantName="<b>Bar</b>")
    )
    base = f"/portal/programmes/{p.id}"
    shown = await page(browser, f"{base}/cards/{card['id']}")
    assert auth["authorisationId"] in shown and "PENDING" in shown and "SALE_PURCHASE" in shown
    assert html_lib.escape("<b>Bar</b>") in shown and "<b>Bar</b>" not in shown
    assert "-2.50" in shown
    other = await programme()
    r = await browser.get(f"/portal/programmes/{other.id}/cards/{card['id']}")
    assert r.status_code == 404


async def test_system_block_and_unblock_buttons(
    browser,  # noqa: F811
    client,
    programme,
):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    url = f"/portal/programmes/{p.id}/cards/{card['id']}"
    before = await page(browser, url)
    assert f'action="{url}/block"' in before and f'action="{url}/unblock"' not in before

    said = await submitted(browser, f"{url}/block", url)
    assert said == "Card blocked (SYSTEM): its users cannot unblock it."
    assert (await get(client, ident, card["id"]))["state"] == {
        "state": "BLOCKED",
        "blockedReason": "SYSTEM",
    }
    r = await act(client, ident, card["id"], "unblock")
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_INACTIVE"
    blocked = await page(browser, url)
    assert "BLOCKED (SYSTEM)" in blocked and f'action="{url}/unblock"' in blocked

    # A second block (a stale page) is refused and said on the card's page.
    refused = await landed(browser, await submit(browser, f"{url}/block", url))
    assert 'class="flash error"' in refused
    assert "INSTRUMENT_ALREADY_BLOCKED" in flash_of(refused)

    assert await submitted(browser, f"{url}/unblock", url) == "Card unblocked."
    assert (await get(client, ident, card["id"]))["state"] == {"state": "ACTIVE"}

    # Without its CSRF token the form changes nothing.
    for fields in ({}, {"csrf": "wrong"}):
        r = await browser.post(f"{url}/block", data=fields)
        assert r.status_code == 403
    assert (await get(client, ident, card["id"]))["state"] == {"state": "ACTIVE"}
    r = await submit(browser, f"{url}/destroy", url)
    assert r.status_code == 404


async def test_the_card_pages_refuse_a_visitor_without_a_session(client, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    client.cookies.clear()
    base = f"/portal/programmes/{p.id}"
    for url in (f"{base}/cards", f"{base}/cards/{card['id']}"):
        r = await client.get(url)
        assert (r.status_code, r.headers.get("location")) == (303, "/portal/login"), url
    for url in (f"{base}/cards/{card['id']}/block", f"{base}/card_fee"):
        r = await client.post(url, data={"csrf": "x"})
        assert (r.status_code, r.headers.get("location")) == (303, "/portal/login"), url
    assert (await get(client, ident, card["id"]))["state"] == {"state": "ACTIVE"}


async def test_card_fees_form_on_the_programme_page(
    browser,  # noqa: F811
    client,
    programme,
    admin_headers,
):
    p = await programme()
    home = f"/portal/programmes/{p.id}"
    shown = await page(browser, home)
    assert f'action="{home}/card_fee"' in shown and "corporatePrepaidManagedCard" in shown
    said = await submitted(
        browser, f"{home}/card_fee", home, kind="atmWithdrawal", currency="GBP", amount="2.00"
    )
    assert said == "Card fee set."
    r = await client.get(f"{PORTAL_API}/{p.id}/card_fees", headers=admin_headers)
    assert r.json()["atmWithdrawal"] == {"EUR": 0, "GBP": 200, "USD": 0}
    assert "2.00 GBP" in await page(browser, home)  # typed as it is written: 200 minor units
    for fields, says in (
        ({"kind": "purchase", "currency": "CHF", "amount": "5"}, "CURRENCY_NOT_SUPPORTED"),
        ({"kind": "cashback", "currency": "EUR", "amount": "5"}, "cashback"),
        ({"kind": "purchase", "currency": "EUR", "amount": "-5"}, "purchase.EUR"),
        ({"kind": "purchase", "currency": "EUR", "amount": "ten"}, "written in EUR"),
        ({"kind": "purchase", "currency": "EUR", "amount": "0.105"}, "more decimals than EUR"),
    ):
        refused = await landed(browser, await submit(browser, f"{home}/card_fee", home, **fields))
        assert 'class="flash error"' in refused, fields
        assert says in html_lib.unescape(flash_of(refused)), (fields, flash_of(refused))
    r = await client.get(f"{PORTAL_API}/{p.id}/card_fees", headers=admin_headers)
    assert r.json() == {**DEFAULT_CARD_FEES, "atmWithdrawal": {"EUR": 0, "GBP": 200, "USD": 0}}
