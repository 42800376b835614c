"""What the portal's browser tests share (issue 35): a real `multibank serve` on a fresh database,
Debian's Chromium driven by Playwright, a laptop's and a phone's viewport, and the check that what
an operator needs on a row (amount, state, the action buttons) is on screen without scrolling
sideways.

The tests fail, never skip, when the browser cannot start (scripts/browser.sh installs it).
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Page, async_playwright

from tests.api.test_ledger_concurrency import _env, fresh_database
from tests.api.test_payment_concurrency import _start
from tests.conftest import ADMIN_TOKEN

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
HAVE_CHROMIUM = Path(CHROMIUM).exists()
LAPTOP = {"width": 1366, "height": 800}
PHONE = {"width": 390, "height": 844}
WIDTHS = {"laptop": LAPTOP, "phone": PHONE}


@asynccontextmanager
async def portal_server(tmp_path: Path, **extra_env: str) -> AsyncIterator[str]:
    """A `multibank serve` on a fresh migrated database; yields its base URL."""
    async with fresh_database(tmp_path) as url:
        env = {**_env(url), "MULTIBANK_ADMIN_TOKEN": ADMIN_TOKEN, **extra_env}
        proc, base = await _start(env, tmp_path)
        try:
            yield base
        finally:
            proc.terminate()
            await proc.wait()


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    assert HAVE_CHROMIUM, f"Chromium is needed at {CHROMIUM} (scripts/browser.sh)"
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            yield browser
        finally:
            await browser.close()


@asynccontextmanager
async def signed_in_page(
    browser: Browser, base: str, viewport: dict[str, int]
) -> AsyncIterator[Page]:
    """A page of a new browser context (its own cookies) signed in to the portal; on leaving,
    no Content-Security-Policy violation may have been reported on its console."""
    context = await browser.new_context(viewport=viewport)  # type: ignore[arg-type]
    try:
        page = await context.new_page()
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text))
        await page.goto(f"{base}/portal/")
        await page.fill("input[name=token]", ADMIN_TOKEN)
        await page.click("button[type=submit]")
        await page.wait_for_url(f"{base}/portal/")
        yield page
        violations = [m for m in console if "Content Security Policy" in m]
        assert not violations, violations
    finally:
        await context.close()


async def no_sideways_scroll(page: Page) -> None:
    """The page is no wider than the window: nothing is reached only by scrolling sideways."""
    widths: dict[str, Any] = await page.evaluate(
        "({doc: document.documentElement.scrollWidth, win: window.innerWidth})"
    )
    assert widths["doc"] <= widths["win"], f"{page.url} scrolls sideways: {widths}"


CLIPPED = """el => {
  const r = el.getBoundingClientRect();
  const out = [];
  if (r.left < 0 || r.right > window.innerWidth + 0.5) out.push(`window ${window.innerWidth}px`);
  for (let a = el.parentElement; a; a = a.parentElement) {
    const o = getComputedStyle(a).overflowX;
    if (o === "visible") continue;
    const b = a.getBoundingClientRect();
    if (r.left < b.left - 0.5 || r.right > b.right + 0.5) out.push(`${a.tagName} box`);
  }
  return {box: [r.left, r.right], out: out};
}"""


async def seen_without_sideways_scroll(page: Page, *selectors: str) -> None:
    """Each selector's first element is visible and lies wholly inside the window's width and
    inside every box that would clip it (a table scrolling inside its section), and the page
    itself does not scroll sideways."""
    await no_sideways_scroll(page)
    for selector in selectors:
        element = page.locator(selector).first
        assert await element.is_visible(), f"{selector} is not visible on {page.url}"
        where: dict[str, Any] = await element.evaluate(CLIPPED)
        assert not where["out"], f"{selector} needs a sideways scroll on {page.url}: {where}"
