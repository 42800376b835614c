"""Managed cards, black-box over HTTP (cards.md §2, §3.2 to §3.7; decisions D18 to D24, D28):
create (prepaid and debit), list with every filter, get, update, block, unblock, remove, on
`/multi` and `/3.29.1/multi` (3.1.0 has none), each documented 400 and 409, each refused caller;
and the card number, which no table, answer or log line holds in clear."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from jsonschema_rs import Draft202012Validator
from sqlalchemy import select

from multibank.kernel.db import Base
from multibank.models import load_all
from tests.api.test_stepup_accounts import enrol_sms
from tests.factories import Identity, open_account, otp_step_up, sign_up, verified

LATEST = "/multi"
V3291 = "/3.29.1/multi"
BASES = [LATEST, V3291]
SIM = "/simulate/api"
TOKEN = r"^[A-Za-z0-9]{24}$"


def profile(ident: Identity, mode: str = "PREPAID_MODE") -> str:
    who = "corporate" if ident.kind == "corporates" else "consumer"
    kind = "Prepaid" if mode == "PREPAID_MODE" else "Debit"
    return ident.p.profiles[f"{who}{kind}ManagedCard"]


def card_body(ident: Identity, mode: str = "PREPAID_MODE", **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "profileId": profile(ident, mode),
        "friendlyName": "Travel",
        "nameOnCard": "Ada Lovelace",
        "cardholderMobileNumber": "+35699123456",
        "billingAddress": {
            "addressLine1": "1 Analytical Street",
            "city": "Valletta",
            "postCode": "VLT 1000",
            "country": "MT",
        },
        "mode": mode,
    }
    if mode == "PREPAID_MODE":
        body["currency"] = "EUR"
    body.update(over)
    return {k: v for k, v in body.items() if v is not None}


async def create(
    client: httpx.AsyncClient, ident: Identity, base: str = LATEST, **over: Any
) -> dict[str, Any]:
    r = await client.post(
        f"{base}/managed_cards", headers=ident.headers, json=card_body(ident, **over)
    )
    assert r.status_code == 200, r.text
    card: dict[str, Any] = r.json()
    return card


async def debit_card(
    client: httpx.AsyncClient, ident: Identity, base: str = LATEST, **over: Any
) -> dict[str, Any]:
    account = await open_account(client, ident, "GBP", base)
    return await create(
        client, ident, base, mode="DEBIT_MODE", parentManagedAccountId=account["id"], **over
    )


async def get(
    client: httpx.AsyncClient, ident: Identity, card_id: str, base: str = LATEST
) -> dict[str, Any]:
    r = await client.get(f"{base}/managed_cards/{card_id}", headers=ident.headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def act(
    client: httpx.AsyncClient, ident: Identity, card_id: str, action: str, base: str = LATEST
) -> httpx.Response:
    return await client.post(f"{base}/managed_cards/{card_id}/{action}", headers=ident.headers)


async def listed(
    client: httpx.AsyncClient, ident: Identity, params: list[tuple[str, Any]], base: str = LATEST
) -> list[str]:
    r = await client.get(f"{base}/managed_cards", headers=ident.headers, params=params)
    assert r.status_code == 200, (params, r.text)
    body = r.json()
    assert body["responseCount"] == len(body["cards"])
    return [c["id"] for c in body["cards"]]


def luhn_ok(number: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(number)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


@pytest.mark.parametrize("base", BASES)
async def test_a_prepaid_card_is_created_read_and_listed(client, programme, base):
    p = await programme()
    ident = await verified(client, p, "corporates", base)
    card = await create(client, ident, base, tag="trip-1")
    assert card["mode"] == "PREPAID_MODE"
    assert card["type"] == "VIRTUAL" and card["cardBrand"] == "MASTERCARD"
    assert card["state"] == {"state": "ACTIVE"}
    assert card["balances"] == {"availableBalance": 0, "actualBalance": 0}
    assert card["currency"] == "EUR" and card["tag"] == "trip-1"
    assert card["cardNumberFirstSix"] == "555555" and len(card["cardNumberLastFour"]) == 4
    for field, length in (("cardNumber", 16), ("cvv", 3)):  # the description's maxLength (D21a)
        value = card[field]["value"]
        assert len(value) == length and value.isalnum() and not value.isdigit(), card
    assert card["cardLevelClassification"] == "CORPORATE"
    assert card["expiryPeriodMonths"] == 36 and card["renewalType"] == "NO_RENEW"
    start, expiry = card["startMmyy"], card["expiryMmyy"]
    assert expiry == start[:2] + f"{(int(start[2:]) + 3) % 100:02d}"
    assert card["digitalWallets"] == {"walletsEnabled": False, "pushProvisioningEnabled": False}
    assert card["profileId"] == profile(ident) and card["nameOnCard"] == "Ada Lovelace"
    assert "parentManagedAccountId" not in card and "availableToSpend" not in card
    # Reads give the same card, tokens included (the same card, field and version).
    assert await get(client, ident, card["id"], base) == card
    assert await listed(client, ident, [], base) == [card["id"]]


async def test_a_debit_card_spends_its_parent_account(client, programme):
    p = await programme()
    ident = await verified(client, p, "consumers")
    account = await open_account(client, ident, "GBP")
    card = await create(
        client, ident, mode="DEBIT_MODE", parentManagedAccountId=account["id"], currency="EUR"
    )
    # The card takes the account's currency; the prepaid field is ignored.
    assert card["currency"] == "GBP" and card["mode"] == "DEBIT_MODE"
    assert card["parentManagedAccountId"] == account["id"]
    assert card["availableToSpend"] == [
        {"value": {"currency": "GBP", "amount": 0}, "interval": "ALWAYS"}
    ]
    assert "balances" not in card
    assert card["cardLevelClassification"] == "CONSUMER"


async def test_create_is_idempotent_and_extensions_are_echoed(client, programme):
    p = await programme()
    ident = await verified(client, p)
    headers = {**ident.headers, "idempotency-ref": "card-1"}
    body = card_body(ident, renewalType="RENEW", nameOnCardLine2="")
    first = await client.post(f"{LATEST}/managed_cards", headers=headers, json=body)
    again = await client.post(f"{LATEST}/managed_cards", headers=headers, json=body)
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert first.json()["renewalType"] == "AUTO_RENEW"
    assert "nameOnCardLine2" not in first.json()  # empty: no second line
    assert len(await listed(client, ident, [])) == 1
    # A first call refused with a 409 stores nothing: the same ref then creates.
    headers["idempotency-ref"] = "card-2"
    r = await client.post(
        f"{LATEST}/managed_cards", headers=headers, json={**body, "profileId": "1"}
    )
    assert r.status_code == 409 and r.json()["errorCode"] == "PROFILE_NOT_FOUND"
    r = await client.post(f"{LATEST}/managed_cards", headers=headers, json=body)
    assert r.status_code == 200, r.text
    assert len(await listed(client, ident, [])) == 2


async def test_create_refuses_bad_bodies(client, programme):
    p = await programme()
    ident = await verified(client, p)
    account = await open_account(client, ident)
    bad = [
        {"profileId": None},
        {"profileId": ""},
        {"friendlyName": ""},
        {"friendlyName": "x" * 51},
        {"nameOnCard": ""},
        {"nameOnCard": "x" * 28},
        {"nameOnCard": "Ada 🙂"},
        {"nameOnCardLine2": "x" * 28},
        {"cardholderMobileNumber": "35699123456"},
        {"cardholderMobileNumber": "+3"},
        {"billingAddress": None},
        {"billingAddress": {"addressLine1": "x", "city": "V", "postCode": "1", "country": "mt"}},
        {"billingAddress": {"addressLine1": "", "city": "V", "postCode": "1", "country": "MT"}},
        {"mode": None},
        {"mode": "UNKNOWN"},
        {"currency": None},
        {"currency": "EU"},
        {"currency": "EURO"},
        {"currency": None, "parentManagedAccountId": account["id"]},
        {"tag": "not a tag!"},
        {"authForwardingDefaultTimeoutDecision": "MAYBE"},
    ]
    for over in bad:
        body = {**card_body(ident), **over}
        body = {k: v for k, v in body.items() if v is not None}
        r = await client.post(f"{LATEST}/managed_cards", headers=ident.headers, json=body)
        assert r.status_code == 400, (over, r.status_code, r.text)
    for over in ({"currency": "EUR"}, {"parentManagedAccountId": ""}, {}):
        body = card_body(ident, "DEBIT_MODE", **over)
        r = await client.post(f"{LATEST}/managed_cards", headers=ident.headers, json=body)
        assert r.status_code == 400, (over, r.text)
    # Nothing was created.
    assert await listed(client, ident, []) == []
    # Accepted: emoji in the friendly name, accents on the card, only the required fields.
    await create(client, ident, friendlyName="Trip 🙂", nameOnCard="José O'Brien-Ñ")


@pytest.mark.parametrize("base", BASES)
async def test_the_field_a_mode_needs_is_required_by_name(client, programme, base):
    """A prepaid card without `currency`, a debit card without `parentManagedAccountId` (absent
    or null): a 400 that names the field with REQUIRED, as any other missing field."""
    p = await programme()
    ident = await verified(client, p, base=base)
    account = await open_account(client, ident, "GBP", base)
    for mode, field, over in (
        ("PREPAID_MODE", "currency", {"parentManagedAccountId": account["id"]}),
        ("PREPAID_MODE", "currency", {"currency": None}),
        ("DEBIT_MODE", "parentManagedAccountId", {"currency": "GBP"}),
        ("DEBIT_MODE", "parentManagedAccountId", {"parentManagedAccountId": None}),
    ):
        body = {k: v for k, v in card_body(ident, mode).items() if k not in _MODE_FIELDS}
        body.update(over)
        r = await client.post(f"{base}/managed_cards", headers=ident.headers, json=body)
        assert r.status_code == 400, (mode, over, r.text)
        assert r.json()["syntaxErrors"]["invalidFields"] == [
            {"fieldName": field, "error": "REQUIRED", "params": []}
        ], r.text
        assert r.json()["message"] == f"request.{field}: must not be null"
    # With another field wrong too, both are named.
    body = {k: v for k, v in card_body(ident).items() if k not in _MODE_FIELDS}
    body["friendlyName"] = ""
    r = await client.post(f"{base}/managed_cards", headers=ident.headers, json=body)
    names = [f["fieldName"] for f in r.json()["syntaxErrors"]["invalidFields"]]
    assert r.status_code == 400 and sorted(names) == ["currency", "friendlyName"], r.text
    # An unknown mode names the mode only.
    body = {**card_body(ident), "mode": "UNKNOWN"}
    r = await client.post(f"{base}/managed_cards", headers=ident.headers, json=body)
    assert [f["fieldName"] for f in r.json()["syntaxErrors"]["invalidFields"]] == ["mode"]
    assert await listed(client, ident, [], base) == []


_MODE_FIELDS = ("currency", "parentManagedAccountId")


@pytest.mark.parametrize("base", BASES)
async def test_the_description_says_what_each_mode_needs_and_the_states(client, programme, base):
    """The OpenAPI description declares what the server checks and answers: the field each
    mode requires, the values of `state` and its reasons, and that a reason goes with its own
    state only; a client validating against it agrees with the server."""
    doc = (await client.get(f"{base}/openapi.json")).json()
    components = {"components": doc["components"]}
    body = doc["paths"]["/managed_cards"]["post"]["requestBody"]["content"]["application/json"]
    request = Draft202012Validator({**body["schema"], **components})
    p = await programme()
    ident = await verified(client, p, base=base)
    account = await open_account(client, ident, "GBP", base)
    prepaid = card_body(ident)
    debit = card_body(ident, "DEBIT_MODE", parentManagedAccountId=account["id"])
    assert request.is_valid(prepaid) and request.is_valid(debit)
    for mode_body, field in ((prepaid, "currency"), (debit, "parentManagedAccountId")):
        assert not request.is_valid({k: v for k, v in mode_body.items() if k != field})
        assert not request.is_valid({**mode_body, field: None})
    card = {"$ref": "#/components/schemas/ManagedCardRead", **components}
    state = Draft202012Validator({"$ref": "#/components/schemas/CardState", **components})
    for good in (
        {"state": "ACTIVE"},
        {"state": "BLOCKED", "blockedReason": "LOST"},
        {"state": "DESTROYED", "destroyedReason": "EXPIRED"},
    ):
        assert state.is_valid(good), good
    for bad in (
        {"state": "GONE"},
        {"state": "ACTIVE", "blockedReason": "USER"},
        {"state": "DESTROYED", "blockedReason": "USER"},
        {"state": "BLOCKED", "blockedReason": "STOLEN"},
        {"state": "BLOCKED", "destroyedReason": "USER"},
    ):
        assert not state.is_valid(bad), bad
    # The answers themselves: a debit card without its parent would not be one.
    read = await debit_card(client, ident, base)
    validator = Draft202012Validator(card)
    assert validator.is_valid(read)
    assert not validator.is_valid({k: v for k, v in read.items() if k != "availableToSpend"})
    prepaid_read = await create(client, ident, base)
    assert validator.is_valid(prepaid_read)
    assert not validator.is_valid({k: v for k, v in prepaid_read.items() if k != "balances"})
    parameters = doc["paths"]["/managed_cards"]["get"]["parameters"]
    described = {q["name"]: q.get("description", "") for q in parameters}
    assert "state=BLOCKED" in described["state.blockedReason"]
    assert "state=DESTROYED" in described["state.destroyedReason"]


async def conflict(client: httpx.AsyncClient, ident: Identity, body: dict[str, Any]) -> str:
    r = await client.post(f"{LATEST}/managed_cards", headers=ident.headers, json=body)
    assert r.status_code == 409, r.text
    code: str = r.json()["errorCode"]
    return code


async def test_create_conflicts(client, programme, admin_headers, container):
    p = await programme()
    other_p = await programme()
    corp = await verified(client, p, "corporates")
    cons = await verified(client, p, "consumers")
    other = await verified(client, p, "corporates")
    account = await open_account(client, corp, "EUR")
    blocked = await open_account(client, corp, "EUR")
    assert (
        await client.post(f"{LATEST}/managed_accounts/{blocked['id']}/block", headers=corp.headers)
    ).status_code == 204
    theirs = await open_account(client, other, "EUR")
    cases = [
        (card_body(corp, profileId="1"), "PROFILE_NOT_FOUND"),
        (card_body(corp, profileId=p.profiles["corporateManagedAccount"]), "PROFILE_NOT_FOUND"),
        (
            card_body(corp, profileId=other_p.profiles["corporatePrepaidManagedCard"]),
            "PROFILE_NOT_FOUND",
        ),
        (
            card_body(corp, profileId=profile(corp, "DEBIT_MODE")),
            "PAYMENT_MODEL_CONSTRAINTS_VIOLATED",
        ),
        (card_body(corp, profileId=profile(cons)), "PAYMENT_MODEL_CONSTRAINTS_VIOLATED"),
        (card_body(corp, currency="ABC"), "CURRENCY_NOT_SUPPORTED_BY_PROFILE"),
        (card_body(corp, digitalWallets={"walletsEnabled": True}), "WALLETS_NOT_ENABLED"),
        (card_body(corp, digitalWallets={"pushProvisioningEnabled": True}), "WALLETS_NOT_ENABLED"),
        (
            card_body(corp, authForwardingDefaultTimeoutDecision="APPROVE"),
            "AUTH_FORWARDING_NOT_ENABLED",
        ),
        (
            card_body(corp, "DEBIT_MODE", parentManagedAccountId="1"),
            "PARENT_MANAGED_ACCOUNT_NOT_FOUND",
        ),
        (
            card_body(corp, "DEBIT_MODE", parentManagedAccountId=theirs["id"]),
            "PARENT_MANAGED_ACCOUNT_NOT_FOUND",
        ),
        (
            card_body(corp, "DEBIT_MODE", parentManagedAccountId=blocked["id"]),
            "PARENT_MANAGED_ACCOUNT_NOT_ACTIVE",
        ),
    ]
    for body, code in cases:
        assert await conflict(client, corp, body) == code, body
    # Wallets switched off but sent as off: accepted.
    card = await create(client, corp, digitalWallets={"walletsEnabled": False})
    assert card["digitalWallets"]["walletsEnabled"] is False
    await create(client, corp, mode="DEBIT_MODE", parentManagedAccountId=account["id"])
    # An inactive profile.
    r = await client.patch(
        f"/portal/api/programmes/{p.id}/profiles/{profile(corp)}",
        headers=admin_headers,
        json={"active": False},
    )
    assert r.status_code == 200, r.text
    assert await conflict(client, corp, card_body(corp)) == "PROFILE_INACTIVE"
    # A live programme has no card issuer in this build (D29).
    live = await programme(mode="live")
    live_ident = await sign_up(client, live, "corporates", verify_email=False)
    from sqlalchemy import update

    from multibank.identities.models import Identity as IdentityRow

    async with container.db.transaction() as session:
        await session.execute(
            update(IdentityRow)
            .where(IdentityRow.id == int(live_ident.id))
            .values(dd_status="APPROVED")
        )
    assert (
        await conflict(client, live_ident, card_body(live_ident))
        == "PROVIDER_NOT_SUPPORTED_BY_PROFILE"
    )


async def test_an_unverified_or_level_1_owner_is_refused(client, programme):
    p = await programme()
    unverified = await sign_up(client, p, "corporates")
    assert (
        await conflict(client, unverified, card_body(unverified)) == "OWNER_IDENTITY_NOT_VERIFIED"
    )
    assert await listed(client, unverified, []) == []
    level1 = await sign_up(client, p, "consumers")
    r = await client.post(
        f"{LATEST}/consumers/kyc", headers=level1.headers, json={"kycLevel": "KYC_LEVEL_1"}
    )
    assert r.status_code == 200, r.text
    r = await client.post(
        f"{SIM}/consumers/{level1.id}/verify", headers={"programme-key": p.api_key}
    )
    assert r.status_code == 204, r.text
    account = await open_account(client, level1, "EUR")
    body = card_body(level1, "DEBIT_MODE", parentManagedAccountId=account["id"])
    assert await conflict(client, level1, body) == "IDENTITY_KYC_LEVEL_STEPUP_REQUIRED"
    await create(client, level1)  # prepaid: allowed at level 1


async def test_every_filter_of_the_list(client, programme):
    p = await programme()
    ident = await verified(client, p, "corporates")
    prepaid = await create(client, ident, tag="alpha", friendlyName="One")
    debit = await debit_card(client, ident, tag="beta", friendlyName="Two")
    blocked = await create(client, ident, currency="USD", friendlyName="Three")
    removed = await create(client, ident, friendlyName="Four")
    assert (await act(client, ident, blocked["id"], "block")).status_code == 204
    assert (await act(client, ident, removed["id"], "remove")).status_code == 204
    everything = [removed["id"], blocked["id"], debit["id"], prepaid["id"]]  # newest first
    assert await listed(client, ident, []) == everything
    cases: list[tuple[list[tuple[str, Any]], list[str]]] = [
        ([("profileId", profile(ident))], [removed["id"], blocked["id"], prepaid["id"]]),
        ([("profileId", "1")], []),
        ([("friendlyName", "Two")], [debit["id"]]),
        ([("state", "ACTIVE")], [debit["id"], prepaid["id"]]),
        ([("state", "BLOCKED"), ("state", "DESTROYED")], [removed["id"], blocked["id"]]),
        # As the official demo app sends them (decision 0053): joined by commas, or empty.
        ([("state", "BLOCKED,DESTROYED")], [removed["id"], blocked["id"]]),
        ([("state", "")], everything),
        ([("state", "BLOCKED"), ("state.blockedReason", "USER")], [blocked["id"]]),
        ([("state", "BLOCKED"), ("state.blockedReason", "SYSTEM")], []),
        (
            [("state", "BLOCKED"), ("state", "DESTROYED"), ("state.destroyedReason", "STOLEN")],
            [blocked["id"]],
        ),
        ([("state", "DESTROYED"), ("state.destroyedReason", "USER")], [removed["id"]]),
        ([("currency", "USD")], [blocked["id"]]),
        ([("currency", "GBP")], [debit["id"]]),
        ([("type", "VIRTUAL")], everything),
        ([("type", "PHYSICAL")], []),
        ([("externalHandle", prepaid["externalHandle"])], [prepaid["id"]]),
        ([("cardNumberFirstSix", "555555")], everything),
        ([("cardNumberLastFour", prepaid["cardNumberLastFour"])], [prepaid["id"]]),
        (
            [
                ("createdFrom", debit["creationTimestamp"]),
                ("createdTo", blocked["creationTimestamp"]),
            ],
            [blocked["id"], debit["id"]],
        ),
        ([("createdFrom", removed["creationTimestamp"] + 1)], []),
        ([("mode", "DEBIT_MODE")], [debit["id"]]),
        ([("mode", "PREPAID_MODE"), ("tag", "alpha")], [prepaid["id"]]),
        ([("parentManagedAccountId", debit["parentManagedAccountId"])], [debit["id"]]),
        ([("manufacturingState", "REQUESTED")], []),
    ]
    for params, expected in cases:
        got = await listed(client, ident, params)
        if ("cardNumberLastFour", prepaid["cardNumberLastFour"]) in params:
            assert prepaid["id"] in got, (params, got)
        elif ("createdFrom", debit["creationTimestamp"]) in params:
            assert set(expected) <= set(got), (params, got)
        else:
            assert got == expected, (params, got)
    r = await client.get(
        f"{LATEST}/managed_cards", headers=ident.headers, params={"limit": 1, "offset": 1}
    )
    assert r.json()["count"] == 4 and r.json()["responseCount"] == 1
    assert r.json()["cards"][0]["id"] == blocked["id"]
    for params in (
        [("state.blockedReason", "USER")],
        [("state", "ACTIVE"), ("state.blockedReason", "USER")],
        [("state", "BLOCKED"), ("state.destroyedReason", "USER")],
        [("state", "GONE")],
        [("state", "ACTIVE,GONE")],
        [("state", "ACTIVE,,BLOCKED")],
        [("limit", 0)],
        [("limit", 101)],
        [("offset", -1)],
        [("currency", "eur")],
        [("mode", "CREDIT_MODE")],
        [("type", "PLASTIC")],
        [("cardNumberFirstSix", "5555")],
        [("manufacturingState", "LOST")],
    ):
        r = await client.get(f"{LATEST}/managed_cards", headers=ident.headers, params=params)
        assert r.status_code == 400, (params, r.text)


async def test_update_changes_only_what_is_sent(client, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident, tag="old")
    url = f"{LATEST}/managed_cards/{card['id']}"
    address = {
        "addressLine1": "2 Engine Road",
        "city": "London",
        "postCode": "N1 1AA",
        "country": "GB",
    }
    r = await client.patch(
        url,
        headers=ident.headers,
        json={
            "friendlyName": "Renamed",
            "nameOnCard": "A Lovelace",
            "nameOnCardLine2": "Engines Ltd",
            "cardholderMobileNumber": "+447700900123",
            "billingAddress": address,
            "renewalType": "AUTO_RENEW",
        },
    )
    assert r.status_code == 200, r.text
    updated = r.json()
    assert updated["friendlyName"] == "Renamed" and updated["tag"] == "old"
    assert updated["nameOnCard"] == "A Lovelace" and updated["nameOnCardLine2"] == "Engines Ltd"
    assert updated["cardholderMobileNumber"] == "+447700900123"
    assert updated["billingAddress"] == address and updated["renewalType"] == "AUTO_RENEW"
    assert updated["cardNumber"] == card["cardNumber"] and updated["cvv"] == card["cvv"]
    assert await get(client, ident, card["id"]) == updated
    # nameOnCard null or empty changes nothing; the same call twice is fine.
    for body in ({"nameOnCard": None}, {"nameOnCard": ""}, {"nameOnCard": ""}):
        r = await client.patch(url, headers=ident.headers, json=body)
        assert r.status_code == 200 and r.json()["nameOnCard"] == "A Lovelace"
    for body in (
        {"friendlyName": ""},
        {"cardholderMobileNumber": ""},
        {"nameOnCard": "x" * 28},
        {"billingAddress": {"city": "London"}},
        {"deliveryAddress": {"name": "Ada"}},
    ):
        r = await client.patch(url, headers=ident.headers, json=body)
        assert r.status_code == 400, (body, r.text)
    delivery = {
        "name": "Ada",
        "surname": "Lovelace",
        "addressLine1": "1 Road",
        "city": "London",
        "postCode": "N1",
        "country": "GB",
    }
    for body, code in (
        ({"deliveryAddress": delivery}, "INSTRUMENT_NOT_PHYSICAL"),
        ({"deliveryMethod": "COURIER"}, "INSTRUMENT_NOT_PHYSICAL"),
        ({"digitalWallets": {"walletsEnabled": True}}, "WALLETS_NOT_ENABLED"),
        ({"authForwardingDefaultTimeoutDecision": "DECLINE"}, "AUTH_FORWARDING_NOT_ENABLED"),
    ):
        r = await client.patch(url, headers=ident.headers, json=body)
        assert r.status_code == 409 and r.json()["errorCode"] == code, (body, r.text)
    assert await get(client, ident, card["id"]) == updated
    assert (await act(client, ident, card["id"], "remove")).status_code == 204
    r = await client.patch(url, headers=ident.headers, json={"friendlyName": "Late"})
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_DESTROYED"


async def test_block_unblock_and_remove(client, programme, container):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    cid = card["id"]

    async def code(action: str) -> str:
        r = await act(client, ident, cid, action)
        assert r.status_code == 409, (action, r.text)
        return str(r.json()["errorCode"])

    assert await code("unblock") == "INSTRUMENT_NOT_BLOCKED"
    assert (await act(client, ident, cid, "block")).status_code == 204
    assert (await get(client, ident, cid))["state"] == {"state": "BLOCKED", "blockedReason": "USER"}
    assert await code("block") == "INSTRUMENT_ALREADY_BLOCKED"
    assert (await act(client, ident, cid, "unblock")).status_code == 204
    assert (await get(client, ident, cid))["state"] == {"state": "ACTIVE"}
    assert await code("unblock") == "INSTRUMENT_NOT_BLOCKED"
    # A blocked card can be removed; a removed card is gone for good.
    assert (await act(client, ident, cid, "block")).status_code == 204
    assert (await act(client, ident, cid, "remove")).status_code == 204
    assert (await get(client, ident, cid))["state"] == {
        "state": "DESTROYED",
        "destroyedReason": "USER",
    }
    assert await code("remove") == "INSTRUMENT_ALREADY_REMOVED"
    assert await code("block") == "INSTRUMENT_DESTROYED"
    assert await code("unblock") == "INSTRUMENT_DESTROYED"
    # A debit card is removed whatever its parent holds.
    debit = await debit_card(client, ident)
    assert (await act(client, ident, debit["id"], "remove")).status_code == 204


async def test_a_system_block_is_not_the_users_to_lift(client, programme, container):
    from sqlalchemy import update

    from multibank.cards.models import ManagedCard

    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    async with container.db.transaction() as session:
        await session.execute(
            update(ManagedCard)
            .where(ManagedCard.id == int(card["id"]))
            .values(state="BLOCKED", blocked_reason="SYSTEM")
        )
    r = await act(client, ident, card["id"], "unblock")
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_INACTIVE"
    r = await act(client, ident, card["id"], "block")
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_ALREADY_BLOCKED"
    for reason, state in (("LOST", "BLOCKED"), ("STOLEN", "DESTROYED")):
        column = "blocked_reason" if state == "BLOCKED" else "destroyed_reason"
        async with container.db.transaction() as session:
            await session.execute(
                update(ManagedCard)
                .where(ManagedCard.id == int(card["id"]))
                .values(
                    {
                        "state": state,
                        "blocked_reason": None,
                        "destroyed_reason": None,
                        column: reason,
                    }
                )
            )
        for action in ("block", "unblock"):
            r = await act(client, ident, card["id"], action)
            assert r.status_code == 409, r.text
            assert r.json()["errorCode"] == "INSTRUMENT_MARKED_LOST_STOLEN"


async def test_a_prepaid_card_holding_money_is_not_removed(client, programme, container):
    """Money reaches a card through transfers (later in issue 34); here the card's ledger
    account is credited as a deposit would be, through the ledger's own posting."""
    from multibank.ledger import service as ledger
    from multibank.ledger.models import SETTLEMENT

    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    async with container.db.transaction() as session:
        settlement = await ledger.system_account(session, int(p.id), SETTLEMENT, "EUR", 0)
        await ledger.post(
            session,
            programme_id=int(p.id),
            type_="DEPOSIT",
            legs=[
                ledger.Leg(int(card["id"]), "EUR", 500, 500),
                ledger.Leg(settlement, "EUR", -500, -500, guarded=False),
            ],
            now_ms=container.clock.now_ms(),
        )
    got = await get(client, ident, card["id"])
    assert got["balances"] == {"availableBalance": 500, "actualBalance": 500}
    assert (await act(client, ident, card["id"], "block")).status_code == 204
    r = await act(client, ident, card["id"], "remove")
    assert r.status_code == 409 and r.json()["errorCode"] == "BALANCE_NOT_ZERO"
    assert (await get(client, ident, card["id"]))["state"]["state"] == "BLOCKED"


async def test_refused_callers(client, programme):
    p = await programme()
    other_p = await programme()
    owner = await verified(client, p)
    intruder = await verified(client, p)
    outsider = await verified(client, other_p)
    card = await create(client, owner)
    cid = card["id"]
    ops: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", f"/managed_cards/{cid}", None),
        ("PATCH", f"/managed_cards/{cid}", {"friendlyName": "Mine now"}),
        ("POST", f"/managed_cards/{cid}/block", None),
        ("POST", f"/managed_cards/{cid}/unblock", None),
        ("POST", f"/managed_cards/{cid}/remove", None),
    ]
    every = [("GET", "/managed_cards", None), ("POST", "/managed_cards", card_body(owner)), *ops]
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
        for method, path, body in every:
            for headers, status in refusals:
                r = await client.request(method, f"{base}{path}", headers=headers, json=body)
                if r.status_code != status:
                    wrong.append(f"{method} {base}{path} {sorted(headers)}: {r.status_code}")
        for who in (intruder, outsider):
            for method, path, body in ops:
                r = await client.request(method, f"{base}{path}", headers=who.headers, json=body)
                if r.status_code != 404:
                    wrong.append(f"{who.email} {method} {base}{path}: {r.status_code}")
            assert await listed(client, who, [], base) == []
    assert not wrong, "\n".join(wrong)
    assert await get(client, owner, cid) == card
    # Unknown ids are 404 too.
    r = await client.get(f"{LATEST}/managed_cards/1", headers=owner.headers)
    assert r.status_code == 404


async def test_no_card_operation_on_3_1_0(client, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    for method, path in (
        ("GET", "/managed_cards"),
        ("POST", "/managed_cards"),
        ("GET", f"/managed_cards/{card['id']}"),
        ("PATCH", f"/managed_cards/{card['id']}"),
        ("POST", f"/managed_cards/{card['id']}/block"),
        ("POST", f"/managed_cards/{card['id']}/unblock"),
        ("POST", f"/managed_cards/{card['id']}/remove"),
    ):
        r = await client.request(method, f"/3.1.0/multi{path}", headers=ident.headers, json={})
        assert r.status_code == 404, (method, path, r.text)
    doc = (await client.get("/3.1.0/multi/openapi.json")).json()
    assert not [path for path in doc["paths"] if "managed_cards" in path]
    doc = (await client.get("/multi/openapi.json")).json()
    assert "/managed_cards/{id}/remove" in doc["paths"]


async def test_card_operations_need_step_up_where_the_interface_says(
    client, programme, admin_headers
):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    await enrol_sms(client, ident.headers)
    r = await client.patch(
        f"/portal/api/programmes/{p.id}/settings",
        headers=admin_headers,
        json={"stepUpRequired": True},
    )
    assert r.status_code == 200
    url = f"{LATEST}/managed_cards"
    calls = [
        ("GET", url, None),
        ("POST", url, card_body(ident)),
        ("GET", f"{url}/{card['id']}", None),
        ("PATCH", f"{url}/{card['id']}", {"friendlyName": "Renamed"}),
    ]
    for method, target, body in calls:
        r = await client.request(method, target, headers=ident.headers, json=body)
        assert r.status_code == 403, (method, target, r.text)
        assert r.json()["errorCode"] == "STEP_UP_REQUIRED"
    # Block and unblock need none (D28).
    assert (await act(client, ident, card["id"], "block")).status_code == 204
    assert (await act(client, ident, card["id"], "unblock")).status_code == 204
    await otp_step_up(client, ident.headers)
    for method, target, body in calls:
        r = await client.request(method, target, headers=ident.headers, json=body)
        assert r.status_code == 200, (method, target, r.text)


async def test_the_card_number_is_in_clear_nowhere(client, programme, container, caplog):
    """The full number is only in the encrypted column: no text column of any table, no answer
    of the card's journey and no log line holds it (D20)."""
    caplog.set_level(logging.DEBUG)
    p = await programme()
    ident = await verified(client, p)
    answers: list[str] = []

    async def call(method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        r = await client.request(method, f"{LATEST}{path}", headers=ident.headers, json=body)
        answers.append(r.text)
        return r

    card = (await call("POST", "/managed_cards", card_body(ident))).json()
    debit = await debit_card(client, ident)
    for path in (f"/managed_cards/{card['id']}", "/managed_cards", f"/managed_cards/{debit['id']}"):
        assert (await call("GET", path)).status_code == 200
    await call("PATCH", f"/managed_cards/{card['id']}", {"friendlyName": "Renamed"})
    await call("POST", f"/managed_cards/{card['id']}/block")
    await call("POST", f"/managed_cards/{card['id']}/unblock")
    await call("GET", "/managed_cards", None)
    await call("POST", f"/managed_cards/{card['id']}/remove")

    from multibank.cards.models import ManagedCard

    keys = container.card_keys()
    numbers = []
    async with container.db.transaction() as session:
        for cid in (card["id"], debit["id"]):
            stored = (
                await session.execute(
                    select(ManagedCard.number_encrypted).where(ManagedCard.id == int(cid))
                )
            ).scalar_one()
            numbers.append(keys.decrypt(stored, int(cid)))
        assert all(len(n) == 16 and n.isdigit() and luhn_ok(n) for n in numbers)
        assert numbers[0][:6] == card["cardNumberFirstSix"] == "555555"
        assert numbers[0][-4:] == card["cardNumberLastFour"]
        load_all()
        found = []
        for table in Base.metadata.sorted_tables:
            for row in (await session.execute(select(table))).mappings():
                for column, value in row.items():
                    if any(n in str(value) for n in numbers):
                        found.append(f"{table.name}.{column}")
    assert found == []
    assert not [a for a in answers if any(n in a for n in numbers)]
    logged = [rec.getMessage() + str(rec.__dict__) for rec in caplog.records]
    assert logged and not [line for line in logged if any(n in line for n in numbers)]
    # The stored value reads back only with the card's own id (authenticated).
    from multibank.kernel.carddata import CardDataError

    async with container.db.transaction() as session:
        stored = (
            await session.execute(
                select(ManagedCard.number_encrypted).where(ManagedCard.id == int(card["id"]))
            )
        ).scalar_one()
    with pytest.raises(CardDataError):
        keys.decrypt(stored, int(debit["id"]))


async def test_an_account_with_a_debit_card_is_not_removed_on_3_1_0(client, programme):
    """D18: the one card rule of 3.1.0, whichever base URL made the card."""
    p = await programme()
    ident = await verified(client, p)
    account = await open_account(client, ident, "GBP", "/3.1.0/multi")
    card = await create(client, ident, mode="DEBIT_MODE", parentManagedAccountId=account["id"])
    url = f"/3.1.0/multi/managed_accounts/{account['id']}/remove"
    r = await client.post(url, headers=ident.headers)
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_HAS_LINKED_CARDS"
    assert (await act(client, ident, card["id"], "block")).status_code == 204
    r = await client.post(url, headers=ident.headers)
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_HAS_LINKED_CARDS"
    assert (await act(client, ident, card["id"], "remove")).status_code == 204
    assert (await client.post(url, headers=ident.headers)).status_code == 204
