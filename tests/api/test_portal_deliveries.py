"""Webhook deliveries in the operator web portal (issue 35 §3), over HTTP as a browser uses it:
a delivery's own page (payload, every attempt with the receiver's answer, the next retry),
redelivery from it in any state, and the list's filters by event type and state. A real
receiver on 127.0.0.1 answers; delivery rounds are driven here as the server's worker runs them."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx

from tests.api.test_portal_web import browser, csrf_of, flash_of, page  # noqa: F401
from tests.api.test_webhooks import PORTAL, deliver, deliveries, hooked  # noqa: F401
from tests.factories import open_account, verified


def detail_links(listing: str, base: str) -> list[str]:
    return sorted(set(re.findall(rf'href="({re.escape(base)}/webhooks/[0-9]+)"', listing)))


async def redeliver_from(c: httpx.AsyncClient, detail_url: str) -> str:
    """Presses the detail page's Redeliver button; the page it lands on."""
    form = await page(c, detail_url)
    r = await c.post(f"{detail_url}/redeliver", data={"csrf": csrf_of(form), "back": "detail"})
    assert r.status_code == 303 and r.headers["location"] == detail_url
    return await page(c, detail_url)


async def account_event(client: httpx.AsyncClient, p: Any, **over: Any) -> dict[str, Any]:
    ident = await verified(client, p, "corporates")
    return await open_account(client, ident, "EUR", **over)


async def test_detail_shows_payload_attempts_and_next_retry_and_redelivers_pending(
    browser,  # noqa: F811
    client,
    container,
    admin_headers,
    hooked,  # noqa: F811
):
    p, receiver = hooked
    ident = await verified(client, p, "corporates")
    await deliver(container)  # the customer's own events first
    receiver.received.clear()
    down = (500, b"receiver down: try later", {})
    receiver.answer = lambda path, n: down if n == 0 else (204, b"", {})
    acc = await open_account(client, ident, "EUR")
    [d] = (await deliveries(client, admin_headers, p, eventType="managed_accounts"))["deliveries"]
    await deliver(container)
    base = f"/portal/programmes/{p.id}"
    url = f"{base}/webhooks/{d['id']}"
    assert url in detail_links(await page(browser, f"{base}/webhooks"), base)

    shown = await page(browser, url)
    assert d["eventType"] in shown and d["callRef"] in shown and d["resource"] in shown
    assert f'"id": "{acc["id"]}"' in html.unescape(shown)  # the payload, pretty-printed
    assert "PENDING" in shown and "RETRY" in shown and "500" in shown
    assert "receiver down: try later" in shown  # the failed attempt's answer
    [api] = (await deliveries(client, admin_headers, p, eventType="managed_accounts"))["deliveries"]
    assert api["state"] == "PENDING" and api["nextAttemptAt"] is not None
    assert "Next retry" in shown

    # Redeliver while pending: attempted now, not at the next retry ten seconds away.
    landed = await redeliver_from(browser, url)
    assert flash_of(landed) == "Sent again shortly."
    await deliver(container)
    sent = receiver.of("/hooks/managed_accounts/watch")
    assert len(sent) == 2 and sent[0].call_ref == sent[1].call_ref
    after = await page(browser, url)
    assert "DELIVERED" in after and "Next retry" not in after
    assert after.count('class="attempt"') == 2


async def test_redeliver_a_delivered_event_sends_it_again(
    browser,  # noqa: F811
    client,
    container,
    admin_headers,
    hooked,  # noqa: F811
):
    p, receiver = hooked
    await account_event(client, p)
    await deliver(container)
    [d] = (await deliveries(client, admin_headers, p, eventType="managed_accounts"))["deliveries"]
    assert d["state"] == "DELIVERED"
    receiver.received.clear()
    url = f"/portal/programmes/{p.id}/webhooks/{d['id']}"
    assert "Next retry" not in await page(browser, url)
    landed = await redeliver_from(browser, url)
    assert flash_of(landed) == "Sent again shortly." and "PENDING" in landed
    await deliver(container)
    [again] = receiver.of("/hooks/managed_accounts/watch")
    assert again.call_ref == d["callRef"]
    [d2] = (await deliveries(client, admin_headers, p, eventType="managed_accounts"))["deliveries"]
    assert d2["state"] == "DELIVERED"


async def test_filters_narrow_the_list_by_event_type_and_state(
    browser,  # noqa: F811
    client,
    container,
    admin_headers,
    hooked,  # noqa: F811
):
    p, _ = hooked
    await account_event(client, p)
    await deliver(container)
    everything = (await deliveries(client, admin_headers, p))["deliveries"]
    kinds = {d["eventType"] for d in everything}
    assert len(kinds) >= 2, kinds  # a customer's events and an account's
    base = f"/portal/programmes/{p.id}"
    listing = await page(browser, f"{base}/webhooks")
    assert len(detail_links(listing, base)) == len(everything)
    for kind in kinds:
        assert f"<option>{html.escape(kind)}</option>" in listing
    kind = next(d["eventType"] for d in everything if d["eventType"].startswith("managed_acc"))
    only = await page(browser, f"{base}/webhooks?{httpx.QueryParams(eventType=kind)}")
    want = {f"{base}/webhooks/{d['id']}" for d in everything if d["eventType"] == kind}
    assert set(detail_links(only, base)) == want and 0 < len(want) < len(everything)
    assert f"<option selected>{html.escape(kind)}</option>" in only
    delivered = await page(browser, f"{base}/webhooks?state=DELIVERED")
    assert len(detail_links(delivered, base)) == len(everything)
    assert detail_links(await page(browser, f"{base}/webhooks?state=PENDING"), base) == []
    failed = httpx.QueryParams(eventType=kind, state="FAILED")
    none = await page(browser, f"{base}/webhooks?{failed}")
    assert detail_links(none, base) == [] and "No delivery." in none


async def test_a_payload_with_markup_is_shown_escaped(
    browser,  # noqa: F811
    client,
    container,
    admin_headers,
    hooked,  # noqa: F811
):
    p, receiver = hooked
    receiver.answer = lambda path, n: (400, b"<script>alert('answer')</script>", {})
    await account_event(client, p, friendlyName="<script>alert('x')</script>")
    await deliver(container)
    [d] = (await deliveries(client, admin_headers, p, eventType="managed_accounts"))["deliveries"]
    assert "<script>alert('x')</script>" in str(d["payload"])
    shown = await page(browser, f"/portal/programmes/{p.id}/webhooks/{d['id']}")
    assert "<script>alert" not in shown
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in shown
    assert "&lt;script&gt;alert(&#39;answer&#39;)" in shown


async def test_an_unknown_delivery_is_not_found(browser, programme):  # noqa: F811
    p = await programme()
    for ident in ("999999", "abc"):
        r = await browser.get(f"/portal/programmes/{p.id}/webhooks/{ident}")
        assert r.status_code == 404


async def test_the_copy_button_of_a_delivery_copies_the_event_id(
    browser,  # noqa: F811
    client,
    admin_headers,
    hooked,  # noqa: F811
):
    """The id `multibank webhooks replay` takes and `webhooks listen` prints, on the list and on
    the delivery's page (issue 41 §2); the list's only Copy button of a delivery is that."""
    p, _ = hooked
    await account_event(client, p)
    [d] = (await deliveries(client, admin_headers, p, eventType="managed_accounts"))["deliveries"]
    base = f"/portal/programmes/{p.id}"
    listing = await page(browser, f"{base}/webhooks?eventType=managed_accounts.CREATED")
    copied = re.findall(r'data-copy="([^"]*)" aria-label="Copy ([^"]*)"', listing)
    assert (d["id"], "event id") in copied
    assert d["callRef"] not in {value for value, _ in copied}
    detail = await page(browser, f"{base}/webhooks/{d['id']}")
    assert f'data-copy="{d["id"]}" aria-label="Copy event id"' in detail
