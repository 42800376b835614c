"""A payment's page and the filtered payments list in a real browser (issue 35 §2, decision 0056):
Chromium at a laptop's and a phone's width against one real `multibank serve`. On both, the
amount, the state and the settle / reject / return buttons are on screen without scrolling
sideways, and a wire transfer is returned through its confirmation page once."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.payments_support import customer
from tests.api.portal_browser_support import (
    PHONE,
    WIDTHS,
    chromium,
    portal_server,
    seen_without_sideways_scroll,
    signed_in_page,
)
from tests.conftest import ADMIN_TOKEN, Prog

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
PORTAL = "/portal/api/programmes"
WAITS = "WV38WEAV502015555551"  # the sandbox IBAN whose wire transfer waits for the operator


async def wire(http: httpx.AsyncClient, p: Prog, ident: Any, acc: str, amount: int) -> str:
    r = await http.post(
        "/multi/outgoing_wire_transfers",
        headers=ident.headers,
        json={
            "profileId": p.profiles["outgoingWireTransfers"],
            "sourceInstrument": {"type": "managed_accounts", "id": acc},
            "transferAmount": {"currency": "EUR", "amount": amount},
            "description": "Supplier invoice 2026-114",
            "destinationBeneficiary": {
                "name": "Northwind Traders International Limited",
                "bankAccountDetails": {"iban": WAITS, "bankIdentifierCode": "COBADEFFXXX"},
            },
        },
    )
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


async def money(http: httpx.AsyncClient) -> dict[str, str]:
    """A sandbox programme whose company wired money out twice: one wire waits for the operator,
    the other completed (returned once, by the last test)."""
    r = await http.post(PORTAL, headers=ADMIN, json={"name": "payment-detail"})
    assert r.status_code in (200, 201), r.text
    d = r.json()
    p = Prog(d["programmeId"], d["apiKey"], d["profiles"], d["feeTypes"])
    r = await http.patch(f"{PORTAL}/{p.id}/settings", headers=ADMIN, json={"owtScaRequired": False})
    assert r.status_code == 200, r.text
    ident, acc = await customer(http, p, funds=987_654_321_00, sms=False)
    waiting = await wire(http, p, ident, acc, 1_234_567_89)
    done = await wire(http, p, ident, acc, 2_500_00)
    r = await http.post(
        f"/simulate/api/wiretransfers/outgoing/{done}/accept",
        headers={"programme-key": p.api_key},
    )
    assert r.status_code == 200 and r.json()["code"] == "COMPLETED", r.text
    return {"programme": p.id, "waiting": waiting, "done": done}


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    """One server and one Chromium for the module, with the data made through the HTTP API."""
    tmp: Path = tmp_path_factory.mktemp("payment-detail")
    async with portal_server(tmp) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            made = await money(http)
        async with chromium() as browser:
            yield base, browser, made


@pytest.mark.parametrize("width", list(WIDTHS))
async def test_filtered_list_and_detail_need_no_sideways_scroll(served: Any, width: str) -> None:
    base, browser, made = served
    home = f"{base}/portal/programmes/{made['programme']}"
    waiting, done = made["waiting"], made["done"]
    async with signed_in_page(browser, base, WIDTHS[width]) as page:
        await page.goto(f"{home}/payments")
        await page.select_option("select[name=kind]", "OWT")
        await page.click("button:has-text('Filter')")
        await page.wait_for_url("**/payments?*kind=OWT*")
        row = f"tr:has(a[href$='/payments/{waiting}'])"
        await seen_without_sideways_scroll(
            page,
            f"{row} td.amount",
            f"{row} td.state",
            f"{row} button:has-text('Settle')",
            f"{row} a:has-text('Reject')",
            f"tr:has(a[href$='/payments/{done}']) a:has-text('Return')",
        )
        shown = await page.text_content(f"{row} td.amount") or ""
        # (Digits only: thousands separators are the money helper's business.)
        assert re.sub(r"[^0-9]", "", shown) == "123456789" and "EUR" in shown

        await page.click(f"a[href$='/payments/{waiting}']")
        await page.wait_for_selector("#payment-state:has-text('SUBMITTED')")
        await seen_without_sideways_scroll(
            page, "dd.amount", "#payment-state", "button:has-text('Settle')", "a:has-text('Reject')"
        )
        assert "Northwind Traders International Limited" in await page.content()

        await page.goto(f"{home}/payments/{done}")
        await seen_without_sideways_scroll(
            page, "dd.amount", "#payment-state", "a:has-text('Return')"
        )


async def test_return_through_its_confirmation_page(served: Any) -> None:
    base, browser, made = served
    home = f"{base}/portal/programmes/{made['programme']}"
    async with signed_in_page(browser, base, PHONE) as page:
        await page.goto(f"{home}/payments/{made['done']}")
        await page.click("a:has-text('Return')")
        await page.wait_for_selector("#confirm-text:has-text('Return the wire transfer')")
        await seen_without_sideways_scroll(page, "button:has-text('Return the wire transfer')")
        await page.click("button:has-text('Return the wire transfer')")
        await page.wait_for_selector(".flash:has-text('Returned: the bank sent')")
        assert page.url == f"{home}/payments/{made['done']}"
        assert (await page.text_content("#payment-state") or "").strip() == "RETURNED"
        assert await page.locator("a:has-text('Return')").count() == 0
