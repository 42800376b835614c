"""The portal at a glance in Chromium (issue 41 §3, decisions 0070 and 0071): on a laptop no id,
amount, state or date breaks over two lines and the tables fit the window; on a phone the
tables fold into stacked rows and the charts' text stays at least 12 px; each chart bar says its
value on hover and on focus; a money field says its minor-unit value as it is typed.

One server, one Chromium and one set of data for the module (portal_browser_support); each test
opens one signed-in page and goes through the pages on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page

from tests.api.portal_browser_support import (
    LAPTOP,
    PHONE,
    chromium,
    no_sideways_scroll,
    portal_server,
    signed_in_page,
)
from tests.api.test_portal_glance import card_world
from tests.conftest import ADMIN_TOKEN, Prog

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

# Each element's text on one line: the tops of its text's line boxes, once each.
LINES = """els => els.map(el => {
  const range = document.createRange();
  range.selectNodeContents(el);
  const tops = new Set();
  for (const r of range.getClientRects()) if (r.width > 0) tops.add(Math.round(r.top));
  return {text: el.innerText.trim(), lines: tops.size};
})"""
# The font size, in px, that each element's text is drawn at.
FONT_SIZES = """els => els.map(el => ({
  text: el.textContent.trim(), px: parseFloat(getComputedStyle(el).fontSize)
}))"""


@dataclass
class World:
    base: str
    browser: Browser
    home: str
    identity: str
    account: str
    card: str


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    tmp: Path = tmp_path_factory.mktemp("glance")
    async with portal_server(tmp) as base, chromium() as browser:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            r = await http.post(
                "/portal/api/programmes", headers=ADMIN, json={"name": "glance-programme"}
            )
            assert r.status_code == 201, r.text
            d: dict[str, Any] = r.json()
            p = Prog(d["programmeId"], d["apiKey"], d["profiles"], d["feeTypes"])
            w = await card_world(http, p, None)
        yield World(
            base,
            browser,
            f"{base}/portal/programmes/{p.id}",
            w["ident"].id,
            w["acc"],
            w["card"]["id"],
        )


async def one_line_each(page: Page, selector: str) -> None:
    """Every element `selector` finds (at least one) holds its text on one line."""
    found: list[dict[str, Any]] = await page.locator(selector).evaluate_all(LINES)
    assert found, f"nothing matches {selector} on {page.url}"
    broken = [f for f in found if f["text"] and f["lines"] > 1]
    assert not broken, f"wrapped on {page.url}: {broken}"


async def fits(page: Page) -> None:
    """Neither the page nor any of its sections scrolls sideways."""
    await no_sideways_scroll(page)
    wide = await page.locator("section").evaluate_all(
        "els => els.filter(s => s.scrollWidth > s.clientWidth + 1).map(s => s.id || s.className)"
    )
    assert not wide, f"a section scrolls sideways on {page.url}: {wide}"


# Cells whose text must never wrap on a laptop: ids, amounts, states, dates.
UNBROKEN = "td code, td.num, td.state, td.when"


async def test_on_a_laptop_no_id_amount_state_or_date_wraps(world: World) -> None:
    home = world.home
    async with signed_in_page(world.browser, world.base, LAPTOP) as page:
        for path in (
            "payments",
            f"customers/{world.identity}",
            f"accounts/{world.account}",
            f"cards/{world.card}",
            "cards",
            "overview",
        ):
            await page.goto(f"{home}/{path}")
            await one_line_each(page, UNBROKEN)
            await fits(page)
        # The content column uses the window's width, not a narrow centred column.
        await page.goto(f"{home}/payments")
        width = await page.locator("main").evaluate("el => el.getBoundingClientRect().width")
        assert width >= LAPTOP["width"] - 40, width


async def test_on_a_phone_tables_stack_and_chart_text_stays_readable(world: World) -> None:
    home = world.home
    async with signed_in_page(world.browser, world.base, PHONE) as page:
        await page.goto(f"{home}/overview")
        texts = ".chart-figure figcaption, .y-axis span, .x-axis span, .count-label, .count-value"
        sizes: list[dict[str, Any]] = await page.locator(texts).evaluate_all(FONT_SIZES)
        shown = [s for s in sizes if s["text"]]
        assert len(shown) >= 8, sizes  # caption, axis values, dates, state names and counts
        small = [s for s in shown if s["px"] < 12]
        assert not small, small
        # A value axis: its top value is an amount, its bottom 0.
        axis = await page.locator(".y-axis span").all_inner_texts()
        assert axis[-1] == "0.00" and axis[0] not in ("", "0.00"), axis
        # The period the chart covers is said.
        caption = await page.locator(".chart-figure[data-chart=EUR] figcaption").inner_text()
        assert " to " in caption and "(UTC)" in caption, caption
        await no_sideways_scroll(page)

        for path in ("payments", f"cards/{world.card}"):
            await page.goto(f"{home}/{path}")
            assert not await page.locator("table.rows thead").first.is_visible()
            display = await page.locator("table.rows tbody td").first.evaluate(
                "el => getComputedStyle(el).display"
            )
            assert display == "block"
            await no_sideways_scroll(page)


async def test_a_bar_says_its_value_on_hover_and_on_focus(world: World) -> None:
    async with signed_in_page(world.browser, world.base, LAPTOP) as page:
        await page.goto(f"{world.home}/overview")
        figure = page.locator(".chart-figure[data-chart=EUR]")
        line = figure.locator(".chart-value")
        bars = figure.locator("rect.bar")
        first, last = bars.first, bars.last
        await first.hover()
        said = await first.get_attribute("data-value")
        assert said and "EUR" in said
        assert await line.inner_text() == said
        await last.focus()  # a keyboard user tabs to a bar
        assert await line.inner_text() == await last.get_attribute("data-value")
        count_bar = page.locator("svg.counts rect.bar").first
        await count_bar.focus()
        counted = await page.locator(".counts-figure .chart-value").inner_text()
        assert counted == await count_bar.get_attribute("data-value")


async def test_a_money_field_says_its_minor_units_as_it_is_typed(world: World) -> None:
    async with signed_in_page(world.browser, world.base, PHONE) as page:
        await page.goto(f"{world.home}/customers/{world.identity}")
        form = page.locator(f"tr[data-account='{world.account}'] form.row")
        field = form.locator("input[name=amount]")
        assert await field.input_value() == "100.00"
        minor = form.locator("small.minor")
        assert await minor.inner_text() == "= 10,000 minor units of EUR"
        await field.fill("1,234.5")
        assert await minor.inner_text() == "= 123,450 minor units of EUR"
        await field.fill("1.005")
        assert "2 decimals" in await minor.inner_text()
        # A fee whose currency is chosen in the form follows that currency.
        await page.goto(world.home)
        fee = page.locator("form[action$='/movement_fee']")
        await fee.locator("input[name=currency]").fill("JPY")
        await fee.locator("input[name=amount]").fill("1250")
        assert await fee.locator("small.minor").inner_text() == "= 1,250 minor units of JPY"
