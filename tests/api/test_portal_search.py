"""The portal's customer search and filters and its payment filters (issue 35 §2), over HTTP as
the operator's browser uses them: names as the list shows them, case ignored, the operator's `%`
and `_` matching only themselves, filters done by the database, bad filter input answered with a
sentence on the page rather than an error page."""

from __future__ import annotations

import re
from typing import Any

import pytest

from multibank.identities.samples import corporate_signup
from tests.api.payments_support import advance, customer
from tests.api.test_portal_web import page, signed_in_client
from tests.factories import login, open_account, sign_up, verified


@pytest.fixture
async def browser(app: Any) -> Any:
    c = await signed_in_client(app)
    try:
        yield c
    finally:
        await c.aclose()


def company(name: str) -> dict[str, Any]:
    company: dict[str, Any] = corporate_signup("0", "x@example.com", company=name)["company"]
    return company


def customer_ids(html: str) -> set[str]:
    return set(re.findall(r"/customers/(\d+)\"", html))


async def test_customers_found_by_full_name_company_name_email_and_id(browser, client, programme):
    p = await programme()
    base = f"/portal/programmes/{p.id}/customers"
    grace = await sign_up(client, p, "consumers")
    acme = await sign_up(client, p, "corporates", company=company("Initech Holdings"))
    other = await sign_up(client, p, "corporates", company=company("Globex"))
    # The full name as the list shows it, across first name and surname, in any case.
    assert customer_ids(await page(browser, f"{base}?q=grace hopper")) == {grace.id}
    assert customer_ids(await page(browser, f"{base}?q=CE HOP")) == {grace.id}
    assert customer_ids(await page(browser, f"{base}?q=initech hold")) == {acme.id}
    assert customer_ids(await page(browser, f"{base}?q=GLOBEX")) == {other.id}
    assert customer_ids(await page(browser, f"{base}?q={acme.email.upper()}")) == {acme.id}
    assert customer_ids(await page(browser, f"{base}?q={other.id}")) == {other.id}
    assert customer_ids(await page(browser, f"{base}?q=nobody-like-this")) == set()


async def test_percent_and_underscore_match_only_themselves(browser, client, programme):
    p = await programme()
    base = f"/portal/programmes/{p.id}/customers"
    percent = await sign_up(client, p, "corporates", company=company("Fifty% Off"))
    underscore = await sign_up(client, p, "corporates", company=company("Under_Score"))
    await sign_up(client, p, "corporates", company=company("Plain Company"))
    await sign_up(client, p, "consumers")
    everyone = customer_ids(await page(browser, base))
    assert len(everyone) == 4
    assert customer_ids(await page(browser, f"{base}?q=%25")) == {percent.id}
    assert customer_ids(await page(browser, f"{base}?q=y%25 o")) == {percent.id}
    # `_` is not "any one character": "r_s" matches "Under_Score" and nothing else.
    assert customer_ids(await page(browser, f"{base}?q=r_s")) == {underscore.id}
    assert customer_ids(await page(browser, f"{base}?q=n_c")) == set()


async def test_customers_filtered_by_type_and_due_diligence(browser, client, programme):
    p = await programme()
    base = f"/portal/programmes/{p.id}/customers"
    grace = await sign_up(client, p, "consumers")
    corp = await sign_up(client, p, "corporates")
    approved = await verified(client, p, "corporates")
    assert customer_ids(await page(browser, f"{base}?type=CONSUMER")) == {grace.id}
    assert customer_ids(await page(browser, f"{base}?type=corporate")) == {corp.id, approved.id}
    assert customer_ids(await page(browser, f"{base}?dd=APPROVED")) == {approved.id}
    assert customer_ids(await page(browser, f"{base}?dd=NOT_STARTED")) == {grace.id, corp.id}
    assert customer_ids(await page(browser, f"{base}?type=CONSUMER&dd=APPROVED")) == set()


async def test_a_bad_customer_filter_is_said_in_words(browser, client, programme):
    p = await programme()
    base = f"/portal/programmes/{p.id}/customers"
    await sign_up(client, p, "consumers")
    r = await browser.get(f"{base}?type=robot&dd=MAYBE")
    assert r.status_code == 200
    assert "Type must be one of: corporate, consumer." in r.text
    assert "Due-diligence state must be one of" in r.text
    r = await browser.get(f"{base}?q={'x' * 101}")
    assert r.status_code == 200 and "Search text must be at most 100 characters" in r.text


MA = "managed_accounts"


def listed(html: str) -> list[tuple[str, str]]:
    """The payments page's rows in order: (day on the programme clock, payment id)."""
    return re.findall(
        r"<tr><td[^>]*>(\d{4}-\d\d-\d\d) [^<]*</td><td[^>]*>[^<]*</td>"
        r"<td[^>]*>(?:<a [^>]*>)?<code>(\d+)</code>",
        html,
    )


def payment_ids(html: str) -> set[str]:
    return {pid for _, pid in listed(html)}


async def pay(client: Any, ident: Any, path: str, body: dict[str, Any]) -> tuple[str, str]:
    r = await client.post(f"/multi/{path}", headers=ident.headers, json=body)
    assert r.status_code == 200, r.text
    return r.json()["id"], r.json()["state"]


@pytest.fixture
async def payments(client, programme, admin_headers) -> dict[str, Any]:
    """A wire waiting at the bank and a transfer on day one; a send and a bigger transfer two
    days later on the programme clock."""
    p = await programme()
    r = await client.patch(
        f"/portal/api/programmes/{p.id}/settings",
        headers=admin_headers,
        json={"owtScaRequired": False},
    )
    assert r.status_code == 200, r.text
    ident, acc = await customer(client, p, funds=1_000_000, sms=False)
    _, theirs = await customer(client, p, sms=False)
    own = (await open_account(client, ident, "EUR"))["id"]

    def transfer(amount: int) -> dict[str, Any]:
        return {
            "profileId": p.profiles["transfers"],
            "source": {"type": MA, "id": acc},
            "destination": {"type": MA, "id": own},
            "destinationAmount": {"currency": "EUR", "amount": amount},
        }

    wire = {
        "profileId": p.profiles["outgoingWireTransfers"],
        "sourceInstrument": {"type": MA, "id": acc},
        "transferAmount": {"currency": "EUR", "amount": 5_000},
        "description": "Rent",
        "destinationBeneficiary": {
            "name": "Landlord",
            "bankAccountDetails": {
                "iban": "WV38WEAV502015555551",
                "bankIdentifierCode": "COBADEFFXXX",
            },
        },
    }
    made: dict[str, tuple[str, str]] = {}
    made["wire"] = await pay(client, ident, "outgoing_wire_transfers", wire)
    made["small"] = await pay(client, ident, "transfers", transfer(1_000))
    await advance(client, p, 2 * 86_400)
    r = await login(client, p, ident.email)  # the session did not outlive two days
    assert r.status_code == 200, r.text
    ident.token = r.json()["token"]
    send = {
        "profileId": p.profiles["sends"],
        "source": {"type": MA, "id": acc},
        "destination": {"type": MA, "id": theirs},
        "destinationAmount": {"currency": "EUR", "amount": 25_050},
    }
    made["send"] = await pay(client, ident, "sends", send)
    made["big"] = await pay(client, ident, "transfers", transfer(123_456))
    assert made["wire"][1] == "SUBMITTED" and made["small"][1] == "COMPLETED"
    return {
        "base": f"/portal/programmes/{p.id}/payments",
        "id": {name: pid for name, (pid, _) in made.items()},
        "state": {pid: state for pid, state in made.values()},
    }


async def test_payments_needing_action_come_first(browser, payments):
    rows = listed(await page(browser, payments["base"]))
    ids = payments["id"]
    assert {pid for _, pid in rows} == set(ids.values())
    # The oldest payment, but the one wire waiting for the operator: first.
    assert rows[0][1] == ids["wire"]
    assert [pid for _, pid in rows[1:]][-1] == ids["small"]


async def test_payments_filtered_by_kind_and_state(browser, payments):
    base, ids = payments["base"], payments["id"]
    assert payment_ids(await page(browser, f"{base}?kind=OWT")) == {ids["wire"]}
    assert payment_ids(await page(browser, f"{base}?kind=transfer")) == {ids["small"], ids["big"]}
    assert payment_ids(await page(browser, f"{base}?kind=send")) == {ids["send"]}
    assert payment_ids(await page(browser, f"{base}?state=SUBMITTED")) == {ids["wire"]}
    completed = {pid for pid, state in payments["state"].items() if state == "COMPLETED"}
    assert ids["wire"] not in completed
    assert payment_ids(await page(browser, f"{base}?state=COMPLETED")) == completed
    assert payment_ids(await page(browser, f"{base}?kind=SEND&state=SUBMITTED")) == set()


async def test_payments_filtered_by_date_on_the_programme_clock(browser, payments):
    base, ids = payments["base"], payments["id"]
    day = dict((pid, d) for d, pid in listed(await page(browser, base)))
    first, third = day[ids["wire"]], day[ids["send"]]
    assert first < third and day[ids["small"]] == first and day[ids["big"]] == third
    late = {ids["send"], ids["big"]}
    early = {ids["wire"], ids["small"]}
    assert payment_ids(await page(browser, f"{base}?from={third}")) == late
    assert payment_ids(await page(browser, f"{base}?to={first}")) == early
    assert payment_ids(await page(browser, f"{base}?from={first}&to={first}")) == early
    assert payment_ids(await page(browser, f"{base}?from={first}&to={third}")) == early | late


async def test_payments_filtered_by_amount_in_major_units(browser, payments):
    base, ids = payments["base"], payments["id"]
    # 10.00, 50.00 (the wire), 250.50 and 1,234.56 EUR.
    assert payment_ids(await page(browser, f"{base}?min=50")) == {
        ids["wire"],
        ids["send"],
        ids["big"],
    }
    assert payment_ids(await page(browser, f"{base}?max=50.00")) == {ids["wire"], ids["small"]}
    assert payment_ids(await page(browser, f"{base}?min=100&max=1,000")) == {ids["send"]}
    assert payment_ids(await page(browser, f"{base}?min=1,234.56")) == {ids["big"]}
    assert payment_ids(await page(browser, f"{base}?min=1234.57")) == set()


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("from=yesterday", "From must be a date written as YYYY-MM-DD"),
        ("to=2026-02-30", "To must be a date written as YYYY-MM-DD"),
        ("min=-5", "Minimum amount cannot be negative."),
        ("max=lots", "Maximum amount must be a number"),
        ("max=1e999999999", "Maximum amount must be at most"),
        ("min=10&max=5", "Minimum amount must not be more than maximum amount."),
        ("from=2026-03-02&to=2026-03-01", "From must not be after To."),
        ("kind=cheque", "Kind must be transfer, send, OWT (outgoing wire transfer), card"),
        ("state=LOST", "State must be one of:"),
    ],
)
async def test_bad_payment_filters_are_said_in_words(browser, payments, query, said):
    r = await browser.get(f"{payments['base']}?{query}")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert said in r.text
    # The bad filter is left out: every payment is still listed.
    assert payment_ids(r.text) == set(payments["id"].values())
