"""A managed card's spend rules, black-box over HTTP (cards.md §4, decisions D22 and D28): get,
create, update, set (deprecated PUT) and delete on `/multi` and `/3.29.1/multi` (none on 3.1.0),
each documented 400 and 409, idempotency, and each refused caller."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.test_managed_cards import BASES, LATEST, act, create, debit_card, get
from tests.api.test_stepup_accounts import enrol_sms
from tests.factories import Identity, sign_up, verified

EMPTY = {"cardLevelSpendRules": {}, "identityLevelSpendRules": {}, "profileLevelSpendRules": {}}
RULES = {
    "allowedMerchantCategories": ["5411", "5812"],
    "blockedMerchantCategories": ["7995"],
    "allowedMerchantIds": ["m-1"],
    "blockedMerchantIds": ["m-2"],
    "allowedMerchantCountries": ["MT", "IT"],
    "blockedMerchantCountries": ["RU"],
    "allowContactless": False,
    "allowAtm": False,
    "allowECommerce": True,
    "allowCashback": False,
    "allowCreditAuthorisations": True,
    "minTransactionAmount": 100,
    "maxTransactionAmount": 50000,
}


def limit(amount: int, interval: str = "DAILY", currency: str = "GBP") -> dict[str, Any]:
    return {"value": {"currency": currency, "amount": amount}, "interval": interval}


def url(card_id: str, base: str = LATEST) -> str:
    return f"{base}/managed_cards/{card_id}/spend_rules"


async def rules_of(
    client: httpx.AsyncClient, ident: Identity, card_id: str, base: str = LATEST
) -> dict[str, Any]:
    r = await client.get(url(card_id, base), headers=ident.headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def all_levels(card_level: dict[str, Any]) -> dict[str, Any]:
    return {**card_level, **EMPTY, "cardLevelSpendRules": card_level}


async def write(
    client: httpx.AsyncClient,
    ident: Identity,
    method: str,
    card_id: str,
    body: dict[str, Any] | None,
    base: str = LATEST,
    **headers: str,
) -> httpx.Response:
    return await client.request(
        method, url(card_id, base), headers={**ident.headers, **headers}, json=body
    )


@pytest.mark.parametrize("base", BASES)
async def test_rules_are_created_read_changed_replaced_and_deleted(client, programme, base):
    p = await programme()
    ident = await verified(client, p, base=base)
    card = await debit_card(client, ident, base)
    cid = card["id"]
    # None yet: empty levels, and the implicit ALWAYS limit of 0 on the card.
    assert await rules_of(client, ident, cid, base) == EMPTY
    assert card["availableToSpend"] == [limit(0, "ALWAYS")]
    # Null list items are ignored.
    first = {**RULES, "spendLimit": [limit(1000), None, limit(0, "ALWAYS")]}
    first["allowedMerchantIds"] = ["m-1", None]
    r = await write(client, ident, "POST", cid, first, base)
    assert r.status_code == 204 and r.content == b"", r.text
    stored = {**RULES, "spendLimit": [limit(1000), limit(0, "ALWAYS")]}
    assert await rules_of(client, ident, cid, base) == all_levels(stored)
    # The card spends at most each limit (nothing spent yet).
    assert (await get(client, ident, cid, base))["availableToSpend"] == stored["spendLimit"]
    # Rules are set once.
    r = await write(client, ident, "POST", cid, {"allowAtm": True}, base)
    assert r.status_code == 409 and r.json()["errorCode"] == "SPEND_RULE_ALREADY_SET"
    # PATCH: only what is sent; an empty list or a list of nulls clears; a null changes nothing.
    patch = {
        "allowAtm": True,
        "blockedMerchantCategories": [],
        "allowedMerchantCountries": [None],
        "maxTransactionAmount": None,
        "spendLimit": [limit(500, "WEEKLY")],
    }
    r = await write(client, ident, "PATCH", cid, patch, base)
    assert r.status_code == 204, r.text
    changed = {**stored, "allowAtm": True, "spendLimit": [limit(500, "WEEKLY")]}
    del changed["blockedMerchantCategories"], changed["allowedMerchantCountries"]
    assert await rules_of(client, ident, cid, base) == all_levels(changed)
    # PUT replaces everything and answers what is stored.
    r = await write(client, ident, "PUT", cid, {"allowContactless": True, "allowAtm": None}, base)
    assert r.status_code == 200 and r.json() == {"allowContactless": True}, r.text
    assert await rules_of(client, ident, cid, base) == all_levels({"allowContactless": True})
    # DELETE removes them; a second DELETE or a PATCH finds none.
    r = await write(client, ident, "DELETE", cid, None, base)
    assert r.status_code == 204, r.text
    assert await rules_of(client, ident, cid, base) == EMPTY
    assert (await write(client, ident, "DELETE", cid, None, base)).status_code == 404
    assert (await write(client, ident, "PATCH", cid, {"allowAtm": True}, base)).status_code == 404
    # PUT sets rules where there are none; so does POST after a delete.
    r = await write(client, ident, "PUT", cid, {}, base)
    assert r.status_code == 200 and r.json() == {}
    assert (await write(client, ident, "DELETE", cid, None, base)).status_code == 204
    assert (await write(client, ident, "POST", cid, {}, base)).status_code == 204
    assert await rules_of(client, ident, cid, base) == EMPTY  # empty rules, but set
    r = await write(client, ident, "POST", cid, {}, base)
    assert r.json()["errorCode"] == "SPEND_RULE_ALREADY_SET"


async def test_a_blocked_card_takes_rules_and_a_removed_one_has_none(client, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    cid = card["id"]
    assert (await act(client, ident, cid, "block")).status_code == 204
    assert (await write(client, ident, "POST", cid, RULES)).status_code == 204
    r = await write(client, ident, "PATCH", cid, {"allowAtm": True})
    assert r.status_code == 204
    assert (await rules_of(client, ident, cid))["allowAtm"] is True
    assert (await act(client, ident, cid, "remove")).status_code == 204
    # Exactly the observed answer for a removed card; its rules are gone and take no writes:
    # it refuses as the card refuses any change, not as a card without rules (404).
    assert await rules_of(client, ident, cid) == EMPTY
    for method, body in (("POST", RULES), ("PATCH", RULES), ("PUT", RULES), ("DELETE", None)):
        r = await write(client, ident, method, cid, body)
        assert r.status_code == 409, (method, r.text)
        assert r.json()["errorCode"] == "INSTRUMENT_DESTROYED", (method, r.text)
    assert await rules_of(client, ident, cid) == EMPTY


@pytest.mark.parametrize("base", BASES)
async def test_an_expired_card_refuses_rule_writes_as_destroyed(client, programme, base):
    p = await programme()
    ident = await verified(client, p, base=base)
    cid = (await debit_card(client, ident, base))["id"]
    assert (await write(client, ident, "POST", cid, {"allowAtm": False}, base)).status_code == 204
    r = await client.post(f"/simulate/api/cards/{cid}/expire", headers={"programme-key": p.api_key})
    assert r.status_code == 204, r.text
    for method, body in (("PATCH", RULES), ("PUT", {}), ("DELETE", None), ("POST", {})):
        r = await write(client, ident, method, cid, body, base)
        assert (r.status_code, r.json().get("errorCode")) == (409, "INSTRUMENT_DESTROYED"), r.text


@pytest.mark.parametrize("base", BASES)
async def test_rules_that_contradict_each_other_are_refused(client, programme, base):
    """A minimum above the maximum, a category, merchant id or country both allowed and
    blocked: 409 SPEND_RULE_INVALID (decision 0073), on every write, nothing stored. A bound
    of 0 is no bound, so a minimum above a maximum of 0 is no contradiction."""
    p = await programme()
    ident = await verified(client, p, base=base)
    cid = (await debit_card(client, ident, base))["id"]
    contradictions: list[dict[str, Any]] = [
        {"minTransactionAmount": 500, "maxTransactionAmount": 100},
        {"allowedMerchantCategories": ["5411", "5812"], "blockedMerchantCategories": ["5812"]},
        {"allowedMerchantIds": ["m-1"], "blockedMerchantIds": ["m-1", "m-2"]},
        {"allowedMerchantCountries": ["MT"], "blockedMerchantCountries": ["MT"]},
    ]
    for body in contradictions:
        for method in ("POST", "PUT"):
            r = await write(client, ident, method, cid, body, base)
            assert r.status_code == 409, (method, body, r.text)
            assert r.json()["errorCode"] == "SPEND_RULE_INVALID", r.text
    assert await rules_of(client, ident, cid, base) == EMPTY
    fine = {"minTransactionAmount": 500, "maxTransactionAmount": 0, "allowedMerchantIds": ["m-1"]}
    assert (await write(client, ident, "POST", cid, fine, base)).status_code == 204
    # PATCH is checked against the rules it would leave.
    for body in (
        {"maxTransactionAmount": 100},
        {"blockedMerchantIds": ["m-1"]},
    ):
        r = await write(client, ident, "PATCH", cid, body, base)
        assert r.status_code == 409 and r.json()["errorCode"] == "SPEND_RULE_INVALID", r.text
    assert await rules_of(client, ident, cid, base) == all_levels(fine)
    r = await write(client, ident, "PATCH", cid, {"maxTransactionAmount": 500}, base)
    assert r.status_code == 204, r.text


@pytest.mark.parametrize("base", BASES)
async def test_unknown_keys_are_400_and_wipe_nothing(client, programme, base):
    p = await programme()
    ident = await verified(client, p, base=base)
    cid = (await debit_card(client, ident, base))["id"]
    assert (await write(client, ident, "POST", cid, RULES, base)).status_code == 204
    for body in (
        {"foo": 1},
        {"allowAtm": True, "allowATM": False},
        {"cardLevelSpendRules": RULES},
        {"spendLimit": [{**limit(100), "startTimestamp": 1}]},
        {"spendLimit": [{"value": {"currency": "GBP", "amount": 1, "x": 1}, "interval": "DAILY"}]},
    ):
        for method in ("PUT", "PATCH", "POST"):
            r = await write(client, ident, method, cid, body, base)
            assert r.status_code == 400, (method, body, r.text)
            assert r.json()["syntaxErrors"]["invalidFields"][0]["error"] == "NOT_IN", r.text
    assert await rules_of(client, ident, cid, base) == all_levels(RULES)


async def test_spend_limit_conflicts(client, programme):
    p = await programme()
    ident = await verified(client, p)
    prepaid = (await create(client, ident))["id"]
    debit = (await debit_card(client, ident))["id"]
    cases = [
        (prepaid, [limit(100, currency="EUR")], "SPEND_LIMIT_NOT_SUPPORTED_FOR_PREPAID_MODE_CARD"),
        (debit, [limit(100, currency="EUR")], "SPEND_LIMIT_CURRENCY_DIFFERENT_FROM_CARD_CURRENCY"),
        (debit, [limit(100, currency="ABC")], "SPEND_LIMIT_CURRENCY_DIFFERENT_FROM_CARD_CURRENCY"),
        (debit, [limit(100), limit(200)], "SPEND_LIMIT_DUPLICATE_INTERVAL"),
        (debit, [limit(-100)], "SPEND_LIMIT_AMOUNT_INVALID"),
    ]
    for cid, limits, code in cases:
        for method in ("POST", "PUT"):
            r = await write(client, ident, method, cid, {"spendLimit": limits})
            assert r.status_code == 409, (method, limits, r.text)
            assert r.json()["errorCode"] == code, (method, limits, r.text)
    # Nothing was stored; the same conflicts on PATCH once rules exist.
    assert await rules_of(client, ident, debit) == EMPTY
    assert await rules_of(client, ident, prepaid) == EMPTY
    for cid in (prepaid, debit):
        assert (await write(client, ident, "POST", cid, {"allowAtm": False})).status_code == 204
    for cid, limits, code in cases:
        r = await write(client, ident, "PATCH", cid, {"spendLimit": limits})
        assert r.status_code == 409 and r.json()["errorCode"] == code, (limits, r.text)
    assert await rules_of(client, ident, debit) == all_levels({"allowAtm": False})
    # A prepaid card takes every rule but limits; a limit of 0 is accepted.
    assert (await write(client, ident, "PATCH", prepaid, RULES)).status_code == 204
    r = await write(client, ident, "PATCH", debit, {"spendLimit": [limit(0)]})
    assert r.status_code == 204, r.text
    assert (await rules_of(client, ident, debit))["spendLimit"] == [limit(0)]


async def test_bad_bodies_are_400(client, programme):
    p = await programme()
    ident = await verified(client, p)
    cid = (await debit_card(client, ident))["id"]
    bad: list[dict[str, Any]] = [
        {"spendLimit": [{"value": {"currency": "GBP", "amount": 1}, "interval": ""}]},
        {"spendLimit": [{"value": {"currency": "GBP", "amount": 1}, "interval": "UNKNOWN"}]},
        {"spendLimit": [{"value": {"currency": "GBP", "amount": 1}, "interval": None}]},
        {"spendLimit": [{"value": {"currency": "GBP", "amount": 1}}]},
        {"spendLimit": [{"value": None, "interval": "DAILY"}]},
        {"spendLimit": [limit(1, currency="")]},
        {"spendLimit": [limit(1, currency="GBPS")]},
        {"spendLimit": [{"value": {"currency": "GBP", "amount": "1"}, "interval": "DAILY"}]},
        {"maxTransactionAmount": -1},
        {"minTransactionAmount": -1},
        {"allowedMerchantCountries": ["MLT"]},
        {"allowedMerchantCountries": ["M"]},
        {"blockedMerchantCountries": ["123"]},
        {"blockedMerchantCountries": ["mt"]},
        {"allowedMerchantCategories": [str(n) for n in range(51)]},
        {"allowedMerchantCategories": "5411"},
        {"allowAtm": "yes"},
    ]
    for method in ("POST", "PUT"):
        for body in bad:
            r = await write(client, ident, method, cid, body)
            assert r.status_code == 400, (method, body, r.status_code, r.text)
            assert r.json().get("syntaxErrors"), r.text
    assert await rules_of(client, ident, cid) == EMPTY
    assert (await write(client, ident, "POST", cid, {})).status_code == 204
    for body in bad:
        r = await write(client, ident, "PATCH", cid, body)
        assert r.status_code == 400, (body, r.text)
    r = await write(client, ident, "PATCH", cid, {"maxTransactionAmount": -1})
    assert "maxTransactionAmount" in r.text
    assert await rules_of(client, ident, cid) == EMPTY


async def test_writes_are_idempotent_per_card(client, programme):
    p = await programme()
    ident = await verified(client, p)
    cid = (await debit_card(client, ident))["id"]
    other = (await debit_card(client, ident))["id"]
    body = {"allowAtm": False}
    for _ in range(2):
        r = await write(client, ident, "POST", cid, body, **{"idempotency-ref": "rules-1"})
        assert r.status_code == 204, r.text
    # The same ref with another body is refused; on another card it is another call.
    r = await write(
        client, ident, "POST", cid, {"allowAtm": True}, **{"idempotency-ref": "rules-1"}
    )
    assert r.status_code == 400, r.text
    r = await write(client, ident, "POST", other, body, **{"idempotency-ref": "rules-1"})
    assert r.status_code == 204, r.text
    # A first call refused with a 409 stores nothing: a corrected retry with its ref succeeds.
    r = await write(
        client, ident, "PATCH", cid, {"spendLimit": [limit(-1)]}, **{"idempotency-ref": "fix"}
    )
    assert r.status_code == 409, r.text
    r = await write(
        client, ident, "PATCH", cid, {"spendLimit": [limit(10)]}, **{"idempotency-ref": "fix"}
    )
    assert r.status_code == 204, r.text
    assert await rules_of(client, ident, cid) == all_levels(
        {"allowAtm": False, "spendLimit": [limit(10)]}
    )


async def test_refused_callers(client, programme):
    p = await programme()
    other_p = await programme()
    owner = await verified(client, p)
    intruder = await verified(client, p, "consumers")
    outsider = await verified(client, other_p)
    unverified = await sign_up(client, p, "corporates")
    cid = (await debit_card(client, owner))["id"]
    assert (await write(client, owner, "POST", cid, RULES)).status_code == 204
    ops: list[tuple[str, dict[str, Any] | None]] = [
        ("GET", None),
        ("POST", {"allowAtm": True}),
        ("PATCH", {"allowAtm": True}),
        ("PUT", {"allowAtm": True}),
        ("DELETE", None),
    ]
    token = owner.headers["Authorization"]
    refusals = [
        ({}, 400),
        ({"Authorization": token}, 400),
        ({"api-key": "not-a-key", "Authorization": token}, 401),
        ({"api-key": p.api_key}, 401),
        ({"api-key": p.api_key, "Authorization": "Bearer garbage.token.here"}, 401),
        ({"api-key": other_p.api_key, "Authorization": token}, 403),
    ]
    wrong = []
    for base in BASES:
        for method, body in ops:
            for headers, status in refusals:
                r = await client.request(method, url(cid, base), headers=headers, json=body)
                if r.status_code != status:
                    wrong.append(f"{method} {base} {sorted(headers)}: {r.status_code}")
            for who in (intruder, outsider, unverified):
                r = await client.request(method, url(cid, base), headers=who.headers, json=body)
                if r.status_code != 404:
                    wrong.append(f"{who.email} {method} {base}: {r.status_code}")
        r = await client.get(url("1", base), headers=owner.headers)
        if r.status_code != 404:
            wrong.append(f"unknown card {base}: {r.status_code}")
    assert not wrong, "\n".join(wrong)
    # The card's rules are unchanged.
    assert await rules_of(client, owner, cid) == all_levels(RULES)


async def test_no_spend_rules_on_3_1_0(client, programme):
    p = await programme()
    ident = await verified(client, p)
    cid = (await create(client, ident))["id"]
    for method in ("GET", "POST", "PATCH", "PUT", "DELETE"):
        r = await client.request(method, url(cid, "/3.1.0/multi"), headers=ident.headers, json={})
        assert r.status_code == 404, (method, r.text)
    doc = (await client.get("/3.1.0/multi/openapi.json")).json()
    assert not [path for path in doc["paths"] if "spend_rules" in path]
    doc = (await client.get("/multi/openapi.json")).json()
    operation = doc["paths"]["/managed_cards/{id}/spend_rules"]
    assert set(operation) >= {"get", "post", "patch", "put", "delete"}
    assert operation["put"]["deprecated"] is True
    assert "SPEND_RULE_ALREADY_SET" in str(operation["post"]["responses"]["409"])


async def test_spend_rules_need_no_step_up(client, programme, admin_headers):
    p = await programme()
    ident = await verified(client, p)
    cid = (await debit_card(client, ident))["id"]
    await enrol_sms(client, ident.headers)
    r = await client.patch(
        f"/portal/api/programmes/{p.id}/settings",
        headers=admin_headers,
        json={"stepUpRequired": True},
    )
    assert r.status_code == 200
    # The card itself now needs a stepped-up session; its rules do not (D28).
    assert (
        await client.get(f"{LATEST}/managed_cards/{cid}", headers=ident.headers)
    ).status_code == 403
    for method, body, status in (
        ("POST", RULES, 204),
        ("GET", None, 200),
        ("PATCH", {"allowAtm": True}, 204),
        ("PUT", RULES, 200),
        ("DELETE", None, 204),
    ):
        r = await write(client, ident, method, cid, body)
        assert r.status_code == status, (method, r.text)
