"""The operator web portal in a real browser (issue 14): Playwright driving Debian's Chromium
(`/usr/bin/chromium`, installed by scripts/browser.sh) against a real `multibank serve`.

One operator's journey: sign in, create a programme and an API key, find a customer, approve its
KYC, deposit, open its statement, read the sandbox inbox, revoke a key (after the confirmation
page), sign out; then every page refuses the signed-out visitor, and a form posted without its
CSRF token is refused. Every page renders under the portal's Content-Security-Policy with no
violation reported on the console, and reloading after a create repeats nothing. The test fails,
never skips, when the browser cannot start.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import httpx
from playwright.async_api import Page, async_playwright

from tests.api.test_ledger_concurrency import _env, fresh_database
from tests.api.test_payment_concurrency import _start
from tests.conftest import ADMIN_TOKEN, Prog
from tests.factories import sign_up

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
HAVE_CHROMIUM = Path(CHROMIUM).exists()


async def sign_in(page: Page, base: str) -> None:
    await page.goto(f"{base}/portal/")
    assert page.url.endswith("/portal/login")
    await page.fill("input[name=token]", ADMIN_TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base}/portal/")


async def test_an_operator_journey_in_chromium(tmp_path: Path) -> None:
    assert HAVE_CHROMIUM, f"Chromium is needed at {CHROMIUM} (scripts/browser.sh installs it)"
    async with fresh_database(tmp_path) as url:
        env = {**_env(url), "MULTIBANK_ADMIN_TOKEN": ADMIN_TOKEN}
        proc, base = await _start(env, tmp_path)
        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
                )
                try:
                    page = await browser.new_page(viewport={"width": 390, "height": 844})
                    console: list[str] = []
                    page.on("console", lambda m: console.append(m.text))
                    await journey(page, base, tmp_path)
                    violations = [m for m in console if "Content Security Policy" in m]
                    assert not violations, violations
                finally:
                    await browser.close()
        finally:
            proc.terminate()
            await proc.wait()


async def journey(page: Page, base: str, tmp_path: Path) -> None:
    await sign_in(page, base)
    # A programme, created in the portal; its API key is shown once.
    name = f"browser{os.urandom(3).hex()}"
    await page.fill("input[name=name]", name)
    await page.click("text=Create")
    await page.wait_for_selector("#new-key")
    key = (await page.text_content("#new-key")) or ""
    assert key.startswith("mb_sbx_")
    programme_url = page.url
    pid = re.search(r"/programmes/([0-9]+)", programme_url)
    if pid is None:  # created from the list: the page is the programme's, at the post's URL
        await page.click(f"text={name}")
        pid = re.search(r"/programmes/([0-9]+)", page.url)
    assert pid is not None
    home = f"{base}/portal/programmes/{pid.group(1)}"
    await page.goto(home)
    await page.fill("input[name=label]", "second key")
    await page.click("text=Create API key")
    await page.wait_for_selector("#new-key")
    second = await page.text_content("#new-key") or ""
    assert second.startswith("mb_sbx_")
    assert page.url == home  # redirected: a reload is a GET
    await page.reload()
    assert await page.query_selector("#new-key") is None  # shown once
    assert (await page.content()).count("second key") == 1  # and made once
    # Revoking asks first, on a page of its own.
    await page.click("tr:has-text('second key') >> text=Revoke")
    await page.wait_for_selector("#confirm-text")
    await page.click("button:has-text('Revoke the key')")
    await page.wait_for_selector(".flash:has-text('API key revoked.')")
    assert page.url == home

    # A customer signs up through the public API with the programme's key.
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        summary = (
            await http.get(
                f"/portal/api/programmes/{pid.group(1)}/summary",
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            )
        ).json()
        p = Prog(pid.group(1), key, summary["profiles"], summary["feeTypes"])
        # IBANs wait for the portal's button, not for the programme's delay.
        r = await http.patch(
            f"/portal/api/programmes/{pid.group(1)}/settings",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            json={"ibanAllocationDelaySeconds": 86400},
        )
        assert r.status_code == 200, r.text
        ident = await sign_up(http, p, "consumers")

    # Find it, approve its KYC, give it an account with money, read the statement.
    await page.click("text=Customers")
    await page.fill("input[name=q]", ident.email)
    await page.click("text=Find")
    await page.click(f"tr:has-text('{ident.email}') a")
    await page.click("text=Approve KYC")
    await page.wait_for_selector("#dd-status:has-text('APPROVED')")
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        r = await http.post(
            "/multi/managed_accounts",
            headers=ident.headers,
            json={
                "profileId": p.profiles["consumerManagedAccount"],
                "friendlyName": "Everyday",
                "currency": "EUR",
            },
        )
        assert r.status_code == 200, r.text
        # The owner asks for its IBAN; the portal finishes the allocation early.
        r = await http.post(f"/multi/managed_accounts/{r.json()['id']}/iban", headers=ident.headers)
        assert r.status_code == 200, r.text
    await page.reload()
    await page.click("text=Allocate IBAN")
    await page.wait_for_selector(".flash:has-text('IBAN')")
    await page.fill("input[name=amount]", "250.00")
    await page.click("button:has-text('Deposit')")
    await page.wait_for_selector(".flash:has-text('COMPLETED')")
    await page.click("text=Everyday")
    await page.wait_for_selector("td:has-text('250.00 EUR')")
    assert "DEPOSIT" in (await page.content())
    await page.screenshot(path=str(tmp_path / "statement.png"))

    # The inbox holds what the server "sent": the e-mail verification code.
    await page.click("text=Inbox")
    await page.wait_for_selector(f"td:has-text('{ident.email}')")
    assert "123456" in await page.content()

    # A form posted without its CSRF token is refused.
    refused = await page.request.post(f"{home}/clock", form={"seconds": "60"})
    assert refused.status == 403

    # Sign out: every page then sends the visitor to the sign-in page.
    await page.click("text=Sign out")
    await page.wait_for_url(re.compile(r".*/portal/login.*"))
    for url in (f"{base}/portal/", home, f"{home}/customers", f"{home}/ledger", f"{home}/inbox"):
        await page.goto(url)
        assert page.url.startswith(f"{base}/portal/login"), url
