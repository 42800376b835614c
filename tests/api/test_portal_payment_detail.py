"""A payment's page in the operator web portal (issue 35 §2, decision 0056), over HTTP as a
browser uses it: for a transfer, a send and an outgoing wire transfer, the parties by name with
links to their customer and account pages, the state history, the ledger postings and the webhook
events; the payments list naming its parties; settle, reject and return of a sandbox wire
transfer from its page, each irreversible one after a confirmation page; a refused return that
changes nothing; another programme's payment, a visitor without a session and a post without its
CSRF token refused."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx

from tests.api.payments_support import balances, customer, settings
from tests.api.test_portal_web import browser, csrf_of, flash_of, landed, page  # noqa: F401
from tests.api.test_webhooks import hooked  # noqa: F401
from tests.factories import Identity, open_account

MA = "managed_accounts"
WAITS = "WV38WEAV502015555551"  # the sandbox IBAN whose wire transfer waits for the operator


async def wire(client: httpx.AsyncClient, p: Any, ident: Identity, acc: str, amount: int) -> str:
    r = await client.post(
        "/multi/outgoing_wire_transfers",
        headers=ident.headers,
        json={
            "profileId": p.profiles["outgoingWireTransfers"],
            "sourceInstrument": {"type": MA, "id": acc},
            "transferAmount": {"currency": "EUR", "amount": amount},
            "description": "Rent",
            "destinationBeneficiary": {
                "name": "Landlord GmbH",
                "bankAccountDetails": {"iban": WAITS, "bankIdentifierCode": "COBADEFFXXX"},
            },
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "SUBMITTED"
    return str(r.json()["id"])


async def state_of(client: httpx.AsyncClient, ident: Identity, owt_id: str) -> str:
    r = await client.get(f"/multi/outgoing_wire_transfers/{owt_id}", headers=ident.headers)
    assert r.status_code == 200, r.text
    return str(r.json()["state"])


def text(shown: str) -> str:
    """The page's words, tags removed, spaces folded."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", shown)))


def link(shown: str, href: str, words: str) -> bool:
    """Whether the page links `href` with `words` as its text."""
    pattern = rf'<a [^>]*href="{re.escape(href)}"[^>]*>\s*{re.escape(words)}\s*</a>'
    return re.search(pattern, shown) is not None


async def money_moves(client: httpx.AsyncClient, admin_headers: dict[str, str], p: Any) -> Any:
    """A company (Acme Ltd) with two accounts pays itself (a transfer), pays a person (Grace
    Hopper, a send) and wires money out (waiting for the operator)."""
    await settings(client, admin_headers, p, owtScaRequired=False, sendsScaRequired=False)
    acme, main = await customer(client, p, "corporates", funds=100_000, sms=False)
    savings = (await open_account(client, acme, "EUR", friendlyName="Savings"))["id"]
    grace, theirs = await customer(client, p, "consumers", sms=False)
    payment = {"source": {"type": MA, "id": main}, "destinationAmount": {"currency": "EUR"}}
    r = await client.post(
        "/multi/transfers",
        headers=acme.headers,
        json={
            **payment,
            "profileId": p.profiles["transfers"],
            "destination": {"type": MA, "id": savings},
            "destinationAmount": {"currency": "EUR", "amount": 1_000},
        },
    )
    assert r.status_code == 200, r.text
    transfer = r.json()["id"]
    r = await client.post(
        "/multi/sends",
        headers=acme.headers,
        json={
            **payment,
            "profileId": p.profiles["sends"],
            "destination": {"type": MA, "id": theirs},
            "destinationAmount": {"currency": "EUR", "amount": 2_000},
        },
    )
    assert r.status_code == 200, r.text
    send = r.json()["id"]
    owt = await wire(client, p, acme, main, 5_000)
    return acme, main, savings, grace, theirs, transfer, send, owt


async def test_each_kind_shows_parties_history_postings_and_events(
    browser,  # noqa: F811
    client,
    admin_headers,
    hooked,  # noqa: F811
):
    p, _ = hooked
    acme, main, savings, grace, theirs, transfer, send, owt = await money_moves(
        client, admin_headers, p
    )
    base = f"/portal/programmes/{p.id}"
    acme_page, grace_page = f"{base}/customers/{acme.id}", f"{base}/customers/{grace.id}"

    # The list: ids link to each payment's page, From and To are names linking to their pages.
    listing = await page(browser, f"{base}/payments")
    for payment_id in (transfer, send, owt):
        assert f'href="{base}/payments/{payment_id}"' in listing
    assert link(listing, f"{base}/accounts/{main}", "Main")
    assert link(listing, acme_page, "Acme Ltd")
    assert link(listing, f"{base}/accounts/{savings}", "Savings")
    assert link(listing, grace_page, "Grace Hopper")
    assert "Landlord GmbH" in listing
    assert f">{main}</a>" not in listing  # no raw account id as a party's name

    shown = await page(browser, f"{base}/payments/{transfer}")
    words = text(shown)
    assert "Transfer" in words and transfer in words and "COMPLETED" in words
    assert "10.00 EUR" in words  # the amount, with the money helper
    assert link(shown, f"{base}/accounts/{main}", "Main") and link(shown, acme_page, "Acme Ltd")
    assert link(shown, f"{base}/accounts/{savings}", "Savings")
    assert "Created" in words and "Money moved" in words and "Reported COMPLETED" in words
    assert "Balanced: the postings sum to zero." in words
    event = re.search(rf'href="{base}/webhooks/([0-9]+)"', shown)
    assert event is not None
    hook = await page(browser, f"{base}/webhooks/{event.group(1)}")
    assert "transfers.COMPLETED" in hook and transfer in hook

    shown = await page(browser, f"{base}/payments/{send}")
    words = text(shown)
    assert "Send" in words and "20.00 EUR" in words and "COMPLETED" in words
    assert link(shown, grace_page, "Grace Hopper") and link(shown, acme_page, "Acme Ltd")
    assert link(shown, f"{base}/accounts/{theirs}", "Main")
    assert "send.COMPLETED" in words and "Balanced" in words

    shown = await page(browser, f"{base}/payments/{owt}")
    words = text(shown)
    assert "Outgoing wire transfer" in words and "50.00 EUR" in words and "SUBMITTED" in words
    assert "Landlord GmbH" in words and "IBAN " + WAITS in words and "BIC COBADEFFXXX" in words
    assert link(shown, f"{base}/accounts/{main}", "Main") and link(shown, acme_page, "Acme Ltd")
    assert "Amount and fee held on the source account" in words
    assert "Reported SUBMITTED" in words and "outgoing_wire_transfers.SUBMITTED" in words
    assert "Reserved EUR" in words and "Balanced" in words
    assert f"{base}/wire/{owt}/accept?from=detail" in shown  # settle
    assert f"{base}/wire/{owt}/reject?from=detail" in html.unescape(shown)  # reject…
    assert f"/wire/{owt}/return" not in shown  # not returnable before it completed


async def test_settle_then_return_from_the_page_and_reject_after_confirming(
    browser,  # noqa: F811
    client,
    admin_headers,
    programme,
):
    p = await programme()
    await settings(client, admin_headers, p, owtScaRequired=False)
    ident, acc = await customer(client, p, funds=100_000, sms=False)
    base = f"/portal/programmes/{p.id}"
    owt = await wire(client, p, ident, acc, 5_000)
    detail = f"{base}/payments/{owt}"

    # Settle: straight from the page, back to the page.
    r = await browser.post(
        f"{base}/wire/{owt}/accept?from=detail", data={"csrf": csrf_of(await page(browser, detail))}
    )
    assert r.headers["location"] == detail
    shown = await landed(browser, r)
    assert flash_of(shown) == ("Settled: the wire transfer has left the account.")
    assert await state_of(client, ident, owt) == "COMPLETED"
    words = text(shown)
    assert "Money moved: the hold was settled" in words and "Settlement EUR" in words
    assert f"{base}/wire/{owt}/return?from=detail" in shown
    after_settle = await balances(client, ident, acc)

    # Return: a post without the confirmation goes to the confirmation page first.
    r = await browser.post(f"{base}/wire/{owt}/return?from=detail", data={"csrf": csrf_of(shown)})
    assert r.status_code == 303 and r.headers["location"] == f"{base}/wire/{owt}/return?from=detail"
    assert await state_of(client, ident, owt) == "COMPLETED"
    confirm = await page(browser, r.headers["location"])
    assert "Return the wire transfer" in confirm and "50.00 EUR" in confirm
    assert f'href="{detail}"' in confirm  # Cancel goes back to the payment
    r = await browser.post(
        f"{base}/wire/{owt}/return?from=detail", data={"csrf": csrf_of(confirm), "confirm": "yes"}
    )
    assert r.headers["location"] == detail
    shown = await landed(browser, r)
    assert flash_of(shown) == ("Returned: the bank sent its money back to the account.")
    assert await state_of(client, ident, owt) == "RETURNED"
    available, actual = await balances(client, ident, acc)
    assert available - after_settle[0] >= 5_000 and actual - after_settle[1] >= 5_000
    words = text(shown)
    assert "Returned: the money came back to the source account" in words
    assert "Now RETURNED" in words and words.count("Transaction ") == 2
    assert f"/wire/{owt}/return" not in shown  # nothing more to do

    # Reject, from the list, after its confirmation page.
    second = await wire(client, p, ident, acc, 3_000)
    listing = await page(browser, f"{base}/payments")
    assert f"{base}/wire/{second}/reject" in listing and f"{base}/wire/{owt}/return" not in listing
    confirm = await page(browser, f"{base}/wire/{second}/reject")
    r = await browser.post(
        f"{base}/wire/{second}/reject", data={"csrf": csrf_of(confirm), "confirm": "yes"}
    )
    assert r.headers["location"] == f"{base}/payments"
    assert flash_of(await landed(browser, r)) == ("Rejected: its money is back on the account.")
    assert await state_of(client, ident, second) == "REJECTED"
    assert "Hold released (REJECTED)" in text(await page(browser, f"{base}/payments/{second}"))

    # A completed wire is offered a return on the list too.
    third = await wire(client, p, ident, acc, 1_000)
    r = await browser.post(
        f"{base}/wire/{third}/accept", data={"csrf": csrf_of(await page(browser, detail))}
    )
    assert r.status_code == 303
    listing = await page(browser, f"{base}/payments")
    assert f"{base}/wire/{third}/return" in listing


async def test_a_refused_return_says_why_and_changes_nothing(
    browser,  # noqa: F811
    client,
    admin_headers,
    programme,
):
    p = await programme()
    await settings(client, admin_headers, p, owtScaRequired=False)
    ident, acc = await customer(client, p, funds=100_000, sms=False)
    base = f"/portal/programmes/{p.id}"
    owt = await wire(client, p, ident, acc, 5_000)
    before = await balances(client, ident, acc)
    detail = f"{base}/payments/{owt}"
    confirm = await page(browser, f"{base}/wire/{owt}/return?from=detail")
    r = await browser.post(
        f"{base}/wire/{owt}/return?from=detail", data={"csrf": csrf_of(confirm), "confirm": "yes"}
    )
    assert r.headers["location"] == detail
    said = flash_of(await landed(browser, r))
    assert said == (
        "Not returned: only a COMPLETED wire transfer can be returned, and this one is "
        "SUBMITTED. Nothing changed. DENIED"
    )
    assert await state_of(client, ident, owt) == "SUBMITTED"
    assert await balances(client, ident, acc) == before
    # Settling twice: the second is refused in plain words.
    for expected in (
        "Settled: the wire transfer has left the account.",
        "Not settled: the wire transfer has already ended",
    ):
        r = await browser.post(
            f"{base}/wire/{owt}/accept?from=detail",
            data={"csrf": csrf_of(await page(browser, detail))},
        )
        assert flash_of(await landed(browser, r)).startswith(expected)


async def test_another_programmes_payment_no_session_and_no_csrf_are_refused(
    browser,  # noqa: F811
    client,
    admin_headers,
    programme,
):
    p, other = await programme(), await programme()
    await settings(client, admin_headers, p, owtScaRequired=False)
    ident, acc = await customer(client, p, funds=100_000, sms=False)
    owt = await wire(client, p, ident, acc, 5_000)
    base, elsewhere = f"/portal/programmes/{p.id}", f"/portal/programmes/{other.id}"
    await page(browser, f"{base}/payments/{owt}")
    for url in (f"{elsewhere}/payments/{owt}", f"{base}/payments/1", f"{base}/payments/x"):
        r = await browser.get(url)
        assert r.status_code == 404 and "No such payment" in r.text, url
    r = await browser.get(f"{elsewhere}/wire/{owt}/return")
    assert r.status_code == 404

    # A post without its CSRF token changes nothing.
    for fields in ({"confirm": "yes"}, {"confirm": "yes", "csrf": "wrong"}):
        for action in ("accept", "reject"):
            r = await browser.post(f"{base}/wire/{owt}/{action}", data=fields)
            assert r.status_code == 403 and "CSRF" in r.text
    assert await state_of(client, ident, owt) == "SUBMITTED"

    # Without a session: the sign-in page.
    for url in (f"{base}/payments/{owt}", f"{base}/wire/{owt}/return"):
        r = await client.get(url)
        assert (r.status_code, r.headers.get("location")) == (303, "/portal/login"), url
    r = await client.post(f"{base}/wire/{owt}/return", data={"csrf": "x", "confirm": "yes"})
    assert (r.status_code, r.headers.get("location")) == (303, "/portal/login")
    assert await state_of(client, ident, owt) == "SUBMITTED"
