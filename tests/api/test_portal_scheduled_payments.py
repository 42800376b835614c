"""Scheduled payments in the operator web portal (issue 43 §5, D40), over HTTP as a browser uses
it: the payments list knows the 3.63 line's states and filters by SCHEDULED; a scheduled
payment's page shows its time; the operator cancels a scheduled transfer, send or wire transfer
(on its payer's request) from its page or the list, after a page asking first with an optional
reason, in a sandbox or live programme, recorded in the audit log; a bad reason, a payment no
longer scheduled, a post without its CSRF token, another programme's payment and a visitor
without a session are refused and change nothing."""

from __future__ import annotations

import html
from typing import Any

import httpx
from sqlalchemy import update

from multibank.portal.web.common import when
from multibank.programmes.models import Programme
from tests.api.payments_support import balances, customer, settings
from tests.api.test_audit_log import records
from tests.api.test_outgoing_wire_transfers import body as owt_body
from tests.api.test_portal_payment_detail import text
from tests.api.test_portal_web import csrf_of, flash_of, landed, page, signed_in_client
from tests.api.test_v3_63_scheduled_payments import (
    FUNDS,
    HOUR_S,
    later,
    now_ms,
    post,
    read,
    send,
    transfer,
    two_accounts,
)
from tests.conftest import Prog
from tests.factories import Identity


async def scheduled(
    client: httpx.AsyncClient, p: Prog, funds: int = FUNDS
) -> tuple[Identity, str, str, int]:
    """A customer's transfer between its two accounts, scheduled an hour ahead: (customer,
    source account, transfer id, its time)."""
    ident, acc, other = await two_accounts(client, p, funds=funds)
    at = await now_ms(client, p) + HOUR_S * 1000
    r = await post(client, ident, "/transfers", transfer(p, acc, other, scheduledTimestamp=str(at)))
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "SCHEDULED"
    return ident, acc, str(r.json()["id"]), at


async def transfer_of(client: httpx.AsyncClient, ident: Identity, tid: str) -> dict[str, Any]:
    r = await read(client, ident, f"/transfers/{tid}")
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found


async def cancel(
    browser: httpx.AsyncClient, url: str, reason: str | None = None, **extra: str
) -> httpx.Response:
    """The cancel's form posted as a browser posts it: from its page, with its CSRF token."""
    form = await page(browser, url)
    fields = {"csrf": csrf_of(form), "confirm": "yes", **extra}
    if reason is not None:
        fields["reason"] = reason
    return await browser.post(url, data=fields)


async def test_the_list_filters_by_scheduled_and_the_page_shows_the_time_and_the_cancel(
    app, client, programme
):
    p = await programme()
    ident, acc, tid, at = await scheduled(client, p)
    other = (await read(client, ident, f"/transfers/{tid}")).json()["destination"]["id"]
    now = (await post(client, ident, "/transfers", transfer(p, acc, other))).json()["id"]
    browser = await signed_in_client(app)
    try:
        base = f"/portal/programmes/{p.id}/payments"
        listed = await page(browser, f"{base}?state=SCHEDULED")
        assert 'class="flash error"' not in listed
        assert f"{base}/{tid}" in listed and f"{base}/{now}" not in listed
        assert f'href="{base}/{tid}/cancel"' in listed
        # The line's states of every kind are the filter's choices.
        for state in ("SCHEDULED", "CANCELLED", "PENDING_CONFIRMATION", "INVALID"):
            assert f'value="{state}"' in listed, state
        everything = await page(browser, base)
        assert f"{base}/{now}" in everything
        assert f"{base}/{now}/cancel" not in everything  # it went at once: nothing to cancel

        shown = await page(browser, f"{base}/{tid}")
        words = text(shown)
        assert f"Scheduled for (UTC, programme clock) {when(at)}" in words
        assert "Executed" not in words
        assert f'href="{base}/{tid}/cancel?from=detail"' in shown
        assert "Cancel…" in html.unescape(shown)
        assert f"{base}/{now}/cancel" not in await page(browser, f"{base}/{now}")
    finally:
        await browser.aclose()


async def test_the_operator_cancels_it_with_a_reason_after_confirming(
    app, client, programme, admin_headers
):
    p = await programme()
    ident, acc, tid, at = await scheduled(client, p)
    browser = await signed_in_client(app)
    try:
        base = f"/portal/programmes/{p.id}/payments"
        url = f"{base}/{tid}/cancel?from=detail"
        form = await page(browser, url)
        assert f"Cancel the scheduled transfer {tid} of 50.00 EUR, due {when(at)}" in text(form)
        assert 'name="reason"' in form
        # A post without confirm=yes is sent to the page that asks first.
        r = await browser.post(url, data={"csrf": csrf_of(form), "reason": "asked"})
        assert (r.status_code, r.headers["location"]) == (303, url)
        assert (await transfer_of(client, ident, tid))["state"] == "SCHEDULED"

        r = await cancel(browser, url, "customer asked by phone")
        assert r.headers["location"] == f"{base}/{tid}"
        shown = await landed(browser, r)
        assert flash_of(shown) == "Cancelled: the scheduled transfer will not go."
        assert "Cancelled because customer asked by phone" in text(shown)
        assert 'id="payment-state">CANCELLED' in shown
        assert f"{base}/{tid}/cancel" not in shown
    finally:
        await browser.aclose()
    t = await transfer_of(client, ident, tid)
    assert (t["state"], t["cancellationReason"]) == ("CANCELLED", "customer asked by phone")
    # Its time comes and goes: nothing moves.
    await later(client, p, HOUR_S + 1, ident)
    assert (await transfer_of(client, ident, tid))["state"] == "CANCELLED"
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)
    # Recorded as an operator action on the payment, once.
    found = [r for r in await records(client, admin_headers, p.id) if r["action"].startswith("pay")]
    assert [(r["action"], r["target"]) for r in found] == [
        ("payment.cancel", {"kind": "payment", "id": tid})
    ]
    assert found[0]["actor"].startswith("portal session ")


async def test_a_send_and_a_wire_transfer_from_the_list_and_without_a_reason(
    app, client, programme, admin_headers
):
    p = await programme()
    await settings(client, admin_headers, p, sendsScaRequired=False, owtScaRequired=False)
    ident, acc = await customer(client, p, funds=FUNDS, sms=False)
    _payee, theirs = await customer(client, p, sms=False)
    at = str(await now_ms(client, p) + HOUR_S * 1000)
    sid = (await post(client, ident, "/sends", send(p, acc, theirs, scheduledTimestamp=at))).json()[
        "id"
    ]
    oid = (
        await post(
            client, ident, "/outgoing_wire_transfers", owt_body(p, acc, scheduledTimestamp=at)
        )
    ).json()["id"]
    browser = await signed_in_client(app)
    try:
        base = f"/portal/programmes/{p.id}/payments"
        for pid, name in ((sid, "send"), (oid, "outgoing wire transfer")):
            r = await cancel(browser, f"{base}/{pid}/cancel", "")
            assert r.headers["location"] == base  # back to the list it was started from
            said = flash_of(await landed(browser, r))
            assert said == f"Cancelled: the scheduled {name} will not go."
    finally:
        await browser.aclose()
    for path, pid in (("sends", sid), ("outgoing_wire_transfers", oid)):
        got = (await read(client, ident, f"/{path}/{pid}")).json()
        assert got["state"] == "CANCELLED" and "cancellationReason" not in got, got
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)


async def test_a_live_programmes_operator_cancels_too(app, client, container, programme):
    """A back-office action, not a simulator's: the same in a live programme."""
    p = await programme()
    ident, _acc, tid, _at = await scheduled(client, p)
    async with container.db.transaction() as session:
        await session.execute(
            update(Programme).where(Programme.id == int(p.id)).values(mode="live")
        )
    browser = await signed_in_client(app)
    try:
        base = f"/portal/programmes/{p.id}/payments"
        assert f"{base}/{tid}/cancel" in await page(browser, base)
        r = await cancel(browser, f"{base}/{tid}/cancel?from=detail", "fraud suspected")
        shown = await landed(browser, r)
        assert flash_of(shown) == "Cancelled: the scheduled transfer will not go."
        assert 'id="payment-state">CANCELLED' in shown
        assert "Cancelled because fraud suspected" in text(shown)
    finally:
        await browser.aclose()
    assert (await transfer_of(client, ident, tid))["state"] == "CANCELLED"


async def test_a_bad_reason_shows_the_form_again_and_changes_nothing(
    app, client, programme, admin_headers
):
    p = await programme()
    ident, _acc, tid, _at = await scheduled(client, p)
    browser = await signed_in_client(app)
    try:
        url = f"/portal/programmes/{p.id}/payments/{tid}/cancel?from=detail"
        for bad in ("no!", "x" * 51, "naïve", "a\nb"):
            r = await cancel(browser, url, bad)
            assert r.status_code == 400, bad
            said = flash_of(r.text)
            assert said.startswith("The reason may have at most 50 characters"), said
            assert 'name="reason"' in r.text and csrf_of(r.text)  # the form, to correct
            assert html.escape(bad.strip(), quote=True) in r.text
    finally:
        await browser.aclose()
    assert (await transfer_of(client, ident, tid))["state"] == "SCHEDULED"
    assert not [r for r in await records(client, admin_headers, p.id) if "payment" in r["action"]]


async def test_a_payment_no_longer_scheduled_is_refused_with_why(
    app, client, programme, admin_headers
):
    p = await programme()
    ident, _acc, tid, _at = await scheduled(client, p)
    browser = await signed_in_client(app)
    try:
        base = f"/portal/programmes/{p.id}/payments"
        url = f"{base}/{tid}/cancel?from=detail"
        form = await page(browser, url)  # opened while it is still scheduled...
        # ... and meanwhile its payer cancels it through the API.
        r = await post(
            client,
            ident,
            "/transfers/bulk/cancel",
            {"cancellations": [{"id": tid, "cancellationReason": "mine"}]},
        )
        assert r.json()["cancellations"][0]["state"] == "SUCCESS"
        r = await browser.post(
            url, data={"csrf": csrf_of(form), "confirm": "yes", "reason": "operator"}
        )
        assert r.headers["location"] == f"{base}/{tid}"
        expected = (
            "Not cancelled: the transfer is CANCELLED; only a SCHEDULED payment can be "
            "cancelled. Nothing changed. TRANSACTION_NOT_SCHEDULED"
        )
        assert flash_of(await landed(browser, r)) == expected
        # The form itself, asked for again, says the same on the payment's page.
        r = await browser.get(url)
        assert r.headers["location"] == f"{base}/{tid}"
        assert flash_of(await landed(browser, r)) == expected
    finally:
        await browser.aclose()
    t = await transfer_of(client, ident, tid)
    assert (t["state"], t["cancellationReason"]) == ("CANCELLED", "mine")
    assert not [r for r in await records(client, admin_headers, p.id) if "payment" in r["action"]]


async def test_no_csrf_another_programme_and_no_session_are_refused(app, client, programme):
    p, other = await programme(), await programme()
    ident, _acc, tid, _at = await scheduled(client, p)
    base, elsewhere = f"/portal/programmes/{p.id}", f"/portal/programmes/{other.id}"
    browser = await signed_in_client(app)
    try:
        url = f"{base}/payments/{tid}/cancel"
        await page(browser, url)
        for fields in ({"confirm": "yes"}, {"confirm": "yes", "csrf": "wrong"}):
            r = await browser.post(url, data={**fields, "reason": "x"})
            assert r.status_code == 403 and "CSRF" in r.text
        form = await page(browser, url)
        for there in (f"{elsewhere}/payments/{tid}/cancel", f"{base}/payments/999999/cancel"):
            r = await browser.get(there)
            assert r.status_code == 404 and "No such payment" in r.text, there
            r = await browser.post(there, data={"csrf": csrf_of(form), "confirm": "yes"})
            assert r.status_code == 404 and "No such payment" in r.text, there
    finally:
        await browser.aclose()
    r = await client.get(url)
    assert (r.status_code, r.headers.get("location")) == (303, "/portal/login")
    r = await client.post(url, data={"csrf": "x", "confirm": "yes"})
    assert (r.status_code, r.headers.get("location")) == (303, "/portal/login")
    assert (await transfer_of(client, ident, tid))["state"] == "SCHEDULED"
