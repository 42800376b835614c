"""Consumers, black box over HTTP, on both versions: sign-up, profile, root-user e-mail and mobile
verification, KYC (web and mobile), the simulator's verify/reject, the sandbox provider page, and
every refusal (api-key, token, identity type, programme and identity scoping)."""

from __future__ import annotations

import copy
import re
import time
from typing import Any

import httpx
import pytest

from tests.conftest import Prog
from tests.factories import CODE, Identity, consumer_body, email, login, sign_up

BASES = ["/multi", "/3.1.0/multi"]
SIM = "/simulate/api"
DIGITS = re.compile(r"^[0-9]+$")


# Helpers


def sim(p: Prog) -> dict[str, str]:
    return {"programme-key": p.api_key}


def conflict(r: httpx.Response, code: str, case: str = "") -> None:
    assert r.status_code == 409, (case, r.text)
    assert r.json() == {"errorCode": code}, case


def invalid(r: httpx.Response, field: str, error: str, case: str = "") -> dict[str, Any]:
    """A 400 naming `field` with `error`; answers that entry so its params can be checked."""
    assert r.status_code == 400, (case, r.text)
    body = r.json()
    assert isinstance(body["message"], str) and body["message"], case
    found = [
        f
        for f in body["syntaxErrors"]["invalidFields"]
        if f["fieldName"] == field and f["error"] == error
    ]
    assert found, (case, body)
    return found[0]


def empty(r: httpx.Response, status: int) -> None:
    assert r.status_code == status, r.text
    assert r.content == b""


def not_found(r: httpx.Response) -> None:
    assert r.status_code == 404, r.text
    body = r.json()
    assert set(body) == {"code", "message"}


async def consumer(
    client: httpx.AsyncClient, p: Prog, base: str = "/multi", verify_email: bool = True, **over: Any
) -> Identity:
    return await sign_up(client, p, "consumers", base, verify_email=verify_email, **over)


async def get_consumer(client: httpx.AsyncClient, c: Identity, base: str = "/multi") -> dict:
    r = await client.get(f"{base}/consumers", headers=c.headers)
    assert r.status_code == 200, r.text
    return r.json()


async def kyc_status(client: httpx.AsyncClient, c: Identity, base: str = "/multi") -> str:
    r = await client.get(f"{base}/consumers/kyc", headers=c.headers)
    assert r.status_code == 200, r.text
    return r.json()["fullDueDiligence"]


async def start_kyc(
    client: httpx.AsyncClient, c: Identity, base: str = "/multi", **body: Any
) -> httpx.Response:
    return await client.post(f"{base}/consumers/kyc", headers=c.headers, json=body or None)


def expected_consumer(body: dict[str, Any], created: dict[str, Any]) -> dict[str, Any]:
    """The Consumer record a create request `body` must answer (ids and timestamp from it)."""
    ru = body["rootUser"]
    root: dict[str, Any] = {
        "id": {"type": "CONSUMER", "id": created["rootUser"]["id"]["id"]},
        "name": ru["name"],
        "surname": ru["surname"],
        "email": ru["email"],
        "mobile": ru["mobile"],
        "active": True,
        "emailVerified": False,
        "mobileNumberVerified": False,
        "dateOfBirth": ru["dateOfBirth"],
    }
    for key in ("occupation", "address", "nationality", "placeOfBirth"):
        if key in ru:
            root[key] = ru[key]
    out: dict[str, Any] = {
        "id": {"type": "CONSUMER", "id": created["id"]["id"]},
        "profileId": body["profileId"],
        "rootUser": root,
        "creationTimestamp": created["creationTimestamp"],
        "ipAddress": body["ipAddress"],
        "acceptedTerms": True,
        "feeGroup": body.get("feeGroup", "DEFAULT"),
    }
    for key in ("tag", "baseCurrency", "sourceOfFunds", "sourceOfFundsOther"):
        if key in body:
            out[key] = body[key]
    return out


# Create


@pytest.mark.parametrize("base", BASES)
async def test_create_answers_every_field(client, programme, base):
    p = await programme()
    body = consumer_body(
        p,
        tag="grace-01",
        sourceOfFunds="PERSONAL_SAVINGS",
        sourceOfFundsOther="savings",
    )
    body["rootUser"]["address"] = {
        "addressLine1": "2 Main St",
        "addressLine2": "Flat 3",
        "city": "Valletta",
        "postCode": "VLT 1234",
        "state": "Malta",
        "country": "MT",
    }
    before = int(time.time() * 1000)
    r = await client.post(f"{base}/consumers", headers=p.headers, json=body)
    after = int(time.time() * 1000)
    assert r.status_code == 200, r.text
    created = r.json()
    assert DIGITS.match(created["id"]["id"])
    root_id = created["rootUser"]["id"]["id"]
    assert DIGITS.match(root_id) and root_id != created["id"]["id"]
    assert isinstance(created["creationTimestamp"], int)
    assert before - 1000 <= created["creationTimestamp"] <= after + 1000
    assert created == expected_consumer(body, created)
    assert created["feeGroup"] == "DEFAULT"
    assert created["baseCurrency"] == "EUR"


@pytest.mark.parametrize("base", BASES)
async def test_create_with_only_the_required_fields(client, programme, base):
    p = await programme()
    body = consumer_body(p)
    del body["baseCurrency"]
    for key in ("occupation", "address", "nationality", "placeOfBirth"):
        del body["rootUser"][key]
    r = await client.post(f"{base}/consumers", headers=p.headers, json=body)
    assert r.status_code == 200, r.text
    created = r.json()
    assert created == expected_consumer(body, created)
    assert "baseCurrency" not in created and "tag" not in created
    assert created["feeGroup"] == "DEFAULT"


@pytest.mark.parametrize("base", BASES)
async def test_create_keeps_a_fee_group_and_an_occupation_outside_industry(client, programme, base):
    p = await programme()
    body = consumer_body(p, feeGroup="PREMIUM", baseCurrency="USD")
    body["rootUser"]["occupation"] = "STUDENT"  # create is as document 1 on both versions
    r = await client.post(f"{base}/consumers", headers=p.headers, json=body)
    assert r.status_code == 200, r.text
    assert r.json()["feeGroup"] == "PREMIUM"
    assert r.json()["baseCurrency"] == "USD"
    assert r.json()["rootUser"]["occupation"] == "STUDENT"


async def test_3_29_1_base_url_smoke_and_one_record_through_every_base(client, programme):
    p = await programme()
    c = await consumer(client, p, "/3.29.1/multi")
    assert c.created["id"]["type"] == "CONSUMER"
    seen = [await get_consumer(client, c, base) for base in ("/3.29.1/multi", *BASES)]
    assert seen[0]["id"] == c.created["id"]
    assert seen[0]["rootUser"]["emailVerified"] is True
    assert seen[1] == seen[0] == seen[2]
    r = await start_kyc(client, c, "/3.29.1/multi")
    assert r.status_code == 200, r.text
    assert r.json()["kycLevel"] == "KYC_LEVEL_2"
    assert await kyc_status(client, c, "/3.1.0/multi") == "INITIATED"


def _set(path: str, value: Any):
    def change(b: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = b
        for key in parents:
            target = target.setdefault(key, {})
        target[last] = value

    return change


def _drop(path: str):
    def change(b: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = b
        for key in parents:
            target = target[key]
        del target[last]

    return change


DROP = object()
# (case, field changed, new value or DROP, error expected on that field)
CREATE_400 = [
    ("no-dob", "rootUser.dateOfBirth", DROP, "REQUIRED"),
    ("no-profile", "profileId", DROP, "REQUIRED"),
    ("no-root", "rootUser", DROP, "REQUIRED"),
    ("no-ip", "ipAddress", DROP, "REQUIRED"),
    ("no-terms", "acceptedTerms", DROP, "REQUIRED"),
    ("no-mobile", "rootUser.mobile", DROP, "REQUIRED"),
    ("nationality-case", "rootUser.nationality", "mt", "REGEX"),
    ("nationality-long", "rootUser.nationality", "MLT", "SIZE"),
    ("postcode-chars", "rootUser.address.postCode", "VLT#123", "REGEX"),
    ("postcode-long", "rootUser.address.postCode", "12345678901", "SIZE"),
    ("ip-short", "ipAddress", "1.2.", "SIZE"),
    ("ip-long", "ipAddress", "1" * 46, "SIZE"),
    ("occupation", "rootUser.occupation", "ASTRONAUT", "IN"),
    ("profile-chars", "profileId", "12a", "REGEX"),
    ("mobile-digits", "rootUser.mobile.number", "79x0", "REGEX"),
    ("dob-month", "rootUser.dateOfBirth.month", 13, "AT_MOST"),
    ("dob-year", "rootUser.dateOfBirth.year", 1899, "AT_LEAST"),
    ("currency", "baseCurrency", "eur", "REGEX"),
    ("tag", "tag", "bad tag!", "REGEX"),
    ("source-of-funds", "sourceOfFunds", "LOTTERY", "IN"),
]


@pytest.mark.parametrize("base", BASES)
async def test_create_refuses_malformed_bodies(client, programme, base):
    p = await programme()
    for case, field, value, error in CREATE_400:
        good = consumer_body(p)
        bad = copy.deepcopy(good)
        (_drop(field) if value is DROP else _set(field, value))(bad)
        r = await client.post(f"{base}/consumers", headers=p.headers, json=bad)
        invalid(r, field, error, case)
        # Nothing was created: the well-formed body with the same e-mail still signs up.
        r = await client.post(f"{base}/consumers", headers=p.headers, json=good)
        assert r.status_code == 200, (case, r.text)


async def test_size_errors_name_both_bounds(client, programme):
    p = await programme()
    for ip in ("1.2.", "1" * 46):
        r = await client.post(
            "/multi/consumers", headers=p.headers, json=consumer_body(p, ipAddress=ip)
        )
        assert invalid(r, "ipAddress", "SIZE")["params"] == ["5", "45"]
    r = await client.post(
        "/multi/consumers/verification/email/verify",
        headers=p.headers,
        json={"email": email(), "verificationCode": "12345"},
    )
    assert invalid(r, "verificationCode", "SIZE")["params"] == ["6", "6"]
    assert "request.verificationCode: size must be between 6 and 6" in r.json()["message"]


async def test_create_refuses_an_unknown_occupation_listing_the_allowed_values(client, programme):
    p = await programme()
    body = consumer_body(p)
    body["rootUser"]["occupation"] = "ASTRONAUT"
    r = await client.post("/multi/consumers", headers=p.headers, json=body)
    entry = invalid(r, "rootUser.occupation", "IN")
    assert "STUDENT" in entry["params"] and "AUDIT" in entry["params"]


CREATE_409 = [
    ("unknown-profile", lambda p, q: {"profileId": "999999999999"}, "PROFILE_NOT_FOUND"),
    ("corporate-profile", lambda p, q: {"profileId": p.profiles["corporate"]}, "PROFILE_NOT_FOUND"),
    (
        "account-profile",
        lambda p, q: {"profileId": p.profiles["consumerManagedAccount"]},
        "PROFILE_NOT_FOUND",
    ),
    (
        "other-programme-profile",
        lambda p, q: {"profileId": q.profiles["consumer"]},
        "PROFILE_NOT_FOUND",
    ),
    ("terms", lambda p, q: {"acceptedTerms": False}, "TERMS_NOT_ACCEPTED"),
    ("currency", lambda p, q: {"baseCurrency": "JPY"}, "CURRENCY_UNSUPPORTED"),
    ("fee-group", lambda p, q: {"feeGroup": "GOLD"}, "FEE_GROUP_INVALID"),
    ("nationality", lambda p, q: {"rootUser.nationality": "XX"}, "COUNTRY_INVALID"),
    ("address-country", lambda p, q: {"rootUser.address.country": "ZZ"}, "COUNTRY_INVALID"),
    (
        "mobile-code-letters",
        lambda p, q: {"rootUser.mobile.countryCode": "+ab"},
        "MOBILE_OR_COUNTRY_CODE_INVALID",
    ),
    (
        "mobile-code-zero",
        lambda p, q: {"rootUser.mobile.countryCode": "+0"},
        "MOBILE_OR_COUNTRY_CODE_INVALID",
    ),
]


@pytest.mark.parametrize("base", BASES)
async def test_create_conflicts(client, programme, base):
    p, q = await programme(), await programme()
    for case, changes, code in CREATE_409:
        good = consumer_body(p)
        bad = copy.deepcopy(good)
        for path, value in changes(p, q).items():
            _set(path, value)(bad)
        r = await client.post(f"{base}/consumers", headers=p.headers, json=bad)
        conflict(r, code, case)
        # Nothing was created: the acceptable body with the same e-mail still signs up.
        r = await client.post(f"{base}/consumers", headers=p.headers, json=good)
        assert r.status_code == 200, (case, r.text)


@pytest.mark.parametrize("base", BASES)
async def test_create_refuses_an_inactive_profile(client, programme, admin_headers, base):
    p = await programme()
    url = f"/portal/api/programmes/{p.id}/profiles/{p.profiles['consumer']}"
    r = await client.patch(url, headers=admin_headers, json={"active": False})
    assert r.status_code == 200, r.text
    body = consumer_body(p)
    conflict(
        await client.post(f"{base}/consumers", headers=p.headers, json=body), "PROFILE_INACTIVE"
    )
    r = await client.patch(url, headers=admin_headers, json={"active": True})
    assert r.status_code == 200, r.text
    r = await client.post(f"{base}/consumers", headers=p.headers, json=body)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("base", BASES)
async def test_create_refuses_a_root_email_in_use_in_the_programme(client, programme, base):
    p, q = await programme(), await programme()
    first = consumer_body(p)
    r = await client.post(f"{base}/consumers", headers=p.headers, json=first)
    assert r.status_code == 200, r.text
    again = consumer_body(p)
    again["rootUser"]["email"] = first["rootUser"]["email"].upper()
    conflict(
        await client.post(f"{base}/consumers", headers=p.headers, json=again),
        "ROOT_EMAIL_NOT_UNIQUE",
    )
    corp = await sign_up(client, p, "corporates", base, verify_email=False)
    again["rootUser"]["email"] = corp.email
    conflict(
        await client.post(f"{base}/consumers", headers=p.headers, json=again),
        "ROOT_EMAIL_NOT_UNIQUE",
    )
    # E-mails are unique per programme only.
    other = consumer_body(q)
    other["rootUser"]["email"] = first["rootUser"]["email"]
    r = await client.post(f"{base}/consumers", headers=q.headers, json=other)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("base", BASES)
async def test_create_with_an_idempotency_ref_signs_up_once(client, programme, base):
    p = await programme()
    body = consumer_body(p)
    headers = {**p.headers, "idempotency-ref": "signup-1"}
    first = await client.post(f"{base}/consumers", headers=headers, json=body)
    assert first.status_code == 200, first.text
    again = await client.post(f"{base}/consumers", headers=headers, json=body)
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    other = await client.post(f"{base}/consumers", headers=headers, json=consumer_body(p))
    assert other.status_code == 400, other.text
    # Without the ref the same body is a second sign-up, refused for its e-mail.
    conflict(
        await client.post(f"{base}/consumers", headers=p.headers, json=body),
        "ROOT_EMAIL_NOT_UNIQUE",
    )


# Get


@pytest.mark.parametrize("base", BASES)
async def test_get_answers_the_callers_consumer(client, programme, base):
    p = await programme()
    c = await consumer(client, p, base)
    got = await get_consumer(client, c, base)
    want = expected_consumer(c.body, c.created)
    want["rootUser"]["emailVerified"] = True
    assert got == want


# Update


@pytest.mark.parametrize("base", BASES)
async def test_update_changes_only_the_fields_sent(client, programme, base):
    p = await programme()
    c = await consumer(client, p, base)
    before = await get_consumer(client, c, base)
    r = await client.patch(f"{base}/consumers", headers=c.headers, json={})
    assert r.status_code == 200, r.text
    assert r.json() == before

    r = await client.patch(f"{base}/consumers", headers=c.headers, json={"tag": "new-tag"})
    assert r.status_code == 200, r.text
    assert r.json() == {**before, "tag": "new-tag"}
    assert await get_consumer(client, c, base) == r.json()

    new_email = email()
    change = {
        "name": "Ada",
        "surname": "Byron",
        "email": new_email,
        "mobile": {"countryCode": "+44", "number": "7700900999"},
        "dateOfBirth": {"year": 1985, "month": 6, "day": 30},
        "address": {
            "addressLine1": "1 Road",
            "city": "Sliema",
            "postCode": "SLM 1",
            "country": "MT",
        },
        "feeGroup": "PREMIUM",
        "baseCurrency": "GBP",
        "occupation": "FINANCE",
        "sourceOfFunds": "INHERITANCE",
    }
    r = await client.patch(f"{base}/consumers", headers=c.headers, json=change)
    assert r.status_code == 200, r.text
    after = r.json()
    root = before["rootUser"]
    assert after == {
        **before,
        "tag": "new-tag",
        "feeGroup": "PREMIUM",
        "baseCurrency": "GBP",
        "sourceOfFunds": "INHERITANCE",
        "rootUser": {
            **root,
            "name": "Ada",
            "surname": "Byron",
            "email": new_email,
            "mobile": change["mobile"],
            "dateOfBirth": change["dateOfBirth"],
            "address": change["address"],
            "occupation": "FINANCE",
            "emailVerified": False,  # a new address must be verified again
        },
    }
    assert await get_consumer(client, c, base) == after
    # The root user logs in with the new e-mail, not the old one.
    assert (await login(client, p, new_email, base=base)).status_code == 200
    assert (await login(client, p, c.email, base=base)).status_code == 403


async def test_update_3_29_1_changes_nationality_and_place_of_birth(client, programme):
    p = await programme()
    c = await consumer(client, p)
    r = await client.patch(
        "/multi/consumers", headers=c.headers, json={"nationality": "GB", "placeOfBirth": "Leeds"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["rootUser"]["nationality"] == "GB"
    assert r.json()["rootUser"]["placeOfBirth"] == "Leeds"
    conflict(
        await client.patch("/multi/consumers", headers=c.headers, json={"nationality": "XX"}),
        "COUNTRY_INVALID",
    )
    invalid(
        await client.patch("/multi/consumers", headers=c.headers, json={"nationality": "gb"}),
        "nationality",
        "REGEX",
    )
    assert (await get_consumer(client, c))["rootUser"]["nationality"] == "GB"


async def test_update_3_1_0_has_no_nationality_or_place_of_birth_and_ignores_them(
    client, programme
):
    """Document 2: the 3.1.0 update body has no placeOfBirth or nationality; unknown fields are
    ignored, as every request body of the service does."""
    p = await programme()
    c = await consumer(client, p, "/3.1.0/multi")
    r = await client.patch(
        "/3.1.0/multi/consumers",
        headers=c.headers,
        json={"nationality": "GB", "placeOfBirth": "Leeds", "tag": "t310"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["tag"] == "t310"
    assert r.json()["rootUser"]["nationality"] == "MT"
    assert r.json()["rootUser"]["placeOfBirth"] == "Valletta"
    # Even a value that 3.29.1 would refuse is not looked at.
    r = await client.patch("/3.1.0/multi/consumers", headers=c.headers, json={"nationality": "xx"})
    assert r.status_code == 200, r.text
    assert (await get_consumer(client, c))["rootUser"]["nationality"] == "MT"


async def test_update_occupation_values_differ_by_version(client, programme):
    p = await programme()
    c = await consumer(client, p)
    r = await client.patch("/multi/consumers", headers=c.headers, json={"occupation": "STUDENT"})
    assert r.status_code == 200, r.text
    assert r.json()["rootUser"]["occupation"] == "STUDENT"
    r = await client.patch(
        "/3.1.0/multi/consumers", headers=c.headers, json={"occupation": "RETIRED"}
    )
    entry = invalid(r, "occupation", "IN")
    assert "RETIRED" not in entry["params"] and "FREELANCER" in entry["params"]
    assert (await get_consumer(client, c))["rootUser"]["occupation"] == "STUDENT"
    r = await client.patch(
        "/3.1.0/multi/consumers", headers=c.headers, json={"occupation": "FREELANCER"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["rootUser"]["occupation"] == "FREELANCER"


async def test_update_person_name_patterns_differ_by_version(client, programme):
    p = await programme()
    c = await consumer(client, p)
    invalid(
        await client.patch("/3.1.0/multi/consumers", headers=c.headers, json={"name": "Ann[e]"}),
        "name",
        "REGEX",
    )
    r = await client.patch("/multi/consumers", headers=c.headers, json={"name": "Ann[e]"})
    assert r.status_code == 200, r.text
    assert r.json()["rootUser"]["name"] == "Ann[e]"
    for base in BASES:
        invalid(
            await client.patch(f"{base}/consumers", headers=c.headers, json={"surname": "H0pper"}),
            "surname",
            "REGEX",
        )
        invalid(
            await client.patch(f"{base}/consumers", headers=c.headers, json={"name": "A" * 21}),
            "name",
            "SIZE",
        )
    assert (await get_consumer(client, c))["rootUser"]["surname"] == "Hopper"


@pytest.mark.parametrize("base", BASES)
async def test_update_conflicts_change_nothing(client, programme, base):
    p = await programme()
    c = await consumer(client, p, base)
    other = await consumer(client, p, base, verify_email=False)
    corp = await sign_up(client, p, "corporates", base, verify_email=False)
    before = await get_consumer(client, c, base)
    url = f"{base}/consumers"
    for body, code in (
        ({"tag": "changed", "feeGroup": "GOLD"}, "FEE_GROUP_INVALID"),
        ({"tag": "changed", "email": other.email}, "EMAIL_NOT_UNIQUE"),
        ({"tag": "changed", "email": corp.email.upper()}, "EMAIL_NOT_UNIQUE"),
        ({"tag": "changed", "address": {"country": "XX"}}, "COUNTRY_INVALID"),
        (
            {"tag": "changed", "mobile": {"countryCode": "+0", "number": "1"}},
            "MOBILE_OR_COUNTRY_CODE_INVALID",
        ),
    ):
        conflict(await client.patch(url, headers=c.headers, json=body), code)
    assert await get_consumer(client, c, base) == before
    # Sending one's own e-mail is not a conflict.
    r = await client.patch(url, headers=c.headers, json={"email": c.email})
    assert r.status_code == 200, r.text
    assert r.json()["rootUser"]["emailVerified"] is True


@pytest.mark.parametrize("base", BASES)
async def test_update_after_kyc_approval_locks_personal_details(client, programme, base):
    p = await programme()
    c = await consumer(client, p, base)
    r = await client.post(f"{SIM}/consumers/{c.id}/verify", headers=sim(p))
    assert r.status_code == 204, r.text
    before = await get_consumer(client, c, base)
    for body in (
        {"name": "Other"},
        {"surname": "Other"},
        {"email": email()},
        {"mobile": {"countryCode": "+44", "number": "7700900111"}},
        {"mobile": {"countryCode": "+44", "number": before["rootUser"]["mobile"]["number"]}},
        {"dateOfBirth": {"year": 1970, "month": 1, "day": 1}},
        {"address": {"city": "Mdina"}},
        {"tag": "locked-too", "name": "Other"},
    ):
        conflict(
            await client.patch(f"{base}/consumers", headers=c.headers, json=body),
            "CONSUMER_VERIFIED",
        )
    assert await get_consumer(client, c, base) == before
    r = await client.patch(
        f"{base}/consumers", headers=c.headers, json={"tag": "after-kyc", "feeGroup": "PREMIUM"}
    )
    assert r.status_code == 200, r.text
    assert r.json() == {**before, "tag": "after-kyc", "feeGroup": "PREMIUM"}


# Root-user e-mail verification


@pytest.mark.parametrize("base", BASES)
async def test_email_verification(client, programme, base):
    p = await programme()
    c = await consumer(client, p, base, verify_email=False)
    assert (await get_consumer(client, c, base))["rootUser"]["emailVerified"] is False
    url = f"{base}/consumers/verification/email"
    r = await client.post(f"{url}/send", headers=p.headers, json={"email": c.email})
    empty(r, 204)
    conflict(
        await client.post(
            f"{url}/verify",
            headers=p.headers,
            json={"email": c.email, "verificationCode": "654321"},
        ),
        "VERIFICATION_CODE_INVALID",
    )
    assert (await get_consumer(client, c, base))["rootUser"]["emailVerified"] is False
    r = await client.post(
        f"{url}/verify", headers=p.headers, json={"email": c.email, "verificationCode": CODE}
    )
    empty(r, 204)
    assert (await get_consumer(client, c, base))["rootUser"]["emailVerified"] is True


@pytest.mark.parametrize("base", BASES)
async def test_email_verification_refuses_other_addresses(client, programme, base):
    p, q = await programme(), await programme()
    corp = await sign_up(client, p, "corporates", base, verify_email=False)
    elsewhere = await consumer(client, q, base, verify_email=False)
    url = f"{base}/consumers/verification/email"
    for address in (email(), corp.email, elsewhere.email):
        conflict(
            await client.post(f"{url}/send", headers=p.headers, json={"email": address}),
            "EMAIL_NOT_FOUND",
        )
    # A code sent for the corporate does not verify it through the consumer operation.
    r = await client.post(
        f"{base}/corporates/verification/email/send", headers=p.headers, json={"email": corp.email}
    )
    assert r.status_code == 204, r.text
    conflict(
        await client.post(
            f"{url}/verify", headers=p.headers, json={"email": corp.email, "verificationCode": CODE}
        ),
        "VERIFICATION_CODE_INVALID",
    )
    r = await client.get(f"{base}/corporates", headers=corp.headers)
    assert r.json()["rootUser"]["emailVerified"] is False


@pytest.mark.parametrize("base", BASES)
async def test_email_verify_without_a_code_sent(client, programme, base):
    p = await programme()
    c = await consumer(client, p, base, verify_email=False)
    conflict(
        await client.post(
            f"{base}/consumers/verification/email/verify",
            headers=p.headers,
            json={"email": c.email, "verificationCode": CODE},
        ),
        "VERIFICATION_CODE_INVALID",
    )
    assert (await get_consumer(client, c, base))["rootUser"]["emailVerified"] is False


@pytest.mark.parametrize("base", BASES)
async def test_email_verification_malformed_bodies(client, programme, base):
    p = await programme()
    url = f"{base}/consumers/verification/email"
    addr = email()
    invalid(
        await client.post(
            f"{url}/verify", headers=p.headers, json={"email": addr, "verificationCode": "12345"}
        ),
        "verificationCode",
        "SIZE",
    )
    invalid(
        await client.post(
            f"{url}/verify", headers=p.headers, json={"email": addr, "verificationCode": "12345a"}
        ),
        "verificationCode",
        "REGEX",
    )
    invalid(
        await client.post(f"{url}/verify", headers=p.headers, json={"email": addr}),
        "verificationCode",
        "REQUIRED",
    )
    invalid(await client.post(f"{url}/send", headers=p.headers, json={}), "email", "REQUIRED")
    r = await client.post(f"{url}/send", headers=p.headers, json={"email": "not-an-address"})
    assert r.status_code == 400, r.text


async def test_email_verification_in_a_live_programme_needs_the_sent_code(client, programme):
    p = await programme(mode="live")
    c = await consumer(client, p, verify_email=False)
    url = "/multi/consumers/verification/email"
    assert (
        await client.post(f"{url}/send", headers=p.headers, json={"email": c.email})
    ).status_code == 204
    conflict(
        await client.post(
            f"{url}/verify", headers=p.headers, json={"email": c.email, "verificationCode": CODE}
        ),
        "VERIFICATION_CODE_INVALID",
    )


async def test_email_change_voids_a_code_sent_to_the_old_address(client, programme):
    p = await programme()
    c = await consumer(client, p, verify_email=False)
    url = "/multi/consumers/verification/email"
    assert (
        await client.post(f"{url}/send", headers=p.headers, json={"email": c.email})
    ).status_code == 204
    new_email = email()
    r = await client.patch("/multi/consumers", headers=c.headers, json={"email": new_email})
    assert r.status_code == 200, r.text
    conflict(
        await client.post(
            f"{url}/verify", headers=p.headers, json={"email": new_email, "verificationCode": CODE}
        ),
        "VERIFICATION_CODE_INVALID",
    )


# KYC


async def test_kyc_start_3_29_1_levels_and_resume(client, programme):
    p = await programme()
    c = await consumer(client, p)
    r = await client.get("/multi/consumers/kyc", headers=c.headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"fullDueDiligence": "NOT_STARTED", "ongoingFullDueDiligence": "NOT_STARTED"}

    r = await client.post("/multi/consumers/kyc", headers=c.headers)
    assert r.status_code == 200, r.text
    started = r.json()
    assert set(started) == {"reference", "kycLevel"}
    assert DIGITS.match(started["reference"])
    assert started["kycLevel"] == "KYC_LEVEL_2"
    r = await client.get("/multi/consumers/kyc", headers=c.headers)
    assert r.json() == {
        "fullDueDiligence": "INITIATED",
        "ongoingFullDueDiligence": "NOT_STARTED",
        "kycLevel": "KYC_LEVEL_2",
    }
    # While INITIATED the same session is answered again.
    for body in (None, {}, {"kycLevel": "KYC_LEVEL_2"}):
        r = await client.post("/multi/consumers/kyc", headers=c.headers, json=body)
        assert r.status_code == 200, r.text
        assert r.json() == started


async def test_kyc_start_3_29_1_at_level_1(client, programme):
    p = await programme()
    c = await consumer(client, p)
    r = await start_kyc(client, c, kycLevel="KYC_LEVEL_1")
    assert r.status_code == 200, r.text
    assert r.json()["kycLevel"] == "KYC_LEVEL_1"
    assert DIGITS.match(r.json()["reference"])
    r = await client.get("/multi/consumers/kyc", headers=c.headers)
    assert r.json()["kycLevel"] == "KYC_LEVEL_1"
    assert r.json()["fullDueDiligence"] == "INITIATED"
    # Omitted means KYC_LEVEL_2 (interface 3.29.1), not "whatever was started before".
    r = await start_kyc(client, c)
    assert r.status_code == 200, r.text
    assert r.json()["kycLevel"] == "KYC_LEVEL_2"
    r = await client.get("/multi/consumers/kyc", headers=c.headers)
    assert r.json()["kycLevel"] == "KYC_LEVEL_2"


async def test_kyc_start_3_29_1_refuses_an_unknown_level(client, programme):
    p = await programme()
    c = await consumer(client, p)
    invalid(await start_kyc(client, c, kycLevel="KYC_LEVEL_3"), "kycLevel", "IN")
    assert await kyc_status(client, c) == "NOT_STARTED"


async def test_kyc_3_1_0_has_no_levels(client, programme):
    p = await programme()
    c = await consumer(client, p, "/3.1.0/multi")
    r = await client.get("/3.1.0/multi/consumers/kyc", headers=c.headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"fullDueDiligence": "NOT_STARTED"}
    r = await client.post("/3.1.0/multi/consumers/kyc", headers=c.headers)
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"reference"}
    assert DIGITS.match(r.json()["reference"])
    reference = r.json()["reference"]
    r = await client.post(
        "/3.1.0/multi/consumers/kyc", headers=c.headers, json={"kycLevel": "KYC_LEVEL_1"}
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"reference": reference}
    r = await client.get("/3.1.0/multi/consumers/kyc", headers=c.headers)
    assert r.json() == {"fullDueDiligence": "INITIATED"}


@pytest.mark.parametrize("base", BASES)
async def test_kyc_start_needs_a_verified_email(client, programme, base):
    p = await programme()
    c = await consumer(client, p, base, verify_email=False)
    conflict(await start_kyc(client, c, base), "EMAIL_UNVERIFIED")
    assert await kyc_status(client, c, base) == "NOT_STARTED"


@pytest.mark.parametrize("base", BASES)
async def test_kyc_start_refusals_follow_the_status(client, programme, base):
    p = await programme()
    c = await consumer(client, p, base)
    r = await start_kyc(client, c, base)
    assert r.status_code == 200, r.text
    reference = r.json()["reference"]

    # Provider puts it in review: a new start is refused.
    r = await client.post(f"/kyc/{reference}", data={"outcome": "review"})
    assert r.status_code == 303
    assert await kyc_status(client, c, base) == "PENDING_REVIEW"
    conflict(await start_kyc(client, c, base), "KYC_PENDING_REVIEW")

    # A rejection that is not permanent lets the consumer start again, with a new session.
    r = await client.post(
        f"{SIM}/consumers/{c.id}/reject", headers=sim(p), json={"permanent": False}
    )
    assert r.status_code == 204, r.text
    assert await kyc_status(client, c, base) == "REJECTED"
    r = await start_kyc(client, c, base)
    assert r.status_code == 200, r.text
    assert r.json()["reference"] != reference
    assert await kyc_status(client, c, base) == "INITIATED"

    # A permanent rejection refuses any new start.
    r = await client.post(
        f"{SIM}/consumers/{c.id}/reject", headers=sim(p), json={"permanent": True}
    )
    assert r.status_code == 204, r.text
    conflict(await start_kyc(client, c, base), "KYC_REJECTED")
    assert await kyc_status(client, c, base) == "REJECTED"


@pytest.mark.parametrize("base", BASES)
async def test_kyc_start_after_approval(client, programme, base):
    p = await programme()
    c = await consumer(client, p, base)
    r = await client.post(f"{SIM}/consumers/{c.id}/verify", headers=sim(p))
    assert r.status_code == 204
    conflict(await start_kyc(client, c, base), "KYC_ALREADY_APPROVED")
    assert await kyc_status(client, c, base) == "APPROVED"


# Mobile KYC (3.29.1 only)


async def test_kyc_mobile_sumsub(client, programme):
    p = await programme()
    c = await consumer(client, p)
    url = "/multi/consumers/kyc_mobile_sumsub"
    r = await client.post(url, headers=c.headers)
    assert r.status_code == 200, r.text
    session = r.json()
    assert set(session) == {
        "verificationFlow",
        "accessToken",
        "identityType",
        "externalUserId",
        "kycProviderKey",
        "kycLevel",
    }
    assert DIGITS.match(session["accessToken"])
    assert session["identityType"] == "CONSUMER"
    assert session["externalUserId"] == c.id
    assert session["kycLevel"] == "KYC_LEVEL_2"
    assert isinstance(session["verificationFlow"], str) and session["verificationFlow"]
    assert isinstance(session["kycProviderKey"], str) and session["kycProviderKey"]
    r = await client.get("/multi/consumers/kyc", headers=c.headers)
    assert r.json()["fullDueDiligence"] == "INITIATED"
    assert r.json()["kycLevel"] == "KYC_LEVEL_2"

    r = await client.post(url, headers=c.headers, json={"kycLevel": "KYC_LEVEL_1"})
    assert r.status_code == 200, r.text
    assert r.json()["kycLevel"] == "KYC_LEVEL_1"
    invalid(
        await client.post(url, headers=c.headers, json={"kycLevel": "LEVEL_9"}), "kycLevel", "IN"
    )

    # In sandbox the access token opens the provider page, where a tester decides.
    r = await client.post(f"/kyc/{r.json()['accessToken']}", data={"outcome": "approve"})
    assert r.status_code == 303
    assert await kyc_status(client, c) == "APPROVED"
    conflict(await client.post(url, headers=c.headers), "KYC_ALREADY_APPROVED")


async def test_kyc_mobile_sumsub_refusals(client, programme):
    p = await programme()
    url = "/multi/consumers/kyc_mobile_sumsub"
    unverified = await consumer(client, p, verify_email=False)
    conflict(await client.post(url, headers=unverified.headers), "EMAIL_UNVERIFIED")

    c = await consumer(client, p)
    r = await client.post(url, headers=c.headers)
    assert r.status_code == 200, r.text
    page = await client.post(f"/kyc/{r.json()['accessToken']}", data={"outcome": "review"})
    assert page.status_code == 303
    conflict(await client.post(url, headers=c.headers), "KYC_PENDING_REVIEW")
    r = await client.post(
        f"{SIM}/consumers/{c.id}/reject", headers=sim(p), json={"permanent": True}
    )
    assert r.status_code == 204
    # Contract row 45: the mobile operation names this KYC_ALREADY_REJECTED.
    conflict(await client.post(url, headers=c.headers), "KYC_ALREADY_REJECTED")

    r = await client.post("/3.1.0/multi/consumers/kyc_mobile_sumsub", headers=c.headers)
    not_found(r)


# Mobile verification (3.1.0 only)


async def test_mobile_verification_3_1_0(client, programme):
    p = await programme()
    c = await consumer(client, p, "/3.1.0/multi")
    url = "/3.1.0/multi/consumers/verification/mobile"
    r = await client.post(f"{url}/send", headers=c.headers)
    assert r.status_code == 200, r.text
    sent = r.json()
    assert set(sent) == {"timeLeftForRetry", "retriesLeft"}
    assert isinstance(sent["timeLeftForRetry"], int) and sent["timeLeftForRetry"] > 0
    assert sent["retriesLeft"] == 5
    conflict(await client.post(f"{url}/send", headers=c.headers), "FREQUENCY_EXCEEDED")

    r = await client.post(f"{SIM}/clock/advance", headers=sim(p), json={"seconds": 16})
    assert r.status_code == 200, r.text
    r = await client.post(f"{url}/send", headers=c.headers)
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["retriesLeft"], int)

    conflict(
        await client.post(f"{url}/verify", headers=c.headers, json={"verificationCode": "000000"}),
        "VERIFICATION_CODE_INVALID",
    )
    # A failed verify does not open a re-send early.
    conflict(await client.post(f"{url}/send", headers=c.headers), "FREQUENCY_EXCEEDED")
    assert (await get_consumer(client, c, "/3.1.0/multi"))["rootUser"][
        "mobileNumberVerified"
    ] is False
    r = await client.post(f"{url}/verify", headers=c.headers, json={"verificationCode": CODE})
    empty(r, 204)
    got = await get_consumer(client, c, "/3.1.0/multi")
    assert got["rootUser"]["mobileNumberVerified"] is True
    assert (await get_consumer(client, c, "/multi"))["rootUser"]["mobileNumberVerified"] is True

    await client.post(f"{SIM}/clock/advance", headers=sim(p), json={"seconds": 16})
    conflict(await client.post(f"{url}/send", headers=c.headers), "ALREADY_VERIFIED")
    conflict(
        await client.post(f"{url}/verify", headers=c.headers, json={"verificationCode": CODE}),
        "VERIFICATION_CODE_INVALID",
    )

    # A new mobile number has to be verified again.
    r = await client.patch(
        "/3.1.0/multi/consumers",
        headers=c.headers,
        json={"mobile": {"countryCode": "+356", "number": "79111111"}},
    )
    assert r.status_code == 200, r.text
    assert r.json()["rootUser"]["mobileNumberVerified"] is False


async def test_mobile_verify_3_1_0_refusals(client, programme):
    p = await programme()
    c = await consumer(client, p, "/3.1.0/multi")
    url = "/3.1.0/multi/consumers/verification/mobile/verify"
    conflict(
        await client.post(url, headers=c.headers, json={"verificationCode": CODE}),
        "VERIFICATION_CODE_INVALID",
    )
    invalid(
        await client.post(url, headers=c.headers, json={"verificationCode": "12345"}),
        "verificationCode",
        "SIZE",
    )
    invalid(await client.post(url, headers=c.headers, json={}), "verificationCode", "REQUIRED")
    assert (await get_consumer(client, c))["rootUser"]["mobileNumberVerified"] is False
    for path in ("send", "verify"):
        r = await client.post(
            f"/multi/consumers/verification/mobile/{path}",
            headers=c.headers,
            json={"verificationCode": CODE},
        )
        not_found(r)


async def test_mobile_change_voids_a_code_sent_to_the_old_number(client, programme):
    p = await programme()
    c = await consumer(client, p, "/3.1.0/multi")
    url = "/3.1.0/multi/consumers/verification/mobile"
    assert (await client.post(f"{url}/send", headers=c.headers)).status_code == 200
    r = await client.patch(
        "/3.1.0/multi/consumers",
        headers=c.headers,
        json={"mobile": {"countryCode": "+356", "number": "79222222"}},
    )
    assert r.status_code == 200, r.text
    conflict(
        await client.post(f"{url}/verify", headers=c.headers, json={"verificationCode": CODE}),
        "VERIFICATION_CODE_INVALID",
    )


# Simulator and sandbox provider page


async def test_simulator_verify_consumer(client, programme):
    p, q = await programme(), await programme()
    c = await consumer(client, p, verify_email=False)
    other = await consumer(client, q, verify_email=False)
    corp = await sign_up(client, p, "corporates", verify_email=False)

    not_found(await client.post(f"{SIM}/consumers/999999999999/verify", headers=sim(p)))
    not_found(await client.post(f"{SIM}/consumers/{corp.id}/verify", headers=sim(p)))
    not_found(await client.post(f"{SIM}/consumers/{other.id}/verify", headers=sim(p)))
    not_found(await client.post(f"{SIM}/consumers/{c.id}/verify", headers=sim(q)))
    r = await client.post(f"{SIM}/consumers/{c.id}/verify")
    assert r.status_code == 400, r.text
    empty(
        await client.post(f"{SIM}/consumers/{c.id}/verify", headers={"programme-key": "nope"}), 401
    )
    assert (await get_consumer(client, c))["rootUser"]["emailVerified"] is False
    assert await kyc_status(client, other) == "NOT_STARTED"

    empty(await client.post(f"{SIM}/consumers/{c.id}/verify", headers=sim(p)), 204)
    root = (await get_consumer(client, c))["rootUser"]
    assert root["emailVerified"] is True and root["mobileNumberVerified"] is True
    r = await client.get("/multi/consumers/kyc", headers=c.headers)
    assert r.json()["fullDueDiligence"] == "APPROVED"
    assert r.json()["kycLevel"] == "KYC_LEVEL_2"
    assert await kyc_status(client, c, "/3.1.0/multi") == "APPROVED"
    r = await client.get("/multi/corporates/kyb", headers=corp.headers)
    assert r.json()["kybStatus"] == "NOT_STARTED"


async def test_simulator_reject_consumer(client, programme):
    p = await programme()
    c = await consumer(client, p)
    corp = await sign_up(client, p, "corporates", verify_email=False)
    not_found(await client.post(f"{SIM}/consumers/999999999999/reject", headers=sim(p)))
    not_found(
        await client.post(
            f"{SIM}/consumers/{corp.id}/reject", headers=sim(p), json={"permanent": True}
        )
    )
    assert (await start_kyc(client, c)).status_code == 200
    # No body: not permanent.
    empty(await client.post(f"{SIM}/consumers/{c.id}/reject", headers=sim(p)), 204)
    assert await kyc_status(client, c) == "REJECTED"
    assert (await start_kyc(client, c)).status_code == 200


async def test_simulator_is_not_there_for_live_programmes(client, programme):
    p = await programme(mode="live")
    c = await consumer(client, p, verify_email=False)
    not_found(await client.post(f"{SIM}/consumers/{c.id}/verify", headers=sim(p)))
    not_found(
        await client.post(
            f"{SIM}/consumers/{c.id}/reject", headers=sim(p), json={"permanent": True}
        )
    )
    assert await kyc_status(client, c) == "NOT_STARTED"


@pytest.mark.parametrize("base", BASES)
async def test_sandbox_provider_page_for_a_consumer(client, programme, base):
    p = await programme()
    c = await consumer(client, p, base)
    reference = (await start_kyc(client, c, base)).json()["reference"]
    page = await client.get(f"/kyc/{reference}")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert 'id="status">INITIATED<' in page.text
    assert "KYC" in page.text

    r = await client.post(f"/kyc/{reference}", data={"outcome": "nonsense"})
    assert r.status_code == 400
    assert await kyc_status(client, c, base) == "INITIATED"

    r = await client.post(f"/kyc/{reference}", data={"outcome": "approve"})
    assert r.status_code == 303
    assert r.headers["location"] == f"/kyc/{reference}"
    assert await kyc_status(client, c, base) == "APPROVED"
    assert 'id="status">APPROVED<' in (await client.get(f"/kyc/{reference}")).text
    not_found(await client.get("/kyc/999999999999999"))


async def test_sandbox_page_permanent_rejection(client, programme):
    p = await programme()
    c = await consumer(client, p)
    reference = (await start_kyc(client, c)).json()["reference"]
    r = await client.post(f"/kyc/{reference}", data={"outcome": "reject_permanently"})
    assert r.status_code == 303
    assert await kyc_status(client, c) == "REJECTED"
    conflict(await start_kyc(client, c), "KYC_REJECTED")


# Refusals and scoping


ANON = [
    ("POST", "/consumers", "create"),
    ("POST", "/consumers/verification/email/send", "send"),
    ("POST", "/consumers/verification/email/verify", "verify"),
]


@pytest.mark.parametrize("base", BASES)
async def test_anonymous_operations_need_a_known_api_key(client, programme, base):
    p = await programme()
    body = consumer_body(p)
    c_email = body["rootUser"]["email"]
    payloads = {
        "create": body,
        "send": {"email": c_email},
        "verify": {"email": c_email, "verificationCode": CODE},
    }
    for method, path, name in ANON:
        for headers, status in (({}, 400), ({"api-key": ""}, 400), ({"api-key": "unknown"}, 401)):
            r = await client.request(method, f"{base}{path}", headers=headers, json=payloads[name])
            assert r.status_code == status, (name, headers, r.text)
            if status == 401:
                assert r.content == b""
    # None of those created anything: the same sign-up still works.
    r = await client.post(f"{base}/consumers", headers=p.headers, json=body)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("base", BASES)
async def test_anonymous_operations_are_scoped_to_the_programme(client, programme, base):
    p, q = await programme(), await programme()
    c = await consumer(client, p, base, verify_email=False)
    url = f"{base}/consumers/verification/email"
    conflict(
        await client.post(f"{url}/send", headers=q.headers, json={"email": c.email}),
        "EMAIL_NOT_FOUND",
    )
    assert (
        await client.post(f"{url}/send", headers=p.headers, json={"email": c.email})
    ).status_code == 204
    conflict(
        await client.post(
            f"{url}/verify", headers=q.headers, json={"email": c.email, "verificationCode": CODE}
        ),
        "VERIFICATION_CODE_INVALID",
    )
    assert (await get_consumer(client, c, base))["rootUser"]["emailVerified"] is False


LOGGED_IN = {
    "/multi": [
        ("GET", "/consumers", None),
        ("PATCH", "/consumers", {"tag": "intruder"}),
        ("POST", "/consumers/kyc", None),
        ("GET", "/consumers/kyc", None),
        ("POST", "/consumers/kyc_mobile_sumsub", None),
    ],
    "/3.1.0/multi": [
        ("GET", "/consumers", None),
        ("PATCH", "/consumers", {"tag": "intruder"}),
        ("POST", "/consumers/kyc", None),
        ("GET", "/consumers/kyc", None),
        ("POST", "/consumers/verification/mobile/send", None),
        ("POST", "/consumers/verification/mobile/verify", {"verificationCode": CODE}),
    ],
}


@pytest.mark.parametrize("base", BASES)
async def test_logged_in_operations_refuse_wrong_keys_tokens_and_identity_types(
    client, programme, base
):
    p, q = await programme(), await programme()
    c = await consumer(client, p, base)
    corp = await sign_up(client, p, "corporates", base)
    before = await get_consumer(client, c, base)
    token = {"Authorization": f"Bearer {c.token}"}
    cases = (
        ("no api-key", token, 400),
        ("empty api-key", {"api-key": "", **token}, 400),
        ("unknown api-key", {"api-key": "unknown", **token}, 401),
        ("no token", p.headers, 401),
        ("garbage token", {**p.headers, "Authorization": "Bearer not.a.token"}, 401),
        ("other programme's key", {**q.headers, **token}, 403),
        ("corporate's token", corp.headers, 403),
    )
    for method, path, body in LOGGED_IN[base]:
        for name, headers, status in cases:
            r = await client.request(method, f"{base}{path}", headers=headers, json=body)
            assert r.status_code == status, (method, path, name, r.text)
            if status in (401, 403):
                assert r.content == b"", (method, path, name)
    assert await get_consumer(client, c, base) == before
    assert await kyc_status(client, c, base) == "NOT_STARTED"
    r = await client.get(f"{base}/corporates", headers=corp.headers)
    assert r.status_code == 200 and r.json()["tag"] == corp.body["tag"]


@pytest.mark.parametrize("base", BASES)
async def test_a_logged_out_token_is_refused(client, programme, base):
    p = await programme()
    c = await consumer(client, p, base)
    r = await client.post(f"{base}/logout", headers=c.headers)
    assert r.status_code in (200, 204), r.text
    empty(await client.get(f"{base}/consumers", headers=c.headers), 401)
    empty(await client.patch(f"{base}/consumers", headers=c.headers, json={"tag": "x"}), 401)


@pytest.mark.parametrize("base", BASES)
async def test_a_consumer_sees_and_changes_only_its_own_data(client, programme, base):
    p = await programme()
    a = await consumer(client, p, base)
    b = await consumer(client, p, base)
    b_before = await get_consumer(client, b, base)

    got = await get_consumer(client, a, base)
    assert got["id"]["id"] == a.id and got["rootUser"]["email"] == a.email
    assert b.email not in str(got)

    r = await client.patch(
        f"{base}/consumers", headers=a.headers, json={"tag": "mine", "name": "Alice"}
    )
    assert r.status_code == 200 and r.json()["id"]["id"] == a.id
    assert (await start_kyc(client, a, base)).status_code == 200
    if base == "/3.1.0/multi":
        url = f"{base}/consumers/verification/mobile"
        assert (await client.post(f"{url}/send", headers=a.headers)).status_code == 200
        r = await client.post(f"{url}/verify", headers=a.headers, json={"verificationCode": CODE})
        assert r.status_code == 204
    assert (await client.post(f"{SIM}/consumers/{a.id}/verify", headers=sim(p))).status_code == 204

    assert await get_consumer(client, b, base) == b_before
    assert await kyc_status(client, b, base) == "NOT_STARTED"
    # b's own session still answers b.
    assert (await get_consumer(client, b, base))["id"]["id"] == b.id
