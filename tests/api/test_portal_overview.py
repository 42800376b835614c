"""A programme's overview page in the portal (issue 35, decision 0054): after a known journey
(two customers sign up, money comes in through the simulator, a transfer, a fee, a wire transfer
left waiting) it shows the counts, the balances per currency, the money that moved today and the
wire transfer waiting for the operator, with thousands separators, as inline SVG under the
portal's Content-Security-Policy; and it is where choosing a programme leads."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import async_playwright

from tests.api.payments_support import advance, balances, customer, settings
from tests.api.test_ledger_concurrency import _env, fresh_database
from tests.api.test_managed_cards import create as create_card
from tests.api.test_managed_cards import debit_card
from tests.api.test_outgoing_wire_transfers import body as owt_body
from tests.api.test_payment_concurrency import _start
from tests.api.test_portal_browser import CHROMIUM, HAVE_CHROMIUM, sign_in
from tests.api.test_portal_web import PORTAL_API, browser, page
from tests.conftest import ADMIN_TOKEN, Prog
from tests.factories import deposit, open_account, verified

__all__ = ["browser"]  # the signed-in portal client fixture, shared with test_portal_web

DEPOSIT = 12_345_678  # 123,456.78 EUR
MOVED = 5_000
WIRED = 2_500


def money(minor: int) -> str:
    return f"{minor // 100:,}.{minor % 100:02d} EUR"


def minor(shown: str) -> int:
    """`123,456.78 EUR` as minor units."""
    number, currency = shown.split(" ")
    assert currency == "EUR" and re.fullmatch(r"[0-9]{1,3}(,[0-9]{3})*\.[0-9]{2}", number), shown
    return int(number.replace(",", "").replace(".", ""))


def row(html: str, attribute: str) -> str:
    found = re.search(rf"<tr data-{attribute}[^>]*>(.*?)</tr>", html, re.S)
    assert found, f"no row {attribute} on the page"
    return found.group(1)


def count(html: str, name: str) -> int:
    found = re.search(rf'data-count="{name}">([0-9,]+)<', html)
    assert found, f"no count {name} on the page"
    return int(found.group(1).replace(",", ""))


async def journey(client: httpx.AsyncClient, admin_headers: dict[str, str], p: Prog) -> Any:
    """Two customers; the corporate's money in, a transfer between its accounts, a fee and a
    wire transfer submitted to the scheme (waiting). Answers what the API says afterwards."""
    await settings(client, admin_headers, p, owtScaRequired=False)
    ident, acc = await customer(client, p, funds=DEPOSIT, sms=False)
    await verified(client, p, "consumers")
    second = (await open_account(client, ident, "EUR"))["id"]
    r = await client.post(
        "/multi/transfers",
        headers=ident.headers,
        json={
            "profileId": p.profiles["transfers"],
            "source": {"type": "managed_accounts", "id": acc},
            "destination": {"type": "managed_accounts", "id": second},
            "destinationAmount": {"currency": "EUR", "amount": MOVED},
        },
    )
    assert r.status_code == 200 and r.json()["state"] == "COMPLETED", r.text
    r = await client.post(
        "/multi/corporates/fees/charge",
        headers=ident.headers,
        json={"feeType": "ADMIN_FEE", "source": {"type": "managed_accounts", "id": acc}},
    )
    assert r.status_code == 200, r.text
    r = await client.post(
        "/multi/outgoing_wire_transfers", headers=ident.headers, json=owt_body(p, acc, amount=WIRED)
    )
    assert r.status_code == 200 and r.json()["state"] == "SUBMITTED", r.text
    return ident, acc, second, r.json()["id"]


async def test_the_overview_after_a_known_journey(client, browser, programme, admin_headers):
    p = await programme()
    ident, acc, second, wire = await journey(client, admin_headers, p)
    home = f"/portal/programmes/{p.id}"
    # Choosing the programme in the list leads to its overview; the navigation names it.
    listing = await page(browser, "/portal/")
    assert f'href="{home}/overview"' in listing
    html = await page(browser, f"{home}/overview")
    assert f'<a href="{home}/overview">Overview</a>' in html

    assert count(html, "customers-CORPORATE") == 1
    assert count(html, "customers-CONSUMER") == 1
    assert count(html, "customers") == 2
    assert count(html, "accounts-ACTIVE") == 2 and count(html, "accounts") == 2
    assert count(html, "cards") == 0
    assert count(html, "payments-COMPLETED") == 1
    assert count(html, "payments-SUBMITTED") == 1
    assert count(html, "payments") == 2

    # Balances: the customers' money as the API reports it, the rest of the deposit is revenue.
    available, actual = (0, 0)
    for account in (acc, second):
        a, b = await balances(client, ident, account)
        available, actual = available + a, actual + b
    fees = DEPOSIT - actual
    assert fees > 0 and actual - available >= WIRED  # the wire transfer (and its fee) held
    held = row(html, 'balance="accounts-EUR"')
    assert money(available) in held and money(actual) in held
    assert money(fees) in row(html, 'balance="revenue-EUR"')
    assert 'data-balance="cards-' not in html

    # Money moved today (two days if the journey crossed midnight): in = the deposit and the
    # transfer's credit; out = its debit and the fees.
    days = re.findall(r'<tr data-day="EUR-[0-9]+">(.*?)</tr>', html, re.S)
    assert 1 <= len(days) <= 2
    moved = [re.findall(r'<td class="num"[^>]*>([^<]*)</td>', d) for d in days]
    assert sum(minor(m[0]) for m in moved) == DEPOSIT + MOVED
    assert sum(minor(m[1]) for m in moved) == MOVED + fees
    if len(days) == 1:
        assert "123,506.78 EUR" in days[0]  # thousands separated
    chart = re.search(r'<svg class="chart"[^>]*data-currency="EUR">(.*?)</svg>', html, re.S)
    assert chart and chart.group(1).count('<rect class="bar in"') == len(days)
    # No inline script: the one script is the portal's own file (decision 0058).
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/portal/static/portal.js" defer>']

    # The wire transfer waits for the operator, with a link and the sandbox's actions.
    waiting = row(html, f'waiting="{wire}"')
    assert money(WIRED) in waiting
    assert f'href="{home}/accounts/{acc}"' in waiting
    assert f'href="{home}/wire/{wire}/reject"' in waiting
    assert f'action="{home}/wire/{wire}/accept"' in waiting
    assert "Waiting for action (1)" in html


async def test_days_follow_the_programme_clock_and_keep_thirty(client, browser, programme):
    """Money on two days of the programme's clock shows as two days; 31 days later neither is
    within the last 30 days, while the balances stay."""
    p = await programme()
    _, acc = await customer(client, p, funds=DEPOSIT, sms=False)
    await advance(client, p, 86_400)
    assert await deposit(client, p, acc, 1_000) == "COMPLETED"
    url = f"/portal/programmes/{p.id}/overview"
    html = await page(browser, url)
    days = re.findall(r'<tr data-day="EUR-([0-9]+)">(.*?)</tr>', html, re.S)
    assert len(days) == 2 and int(days[1][0]) - int(days[0][0]) == 1
    assert money(DEPOSIT) in days[0][1] and money(1_000) in days[1][1]
    chart = re.search(r'<svg class="chart"[^>]*data-currency="EUR">(.*?)</svg>', html, re.S)
    assert chart and chart.group(1).count('<rect class="bar in"') == 2
    await advance(client, p, 31 * 86_400)
    html = await page(browser, url)
    assert "No money moved in the last 30 days." in html and "data-day=" not in html
    assert money(DEPOSIT + 1_000) in row(html, 'balance="accounts-EUR"')


async def test_cards_are_counted_and_a_prepaid_cards_money_is_shown(client, browser, programme):
    p = await programme()
    ident, acc = await customer(client, p, funds=DEPOSIT, sms=False)
    card = await create_card(client, ident, currency="EUR")
    await debit_card(client, ident)
    r = await client.post(
        "/multi/transfers",
        headers=ident.headers,
        json={
            "profileId": p.profiles["transfers"],
            "source": {"type": "managed_accounts", "id": acc},
            "destination": {"type": "managed_cards", "id": card["id"]},
            "destinationAmount": {"currency": "EUR", "amount": MOVED},
        },
    )
    assert r.status_code == 200 and r.json()["state"] == "COMPLETED", r.text
    html = await page(browser, f"/portal/programmes/{p.id}/overview")
    assert count(html, "cards") == 2
    assert count(html, "cards-PREPAID_MODE") == 1 and count(html, "cards-DEBIT_MODE") == 1
    assert money(MOVED) in row(html, 'balance="cards-EUR"')


async def test_an_empty_programme_and_an_unknown_one(browser, programme):
    p = await programme()
    html = await page(browser, f"/portal/programmes/{p.id}/overview")
    assert "No money moved in the last 30 days." in html and "Nothing waits." in html
    assert count(html, "customers") == 0 and count(html, "payments") == 0
    r = await browser.get("/portal/programmes/999999999/overview")
    assert r.status_code == 404


async def test_signed_out_the_overview_asks_to_sign_in(client, programme):
    p = await programme()
    r = await client.get(f"/portal/programmes/{p.id}/overview")
    assert r.status_code in (302, 303, 307) and r.headers["location"].endswith("/portal/login")


def said(console: list[str], message: Any) -> None:
    console.append(message.text)


async def test_the_overview_in_chromium_at_a_laptop_and_a_phone_width(tmp_path: Path) -> None:
    """The charts render (an SVG with a bar for today's money in and out) and, at a phone's
    width, nothing makes the page scroll sideways; no CSP violation on the console."""
    assert HAVE_CHROMIUM, f"Chromium is needed at {CHROMIUM} (scripts/browser.sh installs it)"
    async with fresh_database(tmp_path) as url:
        env = {**_env(url), "MULTIBANK_ADMIN_TOKEN": ADMIN_TOKEN}
        proc, base = await _start(env, tmp_path)
        try:
            admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                r = await http.post(PORTAL_API, headers=admin, json={"name": "overviewshots"})
                assert r.status_code in (200, 201), r.text
                made = r.json()
                pid = made["programmeId"]
                p = Prog(pid, made["apiKey"], made["profiles"], made["feeTypes"])
                await journey(http, admin, p)
            async with async_playwright() as pw:
                chromium = await pw.chromium.launch(
                    executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
                )
                try:
                    for width, height in ((1366, 900), (390, 844)):
                        view = await chromium.new_page(viewport={"width": width, "height": height})
                        console: list[str] = []
                        view.on("console", partial(said, console))
                        await sign_in(view, base)
                        await view.click(f"a[href='/portal/programmes/{pid}/overview']")
                        await view.wait_for_url(f"{base}/portal/programmes/{pid}/overview")
                        chart = view.locator("svg.chart[data-currency=EUR]")
                        await chart.wait_for()
                        box = await chart.bounding_box()
                        assert box and box["width"] > 200 and box["height"] > 50, box
                        # A bar in and out for each day with money (one, or two across midnight).
                        days = await view.locator("tr[data-day^='EUR-']").count()
                        assert 1 <= days <= 2
                        assert await chart.locator("rect.bar.in").count() == days
                        assert await chart.locator("rect.bar.out").count() >= 1
                        boxes = [await b.bounding_box() for b in await chart.locator("rect").all()]
                        assert max(b["height"] for b in boxes if b) > 10, boxes  # drawn
                        # One bar per payment state the table lists (a running server's
                        # scheduler may already have completed the wire transfer).
                        states = await view.locator("#payments-by-state tbody tr").count()
                        assert states >= 1
                        assert await view.locator("svg.counts rect.bar").count() == states
                        overflow = await view.evaluate(
                            "document.documentElement.scrollWidth - window.innerWidth"
                        )
                        assert overflow <= 0, (width, overflow)
                        await view.screenshot(
                            path=str(tmp_path / f"overview-{width}.png"), full_page=True
                        )
                        violations = [m for m in console if "Content Security Policy" in m]
                        assert not violations, violations
                        await view.close()
                finally:
                    await chromium.close()
        finally:
            proc.terminate()
            await proc.wait()
