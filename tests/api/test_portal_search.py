"""The portal's customer search and filters and its payment filters (issue 35 §2), over HTTP as
the operator's browser uses them: names as the list shows them, case ignored, the operator's `%`
and `_` matching only themselves, filters done by the database, bad filter input answered with a
sentence on the page rather than an error page."""

from __future__ import annotations

import re
from typing import Any

import pytest

from multibank.identities.samples import corporate_signup
from tests.api.test_portal_web import page, signed_in_client
from tests.factories import sign_up, verified


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
