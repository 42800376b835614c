"""A statement adds up (issue 33): read in order, each entry's available and actual balances after
are the previous entry's plus its own adjustments, and the newest entry's are the account's
balances, whatever the page, order or filter; a payment keeps one entry (D12) whose figures are
its current ones (a released hold moves nothing and charged no fee); the portal's statement
shows the same rows, states and figures as the API's, on an account after two sends and four
wire transfers that ended every way (completed, failed, returned, still waiting)."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx

from tests.api.fees_support import ledger_ok
from tests.api.payments_support import advance, balances, customer, settings, simulate
from tests.api.test_outgoing_wire_transfers import CANNED, FEE, sepa
from tests.api.test_outgoing_wire_transfers import body as owt_body
from tests.api.test_portal_web import page, signed_in_client
from tests.api.test_sends import body as send_body
from tests.api.test_sends import start_and_verify
from tests.conftest import Prog
from tests.factories import Identity

FUNDS = 100_000
AMOUNT = 5_000  # above the low-value exemption: a send waits for its challenge


async def statement(
    client: httpx.AsyncClient, ident: Identity, acc: str, base: str = "/multi", **params: Any
) -> list[dict[str, Any]]:
    r = await client.get(
        f"{base}/managed_accounts/{acc}/statement", headers=ident.headers, params=params
    )
    assert r.status_code == 200, r.text
    entries: list[dict[str, Any]] = r.json()["entry"]
    return entries


def figures(e: dict[str, Any]) -> tuple[Any, ...]:
    return (
        e["transactionId"]["id"],
        e["entryState"],
        e["transactionAmount"]["amount"],
        e["availableBalanceAdjustment"]["amount"],
        e["actualBalanceAdjustment"]["amount"],
        e["availableBalanceAfter"]["amount"],
        e["actualBalanceAfter"]["amount"],
        e["balanceAfter"]["amount"],
        e["cardholderFee"]["amount"],
    )


def assert_adds_up(oldest_first: list[dict[str, Any]], balance: tuple[int, int]) -> None:
    available = actual = 0  # an account opens empty
    for e in oldest_first:
        available += e["availableBalanceAdjustment"]["amount"]
        actual += e["actualBalanceAdjustment"]["amount"]
        assert (e["availableBalanceAfter"]["amount"], e["actualBalanceAfter"]["amount"]) == (
            available,
            actual,
        ), e
        assert e["balanceAfter"]["amount"] == actual, e
    assert (available, actual) == balance


async def an_account_after_every_ending(
    client: httpx.AsyncClient, admin: dict[str, str], p: Prog
) -> tuple[Identity, str, dict[str, str]]:
    """Two sends (one verified, one whose challenge expired) and four wire transfers (completed,
    failed, returned, still submitted); answers the payments' ids by what became of them."""
    await settings(client, admin, p, owtScaRequired=False)
    sender, acc = await customer(client, p, funds=FUNDS)
    _, receiver_acc = await customer(client, p, "consumers", sms=False)
    ids: dict[str, str] = {}
    for name in ("send verified", "send rejected"):
        r = await client.post(
            "/multi/sends", headers=sender.headers, json=send_body(p, acc, receiver_acc)
        )
        assert r.status_code == 200, r.text
        ids[name] = r.json()["id"]
    await start_and_verify(client, sender, ids["send verified"])
    expired = await simulate(client, p, f"/challenges/{ids['send rejected']}/expire")
    assert expired.json() == {"code": "COMPLETED"}
    for name, iban in (
        ("wire completed", None),
        ("wire failed", CANNED + "5552"),
        ("wire returned", CANNED + "5559"),
        ("wire waiting", CANNED + "5551"),
    ):
        details = sepa() if iban is None else sepa(iban)
        r = await client.post(
            "/multi/outgoing_wire_transfers",
            headers=sender.headers,
            json=owt_body(p, acc, AMOUNT, details=details),
        )
        assert r.status_code == 200, r.text
        ids[name] = r.json()["id"]
    for _ in range(3):  # approval, completion, a return's delay
        await advance(client, p, 2)
    return sender, acc, ids


async def test_a_statement_adds_up_row_by_row_on_both_versions_and_in_the_portal(
    client, app, programme, admin_headers
):
    p = await programme()
    sender, acc, ids = await an_account_after_every_ending(client, admin_headers, p)
    spent = AMOUNT + (AMOUNT + FEE) * 2  # a send, a completed and a returned wire transfer
    waiting = AMOUNT + FEE
    balance = (FUNDS - spent + AMOUNT - waiting, FUNDS - spent + AMOUNT)
    assert await balances(client, sender, acc) == balance

    newest_first = await statement(client, sender, acc)
    assert_adds_up(list(reversed(newest_first)), balance)
    by_id: dict[str, list[dict[str, Any]]] = {}
    for e in newest_first:
        by_id.setdefault(e["transactionId"]["id"], []).append(e)
    # One entry per payment (D12), the return an entry of its own.
    assert all(len(by_id[ids[name]]) == 1 for name in ids)
    returned = [e for e in newest_first if e["additionalFields"].get("relatedTransactionId")]
    assert [e["transactionAmount"]["amount"] for e in returned] == [AMOUNT]

    def entry(name: str) -> tuple[str, int, int, int, int]:
        e = by_id[ids[name]][0]
        return (
            e["entryState"],
            e["transactionAmount"]["amount"],
            e["availableBalanceAdjustment"]["amount"],
            e["actualBalanceAdjustment"]["amount"],
            e["cardholderFee"]["amount"],
        )

    paid = -(AMOUNT + FEE)
    assert entry("send verified") == ("COMPLETED", -AMOUNT, -AMOUNT, -AMOUNT, 0)
    assert entry("send rejected") == ("COMPLETED", 0, 0, 0, 0)
    assert entry("wire completed") == ("COMPLETED", -AMOUNT, paid, paid, FEE)
    # A failed wire transfer moved nothing and charged no fee.
    assert entry("wire failed") == ("COMPLETED", 0, 0, 0, 0)
    assert entry("wire returned") == ("COMPLETED", -AMOUNT, paid, paid, FEE)
    assert entry("wire waiting") == ("PENDING", -AMOUNT, paid, 0, FEE)
    # 3.29.1's `transactionFee` is the same fee, as the payment's webhook event gives it.
    assert all(e["transactionFee"] == e["cardholderFee"] for e in newest_first)

    # Every page, in either order, shows the same figures as the whole statement.
    whole = [figures(e) for e in newest_first]
    for order, expected in (("DESC", whole), ("ASC", list(reversed(whole)))):
        paged: list[tuple[Any, ...]] = []
        for offset in range(0, len(whole), 3):
            got = await statement(
                client, sender, acc, orderByTimestamp=order, offset=offset, limit=3
            )
            paged.extend(figures(e) for e in got)
        assert paged == expected, order
    # Leaving out what moves nothing leaves the others' figures as they were.
    moving = await statement(client, sender, acc, showFundMovementsOnly="true")
    assert [figures(e) for e in moving] == [
        f for f in whole if f[3] or f[4]
    ]  # the account's creation and the released holds left out
    # The whole statement in a time window that leaves out the newest entries.
    last_time = newest_first[0]["processedTimestamp"]
    older = [e for e in newest_first if e["processedTimestamp"] < last_time]
    if older:
        window = await statement(client, sender, acc, toTimestamp=last_time - 1)
        assert [figures(e) for e in window] == [figures(e) for e in older]

    # 3.1.0 shows the same entries with the same amounts, balances after and fees.
    for base in ("/3.29.1/multi", "/3.1.0/multi"):
        old = await statement(client, sender, acc, base=base)
        assert [
            (
                e["transactionId"]["id"],
                e["transactionAmount"]["amount"],
                e["balanceAfter"]["amount"],
                e["cardholderFee"]["amount"],
            )
            for e in old
        ] == [(f[0], f[2], f[7], f[8]) for f in whole], base

    # The portal's statement: the same rows, states and figures.
    browser = await signed_in_client(app)
    try:
        text = await page(browser, f"/portal/programmes/{p.id}/accounts/{acc}")
    finally:
        await browser.aclose()
    body = text[text.index("<tbody>") : text.index("</tbody>")]
    rows = [
        # Each cell's text as read (a row's kind links to its payment: decision 0070).
        [
            html.unescape(re.sub(r"<[^>]+>", "", cell))
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)
        ]
        for row in re.findall(r"<tr>(.*?)</tr>", body)
    ]

    def shown(amount: int) -> str:
        # As the portal writes amounts for people: thousands separated, the minus in front.
        sign, whole, cents = "-" if amount < 0 else "", abs(amount) // 100, abs(amount) % 100
        return f"{sign}{whole:,}.{cents:02d} EUR"

    assert [(r[1], r[2], r[4], r[5], r[6], r[7]) for r in rows] == [
        (
            e["transactionId"]["type"],
            e["entryState"],
            shown(e["transactionAmount"]["amount"]),
            shown(e["cardholderFee"]["amount"]),
            shown(e["availableBalanceAfter"]["amount"]),
            shown(e["actualBalanceAfter"]["amount"]),
        )
        for e in newest_first
    ]
    await ledger_ok(client, admin_headers, p)
