"""The audit log in Chromium (issue 35 §4, decision 0057), at a laptop's and a phone's width:
an operator changes a setting, opens the programme's audit log, and sees the record's time, who
and what without scrolling sideways; the all-programmes log links to it. One `multibank serve`
and one Chromium for the module (tests/api/portal_browser_support.py)."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser

from tests.api.portal_browser_support import (
    WIDTHS,
    chromium,
    portal_server,
    seen_without_sideways_scroll,
    signed_in_page,
)


@pytest.fixture(scope="module")
async def base(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    async with portal_server(tmp_path_factory.mktemp("audit")) as url:
        yield url


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as b:
        yield b


FIRST = "table.rows tbody tr:first-child"


@pytest.mark.parametrize("width", sorted(WIDTHS))
async def test_an_action_is_seen_on_the_audit_page(base: str, browser: Browser, width: str) -> None:
    async with signed_in_page(browser, base, WIDTHS[width]) as page:
        name = f"audit{os.urandom(3).hex()}"
        await page.fill("input[name=name]", name)
        await page.click("text=Create")
        await page.wait_for_selector("#new-key")
        found = re.search(r"/programmes/([0-9]+)", page.url)
        assert found, page.url
        home = f"{base}/portal/programmes/{found.group(1)}"
        await page.goto(home)
        await page.fill("input[name=failedLoginLimit]", "8")
        await page.locator("form[action$='/settings'] button[type=submit]").click()
        await page.wait_for_selector(".flash")
        await page.click("text=Audit log")
        await page.wait_for_url(f"{home}/audit")
        assert (await page.text_content(f"{FIRST} td.action")) == "programme.settings"
        actor = (await page.text_content(f"{FIRST} td.actor")) or ""
        assert actor.startswith("portal session ")
        when = (await page.text_content(f"{FIRST} td.when")) or ""
        assert re.search(r"\d{4}-\d{2}-\d{2}", when), when
        changed = (await page.text_content(f"{FIRST} td[data-label=Changed]")) or ""
        assert "settings.failedLoginLimit: 5 → 8" in changed
        await seen_without_sideways_scroll(
            page, f"{FIRST} td.when", f"{FIRST} td.actor", f"{FIRST} td.action"
        )
        # Every programme's log, filtered by the action: the record, with its programme.
        await page.goto(f"{base}/portal/audit")
        await page.select_option("select[name=action]", "programme.settings")
        await page.click("form.row button[type=submit]")
        await page.wait_for_url(re.compile(r".*action=programme\.settings.*"))
        assert await page.locator(f"a[href='/portal/programmes/{found.group(1)}/audit']").count()
        await seen_without_sideways_scroll(page, f"{FIRST} td.when", f"{FIRST} td.actor")
