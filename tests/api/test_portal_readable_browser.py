"""The operator portal readable at a laptop's and a phone's width, in Chromium (issue 35 §5,
decision 0058): the overview, a webhook delivery's detail (its state and the Redeliver button),
the customers list, a customer and an account fold their tables into stacked rows on a phone, so
amounts, states and buttons are seen without scrolling sideways; a copy button puts the exact
value on the clipboard through the portal's own script, with no Content-Security-Policy
violation (checked by `signed_in_page` on every page).

One server and one Chromium for the module (portal_browser_support)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser

from tests.api.payments_support import customer
from tests.api.portal_browser_support import (
    LAPTOP,
    PHONE,
    chromium,
    portal_server,
    seen_without_sideways_scroll,
    signed_in_page,
)
from tests.conftest import ADMIN_TOKEN, Prog

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
FUNDS = 98_765_432_101  # 987,654,321.01 EUR: the longest amount a row has to hold


@dataclass
class World:
    base: str
    browser: Browser
    home: str  # the programme's portal address, under base
    identity: str
    account: str
    iban: str
    delivery: str


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    tmp: Path = tmp_path_factory.mktemp("readable")
    async with portal_server(tmp) as base, chromium() as browser:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            r = await http.post(
                "/portal/api/programmes", headers=ADMIN, json={"name": "readable-programme"}
            )
            assert r.status_code == 201, r.text
            d: dict[str, Any] = r.json()
            pid = d["programmeId"]
            p = Prog(pid, d["apiKey"], d["profiles"], d["feeTypes"])
            # Events go to an address nobody answers: each is a delivery the portal shows.
            r = await http.patch(
                f"/portal/api/programmes/{pid}/settings",
                headers=ADMIN,
                json={"webhookUrl": "http://127.0.0.1:9/hooks"},
            )
            assert r.status_code == 200, r.text
            ident, acc = await customer(http, p, funds=FUNDS, sms=False)
            r = await http.get(f"/multi/managed_accounts/{acc}/iban", headers=ident.headers)
            iban = r.json()["bankAccountDetails"][0]["details"]["iban"]
            r = await http.get(f"/portal/api/programmes/{pid}/webhooks/deliveries", headers=ADMIN)
            deliveries = r.json()["deliveries"]
            assert deliveries, r.text
        yield World(
            base,
            browser,
            f"{base}/portal/programmes/{pid}",
            ident.id,
            acc,
            iban,
            deliveries[0]["id"],
        )


@pytest.mark.parametrize("width", ["laptop", "phone"])
async def test_pages_read_without_sideways_scroll(world: World, width: str) -> None:
    viewport = LAPTOP if width == "laptop" else PHONE
    home = world.home
    async with signed_in_page(world.browser, world.base, viewport) as page:
        await page.goto(f"{home}/overview")
        await seen_without_sideways_scroll(
            page,
            "[data-balance^='accounts-'] td[data-label='Available']",
            "[data-count='customers']",
        )
        assert "987,654,321.01 EUR" in (
            await page.locator("[data-balance^='accounts-']").inner_text()
        )

        await page.goto(f"{home}/webhooks/{world.delivery}")
        await seen_without_sideways_scroll(
            page, ".delivery-state", "button:has-text('Redeliver')", ".copyable button.copy"
        )

        await page.goto(f"{home}/customers")
        row = f"tr[data-customer='{world.identity}']"
        await seen_without_sideways_scroll(
            page,
            f"{row} td[data-label='Name'] a",
            f"{row} td[data-label='Due diligence']",
            f"{row} td[data-label='Created']",
        )

        await page.goto(f"{home}/customers/{world.identity}")
        row = f"tr[data-account='{world.account}']"
        await seen_without_sideways_scroll(
            page,
            f"{row} td[data-label='Available']",
            f"{row} td[data-label='IBAN'] button.copy",
            f"{row} button:has-text('Deposit')",
        )

        await page.goto(f"{home}/accounts/{world.account}")
        await seen_without_sideways_scroll(
            page,
            "td[data-label='Amount']",
            "td[data-label='Balance after']",
            "#iban button.copy",
            "#statement-range button",
        )
        if width == "phone":  # stacked: each cell says what it is, the header row is hidden
            assert not await page.locator("thead").first.is_visible()
            label = await page.locator("td[data-label='Amount']").first.evaluate(
                "el => getComputedStyle(el, '::before').content"
            )
            assert label == '"Amount: "'

        await page.goto(home)
        await seen_without_sideways_scroll(
            page,
            "#settings-form button[type=submit]",
            "#settings-form small.help",
            "#profiles td[data-label='Fee per payment']",
            "#api-keys a:has-text('Revoke')",
        )
        # The other pages of the programme fold their tables too.
        for path, cell in (
            ("ledger", "td[data-label='Postings'] .amount"),
            ("webhooks", "td[data-label='State']"),
            ("inbox", "td[data-label='To']"),
        ):
            await page.goto(f"{home}/{path}")
            await seen_without_sideways_scroll(page, cell)


async def test_a_copy_button_puts_the_exact_value_on_the_clipboard(world: World) -> None:
    async with signed_in_page(world.browser, world.base, PHONE) as page:
        await page.context.grant_permissions(
            ["clipboard-read", "clipboard-write"], origin=world.base
        )
        await page.goto(f"{world.home}/accounts/{world.account}")
        button = page.locator("#iban button.copy")
        assert await button.is_visible()  # shown once the portal's script runs
        await button.click()
        await page.wait_for_function(
            "b => b.textContent === 'Copied'", arg=await button.element_handle()
        )
        assert await page.evaluate("navigator.clipboard.readText()") == world.iban

        await page.goto(f"{world.home}/customers/{world.identity}")
        await page.locator(
            f"tr[data-account='{world.account}'] td[data-label='Account'] button.copy"
        ).click()
        assert await page.evaluate("navigator.clipboard.readText()") == world.account
