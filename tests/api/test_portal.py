"""Black-box tests of the operator API under /portal/api (D4): every route, its refusals, and the
effect of operator actions on the public API (API keys)."""

from __future__ import annotations

import re
import secrets
from typing import Any

import httpx
import pytest

from tests.factories import (
    DEFAULT_MOVEMENT_FEES,
    MOVEMENT_KINDS,
    PAYMENT_SETTINGS,
    PROFILE_KINDS,
)

PORTAL = "/portal/api/programmes"
STRONG_PASSWORD = {"password": {"value": "Abcdef1!"}}
D4_KEYS = {
    "programmeId",
    "apiKey",
    "profiles",
    "currencies",
    "feeTypes",
    "movementFees",
    "cardFees",
}
DEFAULT_FEE_TYPES = {
    "ADMIN_FEE": {
        "DEFAULT": {"EUR": 100, "GBP": 100, "USD": 100},
        "PREMIUM": {"EUR": 50, "GBP": 50, "USD": 50},
    }
}
DEFAULT_SETTINGS = {
    "stepUpRequired": False,
    "failedLoginLimit": 5,
    "ibanAllocationDelaySeconds": 2,
    "passwordExpiryDays": None,
    **PAYMENT_SETTINGS,
}
DIGITS = re.compile(r"^[0-9]{1,19}$")
INT64_OVERFLOW = str(2**63)  # 19 digits: passes the path pattern, is no id at all
UNKNOWN_ID = "1"  # time-ordered ids are never this small


@pytest.fixture(autouse=True)
def _every_response_has_request_ref(client: httpx.AsyncClient) -> None:
    """Checks the `request-ref` header on every response any test of this module receives."""

    async def check(response: httpx.Response) -> None:
        ref = response.headers.get("request-ref")
        assert ref, f"{response.request.method} {response.request.url.path}: no request-ref"

    client.event_hooks["response"].append(check)


def unique_name() -> str:
    return f"t{secrets.token_hex(6)}"


async def create_programme(
    client: httpx.AsyncClient, admin_headers: dict[str, str], **body: Any
) -> dict[str, Any]:
    body.setdefault("name", unique_name())
    r = await client.post(PORTAL, headers=admin_headers, json=body)
    assert r.status_code == 201, r.text
    return r.json()


async def get_json(client: httpx.AsyncClient, admin_headers: dict[str, str], path: str) -> Any:
    r = await client.get(f"{PORTAL}{path}", headers=admin_headers)
    assert r.status_code == 200, r.text
    return r.json()


async def key_status(client: httpx.AsyncClient, key: str) -> int:
    """What the public API answers to a request with this api-key (204 = a valid key)."""
    r = await client.post(
        "/multi/passwords/validate", headers={"api-key": key}, json=STRONG_PASSWORD
    )
    if r.status_code == 401:
        assert r.content == b""
    return r.status_code


async def snapshot(client: httpx.AsyncClient, admin_headers: dict[str, str], pid: str) -> dict:
    """Everything the operator API shows of one programme."""
    return {
        part: await get_json(client, admin_headers, f"/{pid}{part}")
        for part in ("", "/summary", "/api_keys", "/profiles", "/fee_types")
    }


def assert_syntax_error(r: httpx.Response, field: str, error: str | None = None) -> None:
    assert r.status_code == 400, r.text
    body = r.json()
    assert set(body) == {"message", "syntaxErrors"}, body
    assert isinstance(body["message"], str) and body["message"]
    fields = body["syntaxErrors"]["invalidFields"]
    for f in fields:
        assert set(f) == {"fieldName", "error", "params"}, f
    matching = [f for f in fields if f["fieldName"] == field]
    assert matching, f"no invalid field {field!r} in {fields}"
    if error is not None:
        assert matching[0]["error"] == error, matching


def assert_not_found(r: httpx.Response) -> None:
    assert r.status_code == 404, r.text
    body = r.json()
    assert set(body) == {"code", "message"}, body
    assert body["code"] == "NOT_FOUND"
    assert isinstance(body["message"], str) and body["message"]


# Programmes


async def test_create_programme_answers_exactly_the_d4_shape(client, admin_headers):
    r = await client.post(PORTAL, headers=admin_headers, json={"name": unique_name()})
    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == D4_KEYS
    assert DIGITS.match(body["programmeId"])
    assert isinstance(body["apiKey"], str) and body["apiKey"].startswith("mb_sbx_")
    assert set(body["profiles"]) == set(PROFILE_KINDS)
    ids = list(body["profiles"].values())
    assert all(isinstance(i, str) and DIGITS.match(i) for i in ids)
    assert len(set(ids)) == len(PROFILE_KINDS)
    assert body["programmeId"] not in ids
    assert body["currencies"] == ["EUR", "GBP", "USD"]
    assert body["feeTypes"] == DEFAULT_FEE_TYPES
    # The key shown once is a working key of the public API.
    assert await key_status(client, body["apiKey"]) == 204


async def test_create_programme_with_settings_and_currencies(client, admin_headers):
    name = unique_name()
    body = await create_programme(
        client,
        admin_headers,
        name=name,
        stepUpRequired=True,
        failedLoginLimit=3,
        ibanAllocationDelaySeconds=0,
        passwordExpiryDays=90,
        currencies=["USD", "GBP", "GBP"],
    )
    assert body["currencies"] == ["GBP", "USD"]
    assert body["feeTypes"] == {
        "ADMIN_FEE": {"DEFAULT": {"GBP": 100, "USD": 100}, "PREMIUM": {"GBP": 50, "USD": 50}}
    }
    got = await get_json(client, admin_headers, f"/{body['programmeId']}")
    assert got["name"] == name
    assert got["settings"] == {
        "stepUpRequired": True,
        "failedLoginLimit": 3,
        "ibanAllocationDelaySeconds": 0,
        "passwordExpiryDays": 90,
        **PAYMENT_SETTINGS,
    }
    profiles = await get_json(client, admin_headers, f"/{body['programmeId']}/profiles")
    # Every profile serves the programme's currencies; the linked-account one those of them a
    # linked account may be in (D39: EUR and GBP).
    assert [p["currencies"] for p in profiles] == [
        ["GBP"] if p["kind"] == "linkedAccounts" else ["GBP", "USD"] for p in profiles
    ]
    assert sum(p["kind"] == "linkedAccounts" for p in profiles) == 1


async def test_get_programme(client, admin_headers):
    name = unique_name()
    created = await create_programme(client, admin_headers, name=name)
    r = await client.get(f"{PORTAL}/{created['programmeId']}", headers=admin_headers)
    assert r.status_code == 200, r.text
    got = r.json()
    assert set(got) == {
        "programmeId",
        "name",
        "mode",
        "settings",
        "profiles",
        "currencies",
        "feeTypes",
        "movementFees",
        "cardFees",
        "creationTimestamp",
    }
    assert got["programmeId"] == created["programmeId"]
    assert got["name"] == name
    assert got["mode"] == "sandbox"
    assert got["settings"] == DEFAULT_SETTINGS
    assert got["profiles"] == created["profiles"]
    assert got["currencies"] == created["currencies"]
    assert got["feeTypes"] == created["feeTypes"]
    assert isinstance(got["creationTimestamp"], int) and got["creationTimestamp"] > 0
    assert created["apiKey"] not in r.text


async def test_list_programmes_shows_every_programme_without_keys(client, admin_headers):
    first = await create_programme(client, admin_headers)
    second = await create_programme(client, admin_headers)
    r = await client.get(PORTAL, headers=admin_headers)
    assert r.status_code == 200, r.text
    listed = {p["programmeId"]: p for p in r.json()}
    for created in (first, second):
        item = listed[created["programmeId"]]
        assert "apiKey" not in item
        assert item["profiles"] == created["profiles"]
        assert item["settings"] == DEFAULT_SETTINGS
        assert created["apiKey"] not in r.text
    ids = [p["programmeId"] for p in r.json()]
    assert ids.index(first["programmeId"]) < ids.index(second["programmeId"])


async def test_summary_repeats_the_create_answer_for_a_sandbox_programme(client, admin_headers):
    created = await create_programme(client, admin_headers)
    r = await client.get(f"{PORTAL}/{created['programmeId']}/summary", headers=admin_headers)
    assert r.status_code == 200, r.text
    assert r.json() == created


async def test_live_programme_key_is_shown_once(client, admin_headers):
    created = await create_programme(client, admin_headers, mode="live")
    assert created["apiKey"].startswith("mb_live_")
    assert await key_status(client, created["apiKey"]) == 204
    summary = await get_json(client, admin_headers, f"/{created['programmeId']}/summary")
    assert summary["apiKey"] is None
    assert {k: v for k, v in summary.items() if k != "apiKey"} == {
        k: v for k, v in created.items() if k != "apiKey"
    }
    got = await get_json(client, admin_headers, f"/{created['programmeId']}")
    assert got["mode"] == "live"


async def test_duplicate_programme_name_is_refused(client, admin_headers):
    name = unique_name()
    first = await create_programme(client, admin_headers, name=name)
    r = await client.post(PORTAL, headers=admin_headers, json={"name": name, "mode": "live"})
    assert r.status_code == 409, r.text
    assert r.json() == {"errorCode": "PROGRAMME_NAME_NOT_UNIQUE"}
    listed = await get_json(client, admin_headers, "")
    assert [p["programmeId"] for p in listed if p["name"] == name] == [first["programmeId"]]
    assert (await get_json(client, admin_headers, f"/{first['programmeId']}"))["mode"] == "sandbox"


@pytest.mark.parametrize(
    ("body", "field", "error"),
    [
        ({"name": "bad name"}, "name", "REGEX"),
        ({"name": ""}, "name", "REGEX"),
        ({"name": "x" * 101}, "name", "REGEX"),
        ({"name": "bad/name"}, "name", "REGEX"),
        ({}, "name", "REQUIRED"),
        ({"currencies": ["XYZ"]}, "currencies", "REGEX"),
        ({"currencies": ["EUR", "ABC"]}, "currencies", "REGEX"),
        ({"currencies": ["eur"]}, "currencies[0]", "REGEX"),
        ({"currencies": []}, "currencies", "SIZE"),
        ({"colour": "blue"}, "colour", "NOT_IN"),
        ({"mode": "test"}, "mode", "IN"),
        ({"failedLoginLimit": 0}, "failedLoginLimit", "AT_LEAST"),
        ({"ibanAllocationDelaySeconds": 86401}, "ibanAllocationDelaySeconds", "AT_MOST"),
    ],
)
async def test_create_programme_refuses_invalid_bodies(client, admin_headers, body, field, error):
    name = unique_name()
    if field != "name":
        body = {"name": name, **body}
    r = await client.post(PORTAL, headers=admin_headers, json=body)
    assert_syntax_error(r, field, error)
    listed = await get_json(client, admin_headers, "")
    assert all(p["name"] not in (name, body.get("name")) for p in listed)


async def test_create_programme_refuses_malformed_json(client, admin_headers):
    r = await client.post(
        PORTAL,
        headers={**admin_headers, "content-type": "application/json"},
        content=b'{"name": "x"',
    )
    assert r.status_code == 400, r.text
    assert r.json() == {"message": "Malformed JSON request body."}


# Settings


async def test_settings_patch_changes_only_the_fields_sent(client, admin_headers):
    pid = (await create_programme(client, admin_headers))["programmeId"]
    url = f"{PORTAL}/{pid}/settings"

    r = await client.patch(url, headers=admin_headers, json={"failedLoginLimit": 7})
    assert r.status_code == 200, r.text
    expected = {**DEFAULT_SETTINGS, "failedLoginLimit": 7}
    assert r.json() == expected
    assert (await get_json(client, admin_headers, f"/{pid}"))["settings"] == expected

    r = await client.patch(
        url, headers=admin_headers, json={"stepUpRequired": True, "passwordExpiryDays": 30}
    )
    assert r.status_code == 200, r.text
    expected = {**expected, "stepUpRequired": True, "passwordExpiryDays": 30}
    assert r.json() == expected
    assert (await get_json(client, admin_headers, f"/{pid}"))["settings"] == expected

    r = await client.patch(url, headers=admin_headers, json={"ibanAllocationDelaySeconds": 0})
    assert r.status_code == 200, r.text
    expected = {**expected, "ibanAllocationDelaySeconds": 0}
    assert r.json() == expected

    # An empty patch changes nothing; a null passwordExpiryDays removes the expiry.
    r = await client.patch(url, headers=admin_headers, json={})
    assert r.status_code == 200, r.text
    assert r.json() == expected
    r = await client.patch(url, headers=admin_headers, json={"passwordExpiryDays": None})
    assert r.status_code == 200, r.text
    expected = {**expected, "passwordExpiryDays": None}
    assert r.json() == expected
    assert (await get_json(client, admin_headers, f"/{pid}"))["settings"] == expected


@pytest.mark.parametrize(
    ("body", "field", "error"),
    [
        ({"failedLoginLimit": 0}, "failedLoginLimit", "AT_LEAST"),
        ({"failedLoginLimit": 101}, "failedLoginLimit", "AT_MOST"),
        ({"ibanAllocationDelaySeconds": -1}, "ibanAllocationDelaySeconds", "AT_LEAST"),
        ({"ibanAllocationDelaySeconds": 86401}, "ibanAllocationDelaySeconds", "AT_MOST"),
        ({"passwordExpiryDays": 0}, "passwordExpiryDays", "AT_LEAST"),
        ({"passwordExpiryDays": 3651}, "passwordExpiryDays", "AT_MOST"),
        ({"stepUpRequired": "sometimes"}, "stepUpRequired", None),
        ({"name": "renamed"}, "name", "NOT_IN"),
        # One valid and one invalid field: nothing at all changes.
        (
            {"failedLoginLimit": 9, "ibanAllocationDelaySeconds": -5},
            "ibanAllocationDelaySeconds",
            None,
        ),
    ],
)
async def test_settings_patch_refuses_out_of_range_values(
    client, admin_headers, body, field, error
):
    pid = (await create_programme(client, admin_headers))["programmeId"]
    r = await client.patch(f"{PORTAL}/{pid}/settings", headers=admin_headers, json=body)
    assert_syntax_error(r, field, error)
    got = await get_json(client, admin_headers, f"/{pid}")
    assert got["settings"] == DEFAULT_SETTINGS
    assert got["name"] != "renamed"


# API keys


async def test_api_key_create_shows_the_plaintext_once_and_it_works(client, admin_headers):
    created = await create_programme(client, admin_headers)
    pid = created["programmeId"]
    r = await client.post(f"{PORTAL}/{pid}/api_keys", headers=admin_headers, json={"label": "ci"})
    assert r.status_code == 201, r.text
    key = r.json()
    assert set(key) == {"id", "prefix", "label", "creationTimestamp", "revokedTimestamp", "apiKey"}
    assert DIGITS.match(key["id"])
    assert key["label"] == "ci"
    assert key["revokedTimestamp"] is None
    assert isinstance(key["creationTimestamp"], int)
    assert key["apiKey"].startswith("mb_sbx_")
    assert key["apiKey"] != created["apiKey"]
    assert key["prefix"] == key["apiKey"][: len(key["prefix"])]
    assert len(key["prefix"]) < len(key["apiKey"]) // 2

    assert await key_status(client, key["apiKey"]) == 204
    assert await key_status(client, created["apiKey"]) == 204

    r = await client.get(f"{PORTAL}/{pid}/api_keys", headers=admin_headers)
    assert r.status_code == 200, r.text
    keys = r.json()
    assert [k["label"] for k in keys] == ["initial", "ci"]
    assert keys[1] == {k: v for k, v in key.items() if k != "apiKey"}
    for k in keys:
        assert set(k) == {"id", "prefix", "label", "creationTimestamp", "revokedTimestamp"}
    assert key["apiKey"] not in r.text
    assert created["apiKey"] not in r.text


async def test_api_key_create_without_label(client, admin_headers):
    pid = (await create_programme(client, admin_headers))["programmeId"]
    r = await client.post(f"{PORTAL}/{pid}/api_keys", headers=admin_headers, json={})
    assert r.status_code == 201, r.text
    assert r.json()["label"] is None
    assert await key_status(client, r.json()["apiKey"]) == 204


@pytest.mark.parametrize(
    ("body", "field", "error"),
    [({"label": "x" * 101}, "label", "SIZE"), ({"scope": "all"}, "scope", "NOT_IN")],
)
async def test_api_key_create_refuses_invalid_bodies(client, admin_headers, body, field, error):
    pid = (await create_programme(client, admin_headers))["programmeId"]
    r = await client.post(f"{PORTAL}/{pid}/api_keys", headers=admin_headers, json=body)
    assert_syntax_error(r, field, error)
    assert len(await get_json(client, admin_headers, f"/{pid}/api_keys")) == 1


async def test_unknown_api_key_is_refused_by_the_public_api(client):
    assert await key_status(client, "mb_sbx_" + secrets.token_urlsafe(32)) == 401


async def test_revoked_key_answers_401_at_once(client, admin_headers):
    created = await create_programme(client, admin_headers)
    pid = created["programmeId"]
    r = await client.post(f"{PORTAL}/{pid}/api_keys", headers=admin_headers, json={"label": "x"})
    assert r.status_code == 201, r.text
    new = r.json()
    assert await key_status(client, new["apiKey"]) == 204

    r = await client.delete(f"{PORTAL}/{pid}/api_keys/{new['id']}", headers=admin_headers)
    assert r.status_code == 200, r.text
    revoked = r.json()
    assert revoked["id"] == new["id"]
    assert isinstance(revoked["revokedTimestamp"], int)
    assert revoked["revokedTimestamp"] >= new["creationTimestamp"]
    assert "apiKey" not in revoked

    assert await key_status(client, new["apiKey"]) == 401
    assert await key_status(client, created["apiKey"]) == 204
    keys = {k["id"]: k for k in await get_json(client, admin_headers, f"/{pid}/api_keys")}
    assert keys[new["id"]]["revokedTimestamp"] == revoked["revokedTimestamp"]

    # Revoking again changes nothing and the key stays refused.
    r = await client.delete(f"{PORTAL}/{pid}/api_keys/{new['id']}", headers=admin_headers)
    assert r.status_code == 200, r.text
    assert r.json() == revoked
    assert await key_status(client, new["apiKey"]) == 401


async def test_revoking_the_initial_key_hides_it_from_the_summary(client, admin_headers):
    created = await create_programme(client, admin_headers)
    pid = created["programmeId"]
    initial = (await get_json(client, admin_headers, f"/{pid}/api_keys"))[0]
    r = await client.delete(f"{PORTAL}/{pid}/api_keys/{initial['id']}", headers=admin_headers)
    assert r.status_code == 200, r.text
    assert await key_status(client, created["apiKey"]) == 401
    summary = await get_json(client, admin_headers, f"/{pid}/summary")
    assert summary["apiKey"] is None
    assert created["apiKey"] not in str(await snapshot(client, admin_headers, pid))


async def test_revoke_unknown_key_is_404(client, admin_headers):
    pid = (await create_programme(client, admin_headers))["programmeId"]
    for key_id in (UNKNOWN_ID, INT64_OVERFLOW):
        r = await client.delete(f"{PORTAL}/{pid}/api_keys/{key_id}", headers=admin_headers)
        assert_not_found(r)
    keys = await get_json(client, admin_headers, f"/{pid}/api_keys")
    assert [k["revokedTimestamp"] for k in keys] == [None]


# Profiles


async def test_list_profiles(client, admin_headers):
    created = await create_programme(client, admin_headers)
    r = await client.get(f"{PORTAL}/{created['programmeId']}/profiles", headers=admin_headers)
    assert r.status_code == 200, r.text
    profiles = r.json()
    assert {p["kind"]: p["id"] for p in profiles} == created["profiles"]
    for p in profiles:
        expected = {
            "id": created["profiles"][p["kind"]],
            "kind": p["kind"],
            # A linked account is in EUR or GBP (D39): the programme's currencies among them.
            "currencies": ["EUR", "GBP"]
            if p["kind"] == "linkedAccounts"
            else ["EUR", "GBP", "USD"],
            "active": True,
        }
        if p["kind"] in MOVEMENT_KINDS:  # D12: the payment profiles carry their fees
            expected["fees"] = DEFAULT_MOVEMENT_FEES[p["kind"]]
        if p["kind"] == "outgoingWireTransfers":  # D14: a return keeps the fee by default
            expected["returnFeeRefunded"] = False
        if p["kind"].endswith("ManagedCard"):  # D22: no profile-level spend rules yet
            expected["spendRules"] = {}
        assert p == expected


async def test_programme_summary_lists_movement_fees(client, admin_headers):
    created = await create_programme(client, admin_headers)
    assert created["movementFees"] == DEFAULT_MOVEMENT_FEES
    got = await get_json(client, admin_headers, f"/{created['programmeId']}")
    assert got["movementFees"] == DEFAULT_MOVEMENT_FEES


async def test_update_movement_fees_changes_only_the_currencies_named(client, admin_headers):
    created = await create_programme(client, admin_headers)
    pid, sends = created["programmeId"], created["profiles"]["sends"]
    r = await client.patch(
        f"{PORTAL}/{pid}/profiles/{sends}", headers=admin_headers, json={"fees": {"GBP": 25}}
    )
    assert r.status_code == 200, r.text
    assert r.json()["fees"] == {"EUR": 0, "GBP": 25, "USD": 0}
    r = await client.patch(
        f"{PORTAL}/{pid}/profiles/{sends}", headers=admin_headers, json={"fees": {"EUR": 7}}
    )
    assert r.json()["fees"] == {"EUR": 7, "GBP": 25, "USD": 0}
    summary = await get_json(client, admin_headers, f"/{pid}/summary")
    assert summary["movementFees"]["sends"] == {"EUR": 7, "GBP": 25, "USD": 0}
    # The other kinds keep theirs.
    assert summary["movementFees"]["transfers"] == DEFAULT_MOVEMENT_FEES["transfers"]
    assert (
        summary["movementFees"]["outgoingWireTransfers"]
        == DEFAULT_MOVEMENT_FEES["outgoingWireTransfers"]
    )


async def test_movement_fee_refusals_change_nothing(client, admin_headers):
    created = await create_programme(client, admin_headers)
    pid, profiles = created["programmeId"], created["profiles"]
    cases = [
        # Fees belong to payment profiles only.
        (profiles["corporate"], {"fees": {"EUR": 1}}, 409, "PROFILE_HAS_NO_FEES"),
        # The return-fee rule belongs to wire transfer profiles only.
        (profiles["sends"], {"returnFeeRefunded": True}, 409, "PROFILE_HAS_NO_RETURN_FEE"),
        # Only in the profile's own currencies (one it does not serve yet, in the same request).
        (profiles["transfers"], {"fees": {"CHF": 1}}, 409, "CURRENCY_NOT_SUPPORTED_BY_PROFILE"),
        (
            profiles["transfers"],
            {"currencies": ["EUR"], "fees": {"GBP": 1}},
            409,
            "CURRENCY_NOT_SUPPORTED_BY_PROFILE",
        ),
    ]
    for profile_id, body, status, code in cases:
        r = await client.patch(
            f"{PORTAL}/{pid}/profiles/{profile_id}", headers=admin_headers, json=body
        )
        assert r.status_code == status, (body, r.text)
        assert r.json()["errorCode"] == code
    for body, field in (
        ({"fees": {"EUR": -1}}, "fees.EUR"),
        ({"fees": {"EUR": "1"}}, "fees.EUR"),
        ({"fees": {"EUR": 2**53}}, "fees.EUR"),
        ({"fees": {"eur": 1}}, "fees.eur"),
    ):
        r = await client.patch(
            f"{PORTAL}/{pid}/profiles/{profiles['sends']}", headers=admin_headers, json=body
        )
        assert r.status_code == 400, (body, r.text)
        assert field.split(".")[0] in r.text
    summary = await get_json(client, admin_headers, f"/{pid}/summary")
    assert summary["movementFees"] == DEFAULT_MOVEMENT_FEES
    profiles_now = await get_json(client, admin_headers, f"/{pid}/profiles")
    assert {p["kind"]: p["currencies"] for p in profiles_now}["transfers"] == ["EUR", "GBP", "USD"]


async def test_create_payment_profile_with_fees(client, admin_headers):
    created = await create_programme(client, admin_headers)
    pid = created["programmeId"]
    r = await client.post(
        f"{PORTAL}/{pid}/profiles",
        headers=admin_headers,
        json={"kind": "outgoingWireTransfers", "currencies": ["EUR", "GBP"], "fees": {"EUR": 50}},
    )
    assert r.status_code == 201, r.text
    assert r.json()["fees"] == {"EUR": 50, "GBP": 0}
    r = await client.post(
        f"{PORTAL}/{pid}/profiles",
        headers=admin_headers,
        json={"kind": "consumer", "currencies": ["EUR"], "fees": {"EUR": 50}},
    )
    assert r.status_code == 409 and r.json()["errorCode"] == "PROFILE_HAS_NO_FEES"
    # The summary still names the first profile of each kind, and its fees.
    assert (await get_json(client, admin_headers, f"/{pid}/summary"))["movementFees"] == (
        DEFAULT_MOVEMENT_FEES
    )


async def test_movement_fees_need_the_admin_token(client, admin_headers):
    created = await create_programme(client, admin_headers)
    pid, sends = created["programmeId"], created["profiles"]["sends"]
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = await client.patch(
            f"{PORTAL}/{pid}/profiles/{sends}", headers=headers, json={"fees": {"EUR": 1}}
        )
        assert r.status_code == 401
    assert (await get_json(client, admin_headers, f"/{pid}/summary"))["movementFees"] == (
        DEFAULT_MOVEMENT_FEES
    )


async def test_create_profile(client, admin_headers):
    created = await create_programme(client, admin_headers)
    pid = created["programmeId"]
    r = await client.post(
        f"{PORTAL}/{pid}/profiles",
        headers=admin_headers,
        json={"kind": "corporate", "currencies": ["USD", "EUR", "USD"], "active": False},
    )
    assert r.status_code == 201, r.text
    profile = r.json()
    assert DIGITS.match(profile["id"])
    assert profile["id"] not in created["profiles"].values()
    assert profile == {
        "id": profile["id"],
        "kind": "corporate",
        "currencies": ["EUR", "USD"],
        "active": False,
    }
    profiles = await get_json(client, admin_headers, f"/{pid}/profiles")
    assert len(profiles) == len(PROFILE_KINDS) + 1  # and the one created here
    assert profile in profiles
    # The summary still names the first profile of each kind.
    assert (await get_json(client, admin_headers, f"/{pid}/summary"))["profiles"] == created[
        "profiles"
    ]

    r = await client.post(
        f"{PORTAL}/{pid}/profiles",
        headers=admin_headers,
        json={"kind": "consumerManagedAccount", "currencies": ["CHF"]},
    )
    assert r.status_code == 201, r.text
    assert r.json()["active"] is True
    assert r.json()["currencies"] == ["CHF"]


async def test_update_profile_changes_only_the_fields_sent(client, admin_headers):
    created = await create_programme(client, admin_headers)
    pid = created["programmeId"]
    prof = created["profiles"]["consumer"]
    url = f"{PORTAL}/{pid}/profiles/{prof}"

    r = await client.patch(url, headers=admin_headers, json={"currencies": ["GBP", "EUR"]})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "id": prof,
        "kind": "consumer",
        "currencies": ["EUR", "GBP"],
        "active": True,
    }

    r = await client.patch(url, headers=admin_headers, json={"active": False})
    assert r.status_code == 200, r.text
    expected = {"id": prof, "kind": "consumer", "currencies": ["EUR", "GBP"], "active": False}
    assert r.json() == expected
    profiles = {p["id"]: p for p in await get_json(client, admin_headers, f"/{pid}/profiles")}
    assert profiles[prof] == expected
    # The other profiles are untouched.
    others = [p for p in profiles.values() if p["id"] != prof]
    assert all(p["active"] for p in others)
    assert all(
        p["currencies"]
        == (["EUR", "GBP"] if p["kind"] == "linkedAccounts" else ["EUR", "GBP", "USD"])
        for p in others
    )

    r = await client.patch(url, headers=admin_headers, json={"active": True})
    assert r.status_code == 200, r.text
    assert r.json()["active"] is True


async def test_update_unknown_profile_is_404(client, admin_headers):
    created = await create_programme(client, admin_headers)
    pid = created["programmeId"]
    for profile_id in (UNKNOWN_ID, INT64_OVERFLOW, pid):
        r = await client.patch(
            f"{PORTAL}/{pid}/profiles/{profile_id}", headers=admin_headers, json={"active": False}
        )
        assert_not_found(r)
    profiles = await get_json(client, admin_headers, f"/{pid}/profiles")
    assert all(p["active"] for p in profiles)


@pytest.mark.parametrize(
    ("body", "field", "error"),
    [
        ({"kind": "business", "currencies": ["EUR"]}, "kind", "IN"),
        ({"currencies": ["EUR"]}, "kind", "REQUIRED"),
        ({"kind": "consumer"}, "currencies", "REQUIRED"),
        ({"kind": "consumer", "currencies": []}, "currencies", "SIZE"),
        ({"kind": "consumer", "currencies": ["XYZ"]}, "currencies", "REGEX"),
        ({"kind": "consumer", "currencies": ["EURO"]}, "currencies[0]", "REGEX"),
        ({"kind": "consumer", "currencies": ["EUR"], "tier": 1}, "tier", "NOT_IN"),
    ],
)
async def test_create_profile_refuses_invalid_bodies(client, admin_headers, body, field, error):
    pid = (await create_programme(client, admin_headers))["programmeId"]
    r = await client.post(f"{PORTAL}/{pid}/profiles", headers=admin_headers, json=body)
    assert_syntax_error(r, field, error)
    assert len(await get_json(client, admin_headers, f"/{pid}/profiles")) == len(PROFILE_KINDS)


@pytest.mark.parametrize(
    ("body", "field", "error"),
    [
        ({"currencies": []}, "currencies", "SIZE"),
        ({"currencies": ["EUR", "QQQ"]}, "currencies", "REGEX"),
        ({"active": False, "kind": "consumer"}, "kind", "NOT_IN"),
        ({"active": "perhaps"}, "active", None),
    ],
)
async def test_update_profile_refuses_invalid_bodies(client, admin_headers, body, field, error):
    created = await create_programme(client, admin_headers)
    pid = created["programmeId"]
    prof = created["profiles"]["corporate"]
    r = await client.patch(f"{PORTAL}/{pid}/profiles/{prof}", headers=admin_headers, json=body)
    assert_syntax_error(r, field, error)
    profiles = {p["id"]: p for p in await get_json(client, admin_headers, f"/{pid}/profiles")}
    assert profiles[prof] == {
        "id": prof,
        "kind": "corporate",
        "currencies": ["EUR", "GBP", "USD"],
        "active": True,
    }


# Fee types


async def test_list_fee_types(client, admin_headers):
    pid = (await create_programme(client, admin_headers))["programmeId"]
    r = await client.get(f"{PORTAL}/{pid}/fee_types", headers=admin_headers)
    assert r.status_code == 200, r.text
    assert r.json() == [{"name": "ADMIN_FEE", "amounts": DEFAULT_FEE_TYPES["ADMIN_FEE"]}]


async def test_create_fee_type(client, admin_headers):
    pid = (await create_programme(client, admin_headers))["programmeId"]
    fee = {"name": "CARD_FEE", "amounts": {"DEFAULT": {"EUR": 250, "GBP": 0}, "GOLD": {"EUR": 1}}}
    r = await client.post(f"{PORTAL}/{pid}/fee_types", headers=admin_headers, json=fee)
    assert r.status_code == 201, r.text
    assert r.json() == fee
    r = await client.post(
        f"{PORTAL}/{pid}/fee_types",
        headers=admin_headers,
        json={"name": "AAA_FEE", "amounts": {"DEFAULT": {"USD": 5}}},
    )
    assert r.status_code == 201, r.text
    listed = await get_json(client, admin_headers, f"/{pid}/fee_types")
    assert [f["name"] for f in listed] == ["AAA_FEE", "ADMIN_FEE", "CARD_FEE"]
    assert listed[2] == fee
    summary = await get_json(client, admin_headers, f"/{pid}/summary")
    assert summary["feeTypes"]["CARD_FEE"] == fee["amounts"]
    assert summary["feeTypes"]["ADMIN_FEE"] == DEFAULT_FEE_TYPES["ADMIN_FEE"]


async def test_duplicate_fee_type_is_refused(client, admin_headers):
    pid = (await create_programme(client, admin_headers))["programmeId"]
    r = await client.post(
        f"{PORTAL}/{pid}/fee_types",
        headers=admin_headers,
        json={"name": "ADMIN_FEE", "amounts": {"DEFAULT": {"EUR": 1}}},
    )
    assert r.status_code == 409, r.text
    assert r.json() == {"errorCode": "FEE_TYPE_ALREADY_EXISTS"}
    assert await get_json(client, admin_headers, f"/{pid}/fee_types") == [
        {"name": "ADMIN_FEE", "amounts": DEFAULT_FEE_TYPES["ADMIN_FEE"]}
    ]


async def test_same_fee_type_name_in_two_programmes(client, admin_headers):
    a = (await create_programme(client, admin_headers))["programmeId"]
    b = (await create_programme(client, admin_headers))["programmeId"]
    for pid, amount in ((a, 1), (b, 2)):
        r = await client.post(
            f"{PORTAL}/{pid}/fee_types",
            headers=admin_headers,
            json={"name": "X_FEE", "amounts": {"DEFAULT": {"EUR": amount}}},
        )
        assert r.status_code == 201, r.text
    fees_a = await get_json(client, admin_headers, f"/{a}/fee_types")
    fees_b = await get_json(client, admin_headers, f"/{b}/fee_types")
    assert fees_a[1] == {"name": "X_FEE", "amounts": {"DEFAULT": {"EUR": 1}}}
    assert fees_b[1] == {"name": "X_FEE", "amounts": {"DEFAULT": {"EUR": 2}}}


async def test_replace_fee_type(client, admin_headers):
    pid = (await create_programme(client, admin_headers))["programmeId"]
    amounts = {"DEFAULT": {"EUR": 7}, "VIP": {"EUR": 0, "USD": 3}}
    r = await client.put(
        f"{PORTAL}/{pid}/fee_types/ADMIN_FEE", headers=admin_headers, json={"amounts": amounts}
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"name": "ADMIN_FEE", "amounts": amounts}
    assert await get_json(client, admin_headers, f"/{pid}/fee_types") == [
        {"name": "ADMIN_FEE", "amounts": amounts}
    ]
    assert (await get_json(client, admin_headers, f"/{pid}/summary"))["feeTypes"] == {
        "ADMIN_FEE": amounts
    }


async def test_replace_unknown_fee_type_is_404(client, admin_headers):
    pid = (await create_programme(client, admin_headers))["programmeId"]
    r = await client.put(
        f"{PORTAL}/{pid}/fee_types/NO_SUCH_FEE",
        headers=admin_headers,
        json={"amounts": {"DEFAULT": {"EUR": 1}}},
    )
    assert_not_found(r)
    names = [f["name"] for f in await get_json(client, admin_headers, f"/{pid}/fee_types")]
    assert names == ["ADMIN_FEE"]


@pytest.mark.parametrize(
    ("body", "field", "error"),
    [
        ({"name": "F", "amounts": {"DEFAULT": {"XYZ": 1}}}, "amounts", "REGEX"),
        ({"name": "F", "amounts": {"DEFAULT": {"eur": 1}}}, "amounts.DEFAULT.eur.[key]", "REGEX"),
        ({"name": "F", "amounts": {"DEFAULT": {"EUR": -1}}}, "amounts.DEFAULT.EUR", "AT_LEAST"),
        ({"name": "F", "amounts": {}}, "amounts", "SIZE"),
        ({"name": "F"}, "amounts", "REQUIRED"),
        ({"name": "bad fee", "amounts": {"DEFAULT": {"EUR": 1}}}, "name", "REGEX"),
        ({"amounts": {"DEFAULT": {"EUR": 1}}}, "name", "REQUIRED"),
        ({"name": "F", "amounts": {"DEFAULT": {"EUR": 1}}, "x": 1}, "x", "NOT_IN"),
    ],
)
async def test_create_fee_type_refuses_invalid_bodies(client, admin_headers, body, field, error):
    pid = (await create_programme(client, admin_headers))["programmeId"]
    r = await client.post(f"{PORTAL}/{pid}/fee_types", headers=admin_headers, json=body)
    assert_syntax_error(r, field, error)
    names = [f["name"] for f in await get_json(client, admin_headers, f"/{pid}/fee_types")]
    assert names == ["ADMIN_FEE"]


@pytest.mark.parametrize(
    ("body", "field", "error"),
    [
        ({"amounts": {"DEFAULT": {"EUR": 1, "ZZZ": 1}}}, "amounts", "REGEX"),
        ({"amounts": {"DEFAULT": {"EUR": 2**63}}}, "amounts.DEFAULT.EUR", "AT_MOST"),
        ({"amounts": {}}, "amounts", "SIZE"),
        ({"name": "ADMIN_FEE", "amounts": {"DEFAULT": {"EUR": 1}}}, "name", "NOT_IN"),
    ],
)
async def test_replace_fee_type_refuses_invalid_bodies(client, admin_headers, body, field, error):
    pid = (await create_programme(client, admin_headers))["programmeId"]
    r = await client.put(f"{PORTAL}/{pid}/fee_types/ADMIN_FEE", headers=admin_headers, json=body)
    assert_syntax_error(r, field, error)
    assert await get_json(client, admin_headers, f"/{pid}/fee_types") == [
        {"name": "ADMIN_FEE", "amounts": DEFAULT_FEE_TYPES["ADMIN_FEE"]}
    ]


# Refusals on every route

# (method, path under /portal/api/programmes, a valid body); {pid}, {kid}, {prof} are filled in.
ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "", None),
    ("POST", "", {"name": "{name}"}),
    ("GET", "/{pid}", None),
    ("GET", "/{pid}/summary", None),
    ("PATCH", "/{pid}/settings", {"failedLoginLimit": 9, "stepUpRequired": True}),
    ("GET", "/{pid}/api_keys", None),
    ("POST", "/{pid}/api_keys", {"label": "sneaky"}),
    ("DELETE", "/{pid}/api_keys/{kid}", None),
    ("GET", "/{pid}/profiles", None),
    ("POST", "/{pid}/profiles", {"kind": "consumer", "currencies": ["EUR"]}),
    ("PATCH", "/{pid}/profiles/{prof}", {"active": False, "currencies": ["CHF"]}),
    ("GET", "/{pid}/fee_types", None),
    ("POST", "/{pid}/fee_types", {"name": "NEW_FEE", "amounts": {"DEFAULT": {"EUR": 1}}}),
    ("PUT", "/{pid}/fee_types/ADMIN_FEE", {"amounts": {"DEFAULT": {"EUR": 1}}}),
]
PROGRAMME_ROUTES = [r for r in ROUTES if "{pid}" in r[1]]


def _fill(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    return value


async def _send(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    ids: dict[str, str],
    headers: dict[str, str],
) -> httpx.Response:
    return await client.request(
        method, PORTAL + _fill(path, ids), headers=headers, json=_fill(body, ids)
    )


async def _ids_of(client, admin_headers, created: dict[str, Any], name: str) -> dict[str, str]:
    keys = await get_json(client, admin_headers, f"/{created['programmeId']}/api_keys")
    return {
        "pid": created["programmeId"],
        "kid": keys[0]["id"],
        "prof": created["profiles"]["corporate"],
        "name": name,
    }


def route_id(route: tuple[str, str, Any]) -> str:
    return f"{route[0]} {route[1] or '/'}"


BAD_AUTH = {
    "no Authorization": {},
    "wrong token": {"Authorization": "Bearer wrong-admin-token"},
    "empty bearer": {"Authorization": "Bearer "},
    "basic scheme": {"Authorization": "Basic dGVzdDp0ZXN0"},
}


@pytest.mark.parametrize("route", ROUTES, ids=route_id)
async def test_every_route_refuses_missing_or_wrong_admin_token(client, admin_headers, route):
    created = await create_programme(client, admin_headers)
    name = unique_name()
    ids = await _ids_of(client, admin_headers, created, name)
    before = await snapshot(client, admin_headers, created["programmeId"])
    method, path, body = route
    for label, headers in {
        **BAD_AUTH,
        # The programme's own API key is no admin credential, nor is a near miss of the token.
        "api-key": {"api-key": created["apiKey"]},
        "token with suffix": {"Authorization": admin_headers["Authorization"] + "x"},
    }.items():
        r = await _send(client, method, path, body, ids, headers)
        assert r.status_code == 401, f"{label}: {r.status_code} {r.text}"
        assert r.content == b"", label
    assert await snapshot(client, admin_headers, created["programmeId"]) == before
    assert all(p["name"] != name for p in await get_json(client, admin_headers, ""))
    assert await key_status(client, created["apiKey"]) == 204
    # The same request with the admin token succeeds, so the 401 was the token's doing.
    r = await _send(client, method, path, body, ids, admin_headers)
    assert r.status_code in (200, 201), r.text


@pytest.mark.parametrize("route", PROGRAMME_ROUTES, ids=route_id)
async def test_every_programme_route_answers_404_for_an_unknown_programme(
    client, admin_headers, route
):
    created = await create_programme(client, admin_headers)
    ids = await _ids_of(client, admin_headers, created, unique_name())
    before = await snapshot(client, admin_headers, created["programmeId"])
    method, path, body = route
    for unknown in (UNKNOWN_ID, INT64_OVERFLOW):
        r = await _send(client, method, path, body, {**ids, "pid": unknown}, admin_headers)
        assert_not_found(r)
    assert await snapshot(client, admin_headers, created["programmeId"]) == before


async def test_another_programmes_key_profile_and_fee_type_are_not_reachable(client, admin_headers):
    mine = await create_programme(client, admin_headers)
    theirs = await create_programme(client, admin_headers)
    r = await client.post(
        f"{PORTAL}/{theirs['programmeId']}/fee_types",
        headers=admin_headers,
        json={"name": "THEIR_FEE", "amounts": {"DEFAULT": {"EUR": 3}}},
    )
    assert r.status_code == 201, r.text
    their_key = (await get_json(client, admin_headers, f"/{theirs['programmeId']}/api_keys"))[0]
    mine_before = await snapshot(client, admin_headers, mine["programmeId"])
    theirs_before = await snapshot(client, admin_headers, theirs["programmeId"])
    base = f"{PORTAL}/{mine['programmeId']}"

    r = await client.delete(f"{base}/api_keys/{their_key['id']}", headers=admin_headers)
    assert_not_found(r)
    for prof in theirs["profiles"].values():
        r = await client.patch(
            f"{base}/profiles/{prof}", headers=admin_headers, json={"active": False}
        )
        assert_not_found(r)
    r = await client.put(
        f"{base}/fee_types/THEIR_FEE",
        headers=admin_headers,
        json={"amounts": {"DEFAULT": {"EUR": 99}}},
    )
    assert_not_found(r)

    assert await snapshot(client, admin_headers, theirs["programmeId"]) == theirs_before
    assert await snapshot(client, admin_headers, mine["programmeId"]) == mine_before
    assert await key_status(client, theirs["apiKey"]) == 204


async def test_unknown_routes_and_methods(client, admin_headers):
    r = await client.get("/portal/api/nothing-here", headers=admin_headers)
    assert r.status_code == 404
    assert set(r.json()) == {"code", "message"}
    assert r.json()["code"] == "NOT_FOUND"
    r = await client.put(PORTAL, headers=admin_headers, json={})
    assert r.status_code == 405
    assert set(r.json()) == {"code", "message"}
    assert r.json()["code"] == "METHOD_NOT_ALLOWED"


async def test_request_ref_is_fresh_on_every_response(client, admin_headers):
    refs = []
    for headers in (admin_headers, {}, {"Authorization": "Bearer nope"}):
        r = await client.get(PORTAL, headers=headers)
        refs.append(r.headers["request-ref"])
    r = await client.get(f"{PORTAL}/{UNKNOWN_ID}", headers=admin_headers)
    assert r.status_code == 404
    refs.append(r.headers["request-ref"])
    r = await client.post(PORTAL, headers=admin_headers, json={"name": "no spaces allowed"})
    assert r.status_code == 400
    refs.append(r.headers["request-ref"])
    assert all(re.fullmatch(r"[0-9a-f]{32}", ref) for ref in refs)
    assert len(set(refs)) == len(refs)
