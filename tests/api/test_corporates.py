"""Corporates, black-box over HTTP on both versions: sign-up, read, update, root-user e-mail
verification, KYB, the 3.1.0 root-user mobile verification, the simulator's verify/reject and
the sandbox provider page, and the refusals every corporate operation shares."""

from __future__ import annotations

import copy
import re
import time
from typing import Any

import pytest
from sqlalchemy import select

from multibank.kernel.notify import OutboxMessage
from tests.factories import CODE, PASSWORD, corporate_body, email, login, sign_up

BOTH = ("/multi", "/3.1.0/multi")
LATEST = "/multi"
OLD = "/3.1.0/multi"
DIGITS = re.compile(r"^[0-9]+$")
SIM = "/simulate/api"


# Helpers


def invalid(r: Any) -> list[tuple[str, str]]:
    """The (fieldName, error) pairs of a 400 body, after checking its shape."""
    assert r.status_code == 400, r.text
    body = r.json()
    assert isinstance(body["message"], str) and body["message"]
    fields = body["syntaxErrors"]["invalidFields"]
    for f in fields:
        assert isinstance(f["params"], list)
    return [(f["fieldName"], f["error"]) for f in fields]


def conflict(r: Any) -> str:
    assert r.status_code == 409, r.text
    code: str = r.json()["errorCode"]
    return code


def not_found(r: Any) -> None:
    assert r.status_code == 404, r.text
    body = r.json()
    assert isinstance(body["code"], str) and isinstance(body["message"], str)


def sim(p: Any) -> dict[str, str]:
    return {"programme-key": p.api_key}


async def create(client: Any, p: Any, base: str = LATEST, **over: Any) -> Any:
    return await client.post(
        f"{base}/corporates", headers=p.headers, json=corporate_body(p, **over)
    )


async def get_corp(client: Any, ident: Any, base: str = LATEST) -> dict[str, Any]:
    r = await client.get(f"{base}/corporates", headers=ident.headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def kyb_status(client: Any, ident: Any, base: str = LATEST) -> str:
    r = await client.get(f"{base}/corporates/kyb", headers=ident.headers)
    assert r.status_code == 200, r.text
    status: str = r.json()["kybStatus"]
    return status


async def start_kyb(client: Any, ident: Any, base: str = LATEST) -> Any:
    return await client.post(f"{base}/corporates/kyb", headers=ident.headers)


async def send_email(client: Any, p: Any, address: str, base: str = LATEST) -> Any:
    return await client.post(
        f"{base}/corporates/verification/email/send", headers=p.headers, json={"email": address}
    )


async def verify_email(client: Any, p: Any, address: str, code: str, base: str = LATEST) -> Any:
    return await client.post(
        f"{base}/corporates/verification/email/verify",
        headers=p.headers,
        json={"email": address, "verificationCode": code},
    )


async def patch(client: Any, ident: Any, body: dict[str, Any], base: str = LATEST) -> Any:
    return await client.patch(f"{base}/corporates", headers=ident.headers, json=body)


def without_password_flag(created: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(created)
    del out["rootUser"]["passwordAlreadySet"]
    return out


# Create


@pytest.mark.parametrize("base", BOTH)
async def test_create_answers_every_field(client, programme, base):
    p = await programme()
    body = corporate_body(p, sourceOfFundsOther="family holding")
    before = int(time.time() * 1000)
    r = await client.post(f"{base}/corporates", headers=p.headers, json=body)
    after = int(time.time() * 1000)
    assert r.status_code == 200, r.text
    c = r.json()
    assert set(c) == {
        "id",
        "profileId",
        "tag",
        "rootUser",
        "company",
        "industry",
        "sourceOfFunds",
        "sourceOfFundsOther",
        "acceptedTerms",
        "ipAddress",
        "baseCurrency",
        "feeGroup",
        "creationTimestamp",
    }
    assert c["id"]["type"] == "CORPORATE"
    assert DIGITS.match(c["id"]["id"])
    assert c["profileId"] == p.profiles["corporate"]
    assert c["tag"] == "acme-tag"
    root = c["rootUser"]
    assert DIGITS.match(root["id"]["id"])
    assert root["id"]["id"] != c["id"]["id"]
    assert root == {
        "id": {"type": "CORPORATE", "id": root["id"]["id"]},
        "name": "Ada",
        "surname": "Lovelace",
        "email": body["rootUser"]["email"],
        "mobile": {"countryCode": "+44", "number": "7700900123"},
        "companyPosition": "DIRECTOR",
        "active": True,
        "emailVerified": False,
        "mobileNumberVerified": False,
        "dateOfBirth": {"year": 1980, "month": 12, "day": 10},
        "passwordAlreadySet": False,
    }
    assert c["company"] == {
        "name": "Acme Ltd",
        "type": "LLC",
        "registrationNumber": "C1234567",
        "businessAddress": {
            "addressLine1": "1 High Street",
            "city": "London",
            "postCode": "EC1A 1BB",
            "country": "GB",
        },
        "countryOfRegistration": "GB",
        "incorporatedOn": {"year": 2001, "month": 2, "day": 3},
    }
    assert c["industry"] == "ACCOUNTING"
    assert c["sourceOfFunds"] == "ORDINARY_BUSINESS_ACTIVITY"
    assert c["sourceOfFundsOther"] == "family holding"
    assert c["acceptedTerms"] is True
    assert c["ipAddress"] == "127.0.0.1"
    assert c["baseCurrency"] == "EUR"
    assert c["feeGroup"] == "DEFAULT"
    assert isinstance(c["creationTimestamp"], int)
    assert before - 1000 <= c["creationTimestamp"] <= after + 1000  # milliseconds, not seconds


@pytest.mark.parametrize("base", BOTH)
async def test_create_keeps_given_fee_group_and_other_currency(client, programme, base):
    p = await programme()
    r = await create(client, p, base, feeGroup="PREMIUM", baseCurrency="GBP")
    assert r.status_code == 200, r.text
    assert r.json()["feeGroup"] == "PREMIUM"
    assert r.json()["baseCurrency"] == "GBP"


async def test_create_without_optional_fields_leaves_them_out(client, programme):
    p = await programme()
    body = corporate_body(p)
    for key in ("tag", "industry", "sourceOfFunds"):
        del body[key]
    del body["rootUser"]["dateOfBirth"]
    for key in ("registrationNumber", "businessAddress", "incorporatedOn"):
        del body["company"][key]
    r = await client.post("/multi/corporates", headers=p.headers, json=body)
    assert r.status_code == 200, r.text
    c = r.json()
    for key in ("tag", "industry", "sourceOfFunds", "sourceOfFundsOther"):
        assert key not in c or c[key] is None, key
    assert c["feeGroup"] == "DEFAULT"
    assert c["company"]["countryOfRegistration"] == "GB"
    assert c["company"].get("businessAddress") is None
    assert c["rootUser"].get("dateOfBirth") is None


async def test_every_operation_is_served_on_the_versioned_latest_base(client, programme):
    v = "/3.29.1/multi"
    p = await programme()
    ident = await sign_up(client, p, base=v, verify_email=False)
    assert ident.created["id"]["type"] == "CORPORATE"
    assert ident.created["feeGroup"] == "DEFAULT"
    assert ident.created["rootUser"]["passwordAlreadySet"] is False
    # D11: one programme's data is the same through every base URL.
    for base in (v, LATEST, OLD):
        assert await get_corp(client, ident, base) == without_password_flag(ident.created), base
    assert conflict(await send_email(client, p, email(), v)) == "EMAIL_NOT_FOUND"
    assert (await send_email(client, p, ident.email, v)).status_code == 204
    assert conflict(await verify_email(client, p, ident.email, "000000", v)) == (
        "VERIFICATION_CODE_INVALID"
    )
    assert (await verify_email(client, p, ident.email, CODE, v)).status_code == 204
    r = await patch(
        client,
        ident,
        {"tag": "via-3-29-1", "dateOfBirth": ident.body["rootUser"]["dateOfBirth"]},
        v,
    )
    assert r.status_code == 200, r.text
    assert r.json()["tag"] == "via-3-29-1"
    assert r.json()["rootUser"]["emailVerified"] is True
    r = await client.get(f"{v}/corporates/kyb", headers=ident.headers)
    assert r.json() == {"kybStatus": "NOT_STARTED", "ongoingKybStatus": "NOT_STARTED"}
    r = await start_kyb(client, ident, v)
    assert r.status_code == 200, r.text
    assert DIGITS.match(r.json()["reference"])
    assert await kyb_status(client, ident, v) == "INITIATED"
    assert await kyb_status(client, ident, OLD) == "INITIATED"


REQUIRED_FIELDS = [
    ("profileId",),
    ("rootUser",),
    ("rootUser", "name"),
    ("rootUser", "surname"),
    ("rootUser", "email"),
    ("rootUser", "mobile"),
    ("rootUser", "mobile", "countryCode"),
    ("rootUser", "mobile", "number"),
    ("rootUser", "companyPosition"),
    ("company",),
    ("company", "type"),
    ("company", "name"),
    ("company", "registrationCountry"),
    ("acceptedTerms",),
    ("ipAddress",),
    ("baseCurrency",),
]


@pytest.mark.parametrize("base", BOTH)
@pytest.mark.parametrize("path", REQUIRED_FIELDS, ids=".".join)
async def test_create_missing_required_field_is_400_required(client, programme, base, path):
    p = await programme()
    body = corporate_body(p)
    node = body
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    r = await client.post(f"{base}/corporates", headers=p.headers, json=body)
    assert (".".join(path), "REQUIRED") in invalid(r)


INVALID_VALUES = [
    ("tag", "bad tag!", "tag", "REGEX"),
    ("tag", "t" * 51, "tag", "SIZE"),
    ("ipAddress", "1.2.", "ipAddress", "SIZE"),
    ("ipAddress", "1" * 46, "ipAddress", "SIZE"),
    ("baseCurrency", "eur", "baseCurrency", "REGEX"),
    ("baseCurrency", "EURO", "baseCurrency", "SIZE"),
    ("baseCurrency", "EU", "baseCurrency", "SIZE"),
    ("profileId", "abc", "profileId", "REGEX"),
    ("industry", "MINING", "industry", "IN"),
    ("sourceOfFunds", "LOTTERY", "sourceOfFunds", "IN"),
]


@pytest.mark.parametrize("base", BOTH)
@pytest.mark.parametrize(
    ("field", "value", "name", "error"), INVALID_VALUES, ids=lambda v: str(v)[:12]
)
async def test_create_invalid_value_is_400(client, programme, base, field, value, name, error):
    p = await programme()
    r = await create(client, p, base, **{field: value})
    assert (name, error) in invalid(r)


NESTED_INVALID = [
    (("rootUser", "companyPosition"), "CEO", "IN"),
    (("rootUser", "mobile", "number"), "77a00", "REGEX"),
    (("rootUser", "email"), "not-an-email", None),
    (("rootUser", "dateOfBirth", "month"), 13, "AT_MOST"),
    (("rootUser", "dateOfBirth", "year"), 1800, "AT_LEAST"),
    (("company", "type"), "CORPORATION", "IN"),
    (("company", "registrationCountry"), "gb", "REGEX"),
    (("company", "registrationCountry"), "GBR", "SIZE"),
    (("company", "businessAddress", "postCode"), "EC1!", "REGEX"),
    (("company", "registrationNumber"), "", "SIZE"),
]


@pytest.mark.parametrize(("path", "value", "error"), NESTED_INVALID, ids=lambda v: str(v)[:20])
async def test_create_invalid_nested_value_is_400(client, programme, path, value, error):
    p = await programme()
    for base in BOTH:
        body = corporate_body(p)
        node = body
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        r = await client.post(f"{base}/corporates", headers=p.headers, json=body)
        errors = invalid(r)
        names = [n for n, _ in errors]
        assert ".".join(path) in names, (base, errors)
        if error is not None:
            assert (".".join(path), error) in errors, (base, errors)


async def test_create_size_error_names_both_bounds(client, programme):
    p = await programme()
    r = await create(client, p, ipAddress="1.2.")
    assert r.status_code == 400
    field = r.json()["syntaxErrors"]["invalidFields"][0]
    assert field == {"fieldName": "ipAddress", "error": "SIZE", "params": ["5", "45"]}


@pytest.mark.parametrize("base", BOTH)
async def test_email_verify_short_code_message_as_observed(client, programme, base):
    p = await programme()
    r = await verify_email(client, p, email(), "12345", base)
    assert r.status_code == 400
    assert r.json()["message"] == "request.verificationCode: size must be between 6 and 6"


@pytest.mark.parametrize("base", BOTH)
async def test_email_verify_non_digit_code_message_as_observed(client, programme, base):
    p = await programme()
    r = await verify_email(client, p, email(), "12345a", base)
    assert r.status_code == 400
    assert r.json()["message"] == 'request.verificationCode: must match "^[0-9]+$"'
    assert r.json()["syntaxErrors"]["invalidFields"] == [
        {"fieldName": "verificationCode", "error": "REGEX", "params": ["^[0-9]+$"]}
    ]


async def test_refused_create_creates_nothing(client, programme):
    p = await programme()
    body = corporate_body(p, baseCurrency="eur")
    assert (await client.post("/multi/corporates", headers=p.headers, json=body)).status_code == 400
    body["baseCurrency"] = "JPY"
    assert conflict(await client.post("/multi/corporates", headers=p.headers, json=body)) == (
        "CURRENCY_UNSUPPORTED"
    )
    body["baseCurrency"] = "EUR"
    r = await client.post("/multi/corporates", headers=p.headers, json=body)
    assert r.status_code == 200, r.text  # the e-mail was not taken by the refused attempts


@pytest.mark.parametrize("field", ["industry", "sourceOfFunds"])
async def test_industry_and_source_of_funds_required_on_3_1_0_only(client, programme, field):
    p = await programme()
    body = corporate_body(p)
    del body[field]
    r = await client.post(f"{OLD}/corporates", headers=p.headers, json=body)
    assert (field, "REQUIRED") in invalid(r)
    r = await client.post(f"{LATEST}/corporates", headers=p.headers, json=body)
    assert r.status_code == 200, r.text
    assert r.json().get(field) is None


# Create: business-rule refusals (409)


@pytest.mark.parametrize("base", BOTH)
async def test_create_unknown_or_foreign_profile_is_profile_not_found(client, programme, base):
    p = await programme()
    other = await programme()
    for profile in ("999999999", "1" * 19, other.profiles["corporate"]):
        assert conflict(await create(client, p, base, profileId=profile)) == "PROFILE_NOT_FOUND"


@pytest.mark.parametrize("base", BOTH)
async def test_create_with_another_kind_of_profile_is_profile_not_found(client, programme, base):
    """D11a: the reference answers PROFILE_NOT_FOUND, as it does for a consumer."""
    p = await programme()
    for kind in ("consumer", "corporateManagedAccount"):
        r = await create(client, p, base, profileId=p.profiles[kind])
        assert conflict(r) == "PROFILE_NOT_FOUND", kind


@pytest.mark.parametrize("base", BOTH)
async def test_create_with_inactive_profile_is_profile_inactive(
    client, programme, admin_headers, base
):
    p = await programme()
    r = await client.patch(
        f"/portal/api/programmes/{p.id}/profiles/{p.profiles['corporate']}",
        headers=admin_headers,
        json={"active": False},
    )
    assert r.status_code == 200, r.text
    assert conflict(await create(client, p, base)) == "PROFILE_INACTIVE"


@pytest.mark.parametrize("base", BOTH)
@pytest.mark.parametrize(
    ("over", "code"),
    [
        ({"acceptedTerms": False}, "TERMS_NOT_ACCEPTED"),
        ({"baseCurrency": "JPY"}, "CURRENCY_UNSUPPORTED"),
        ({"feeGroup": "GOLD"}, "FEE_GROUP_INVALID"),
    ],
    ids=lambda v: str(v)[:20],
)
async def test_create_business_rule_refusals(client, programme, base, over, code):
    p = await programme()
    assert conflict(await create(client, p, base, **over)) == code


@pytest.mark.parametrize("base", BOTH)
async def test_create_unknown_country_is_country_invalid(client, programme, base):
    p = await programme()
    body = corporate_body(p)
    body["company"]["registrationCountry"] = "XX"
    r = await client.post(f"{base}/corporates", headers=p.headers, json=body)
    assert conflict(r) == "COUNTRY_INVALID"
    body = corporate_body(p)
    body["company"]["businessAddress"]["country"] = "XX"
    r = await client.post(f"{base}/corporates", headers=p.headers, json=body)
    assert conflict(r) == "COUNTRY_INVALID"


@pytest.mark.parametrize("base", BOTH)
@pytest.mark.parametrize("country_code", ["abc", "+0", "+12345"])
async def test_create_bad_mobile_country_code(client, programme, base, country_code):
    p = await programme()
    body = corporate_body(p)
    body["rootUser"]["mobile"]["countryCode"] = country_code
    r = await client.post(f"{base}/corporates", headers=p.headers, json=body)
    assert conflict(r) == "MOBILE_OR_COUNTRY_CODE_INVALID"


@pytest.mark.parametrize("base", BOTH)
async def test_create_duplicate_root_email_is_refused_case_insensitively(client, programme, base):
    p = await programme()
    first = corporate_body(p)
    assert (
        await client.post(f"{base}/corporates", headers=p.headers, json=first)
    ).status_code == 200
    address = first["rootUser"]["email"]
    for dup in (address, address.upper(), address.capitalize()):
        body = corporate_body(p)
        body["rootUser"]["email"] = dup
        r = await client.post(f"{base}/corporates", headers=p.headers, json=body)
        assert conflict(r) == "ROOT_EMAIL_NOT_UNIQUE", dup
    # Another programme is another tenant: the same e-mail is free there.
    other = await programme()
    body = corporate_body(other)
    body["rootUser"]["email"] = address
    r = await client.post(f"{base}/corporates", headers=other.headers, json=body)
    assert r.status_code == 200, r.text


# Get


@pytest.mark.parametrize("base", BOTH)
async def test_get_answers_the_corporate(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base, verify_email=False)
    got = await get_corp(client, ident, base)
    expected = without_password_flag(ident.created)
    assert got == expected
    # The same corporate through the other version.
    other_base = OLD if base == LATEST else LATEST
    assert await get_corp(client, ident, other_base) == expected


# Update


FULL_UPDATE_LATEST = {
    "tag": "new_tag-2",
    "name": "Grace",
    "surname": "Hopper",
    "mobile": {"countryCode": "+356", "number": "79000001"},
    "dateOfBirth": {"year": 1970, "month": 1, "day": 2},
    "companyBusinessAddress": {
        "addressLine1": "2 Low Road",
        "addressLine2": "Floor 3",
        "city": "Leeds",
        "postCode": "LS1 1AA",
        "state": "West Yorkshire",
        "country": "GB",
    },
    "industry": "AUDIT",
    "sourceOfFunds": "RENT",
    "sourceOfFundsOther": "rental income",
    "baseCurrency": "GBP",
    "feeGroup": "PREMIUM",
}


@pytest.mark.parametrize("base", BOTH)
async def test_update_changes_only_the_fields_sent(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    before = await get_corp(client, ident, base)

    r = await patch(client, ident, {}, base)
    assert r.status_code == 200, r.text
    assert r.json() == before

    r = await patch(client, ident, {"tag": "only-tag"}, base)
    assert r.status_code == 200, r.text
    expected = copy.deepcopy(before)
    expected["tag"] = "only-tag"
    assert r.json() == expected
    assert await get_corp(client, ident, base) == expected

    body = dict(FULL_UPDATE_LATEST)
    if base == OLD:
        del body["dateOfBirth"]  # not part of the 3.1.0 update body
    r = await patch(client, ident, body, base)
    assert r.status_code == 200, r.text
    expected["tag"] = "new_tag-2"
    expected["rootUser"].update(
        name="Grace",
        surname="Hopper",
        mobile={"countryCode": "+356", "number": "79000001"},
    )
    if base == LATEST:
        expected["rootUser"]["dateOfBirth"] = {"year": 1970, "month": 1, "day": 2}
    expected["company"]["businessAddress"] = FULL_UPDATE_LATEST["companyBusinessAddress"]
    expected.update(
        industry="AUDIT",
        sourceOfFunds="RENT",
        sourceOfFundsOther="rental income",
        baseCurrency="GBP",
        feeGroup="PREMIUM",
    )
    assert r.json() == expected
    assert await get_corp(client, ident, base) == expected
    # Unsent fields kept their values: e-mail, its verification, company identity.
    assert expected["rootUser"]["email"] == ident.email
    assert expected["rootUser"]["emailVerified"] is True
    assert expected["company"]["name"] == "Acme Ltd"


async def test_update_3_1_0_ignores_date_of_birth(client, programme):
    p = await programme()
    ident = await sign_up(client, p, base=OLD)
    r = await patch(client, ident, {"dateOfBirth": {"year": 1970, "month": 1, "day": 2}}, OLD)
    assert r.status_code == 200, r.text
    assert r.json()["rootUser"]["dateOfBirth"] == {"year": 1980, "month": 12, "day": 10}


@pytest.mark.parametrize("base", BOTH)
async def test_update_email_resets_email_verified(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    assert (await get_corp(client, ident, base))["rootUser"]["emailVerified"] is True
    new = email()
    r = await patch(client, ident, {"email": new}, base)
    assert r.status_code == 200, r.text
    assert r.json()["rootUser"]["email"] == new
    assert r.json()["rootUser"]["emailVerified"] is False
    # The old address no longer names the root user; the new one does and can be verified.
    assert conflict(await send_email(client, p, ident.email, base)) == "EMAIL_NOT_FOUND"
    assert (await send_email(client, p, new, base)).status_code == 204
    assert (await verify_email(client, p, new, CODE, base)).status_code == 204
    assert (await get_corp(client, ident, base))["rootUser"]["emailVerified"] is True
    r = await login(client, p, new, base=base)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("base", BOTH)
async def test_code_sent_to_the_old_email_does_not_verify_the_new_one(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base, verify_email=False)
    assert (await send_email(client, p, ident.email, base)).status_code == 204
    new = email()
    assert (await patch(client, ident, {"email": new}, base)).status_code == 200
    r = await verify_email(client, p, new, CODE, base)
    assert conflict(r) == "VERIFICATION_CODE_INVALID"
    assert (await get_corp(client, ident, base))["rootUser"]["emailVerified"] is False


@pytest.mark.parametrize("base", BOTH)
async def test_update_email_of_another_user_is_email_not_unique(client, programme, base):
    p = await programme()
    a = await sign_up(client, p, base=base)
    b = await sign_up(client, p, base=base)
    before = await get_corp(client, b, base)
    for taken in (a.email, a.email.upper()):
        assert conflict(await patch(client, b, {"email": taken}, base)) == "EMAIL_NOT_UNIQUE"
    assert await get_corp(client, b, base) == before


@pytest.mark.parametrize("base", BOTH)
async def test_update_root_user_locked_once_kyb_approved(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    r = await client.post(f"{SIM}/corporates/{ident.id}/verify", headers=sim(p))
    assert r.status_code == 204
    before = await get_corp(client, ident, base)
    for change in (
        {"name": "Other"},
        {"surname": "Other"},
        {"email": email()},
        {"mobile": {"countryCode": "+44", "number": "7700900999"}},
        {"mobile": {"countryCode": "+356", "number": "7700900123"}},
        {"name": "Other", "tag": "with-tag"},
    ):
        r = await patch(client, ident, change, base)
        assert conflict(r) == "ROOT_USER_ALREADY_VERIFIED", change
    assert await get_corp(client, ident, base) == before  # nothing changed, tag included
    r = await patch(client, ident, {"tag": "still-free", "feeGroup": "PREMIUM"}, base)
    assert r.status_code == 200, r.text
    assert r.json()["tag"] == "still-free"
    assert r.json()["feeGroup"] == "PREMIUM"
    assert r.json()["rootUser"] == before["rootUser"]


@pytest.mark.parametrize("base", BOTH)
async def test_update_root_user_allowed_while_kyb_not_approved(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    reference = (await start_kyb(client, ident, base)).json()["reference"]
    assert (await client.post(f"/kyc/{reference}", data={"outcome": "reject"})).status_code == 303
    r = await patch(client, ident, {"name": "Renamed"}, base)
    assert r.status_code == 200, r.text
    assert r.json()["rootUser"]["name"] == "Renamed"


@pytest.mark.parametrize("base", BOTH)
@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"feeGroup": "GOLD"}, "FEE_GROUP_INVALID"),
        ({"baseCurrency": "JPY"}, "CURRENCY_UNSUPPORTED"),
        ({"mobile": {"countryCode": "abc", "number": "123"}}, "MOBILE_OR_COUNTRY_CODE_INVALID"),
        (
            {
                "companyBusinessAddress": {
                    "addressLine1": "x",
                    "city": "y",
                    "postCode": "1",
                    "country": "XX",
                }
            },
            "COUNTRY_INVALID",
        ),
    ],
    ids=lambda v: str(v)[:24],
)
async def test_update_refusals_change_nothing(client, programme, base, body, code):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    before = await get_corp(client, ident, base)
    # Sent with a valid change: the refusal must not keep it.
    r = await patch(client, ident, {**body, "tag": "must-not-stick", "name": "Nope"}, base)
    assert conflict(r) == code
    assert await get_corp(client, ident, base) == before


UPDATE_INVALID = [
    ({"tag": "no spaces"}, "tag", "REGEX"),
    ({"name": "Ann3"}, "name", "REGEX"),
    ({"surname": "Smith!"}, "surname", "REGEX"),
    ({"name": "A" * 21}, "name", "SIZE"),
    ({"baseCurrency": "eur"}, "baseCurrency", "REGEX"),
    ({"baseCurrency": "EURO"}, "baseCurrency", "SIZE"),
    ({"email": "not-an-email"}, "email", None),
    ({"mobile": {"countryCode": "+44", "number": "12a"}}, "mobile.number", "REGEX"),
    ({"mobile": {"number": "123"}}, "mobile.countryCode", "REQUIRED"),
    ({"industry": "MINING"}, "industry", "IN"),
    ({"companyBusinessAddress": {"city": "x"}}, "companyBusinessAddress.addressLine1", None),
]


@pytest.mark.parametrize("base", BOTH)
async def test_update_invalid_values_are_400(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base, verify_email=False)
    before = await get_corp(client, ident, base)
    wrong = []
    for body, name, error in UPDATE_INVALID:
        errors = invalid(await patch(client, ident, {"feeGroup": "PREMIUM", **body}, base))
        if name not in [n for n, _ in errors] or (error and (name, error) not in errors):
            wrong.append((body, errors))
    assert wrong == []
    assert await get_corp(client, ident, base) == before


async def test_update_company_type_on_3_1_0(client, programme):
    p = await programme()
    ident = await sign_up(client, p, base=OLD, verify_email=False)
    for company_type in ("SOLE_TRADER", "LLC"):
        r = await patch(client, ident, {"companyType": company_type}, OLD)
        assert r.status_code == 200, r.text
        assert r.json()["company"]["type"] == company_type
    r = await patch(client, ident, {"companyType": "SOLE_TRADER"}, OLD)
    assert r.json()["company"]["type"] == "SOLE_TRADER"
    for refused in (
        "PUBLIC_LIMITED_COMPANY",
        "LIMITED_LIABILITY_PARTNERSHIP",
        "NON_PROFIT_ORGANISATION",
    ):
        assert ("companyType", "IN") in invalid(
            await patch(client, ident, {"companyType": refused}, OLD)
        )
    assert (await get_corp(client, ident, OLD))["company"]["type"] == "SOLE_TRADER"
    # 3.29.1 has no companyType in its update body: it is not applied there.
    r = await patch(client, ident, {"companyType": "LLC"}, LATEST)
    assert r.status_code == 200, r.text
    assert r.json()["company"]["type"] == "SOLE_TRADER"


async def test_update_name_pattern_differs_between_versions(client, programme):
    p = await programme()
    ident = await sign_up(client, p, verify_email=False)
    for bracket in ("Ann[", "Ann]"):
        assert ("name", "REGEX") in invalid(await patch(client, ident, {"name": bracket}, OLD))
    r = await patch(client, ident, {"name": "Ann[e]"}, LATEST)
    assert r.status_code == 200, r.text
    assert r.json()["rootUser"]["name"] == "Ann[e]"


async def test_update_mobile_resets_mobile_verified_on_3_1_0(client, programme):
    p = await programme()
    ident = await sign_up(client, p, base=OLD)
    r = await client.post(f"{OLD}/corporates/verification/mobile/send", headers=ident.headers)
    assert r.status_code == 200, r.text
    r = await client.post(
        f"{OLD}/corporates/verification/mobile/verify",
        headers=ident.headers,
        json={"verificationCode": CODE},
    )
    assert r.status_code == 204, r.text
    assert (await get_corp(client, ident, OLD))["rootUser"]["mobileNumberVerified"] is True
    r = await patch(client, ident, {"mobile": {"countryCode": "+44", "number": "7700900555"}}, OLD)
    assert r.status_code == 200, r.text
    assert r.json()["rootUser"]["mobileNumberVerified"] is False


# Root-user e-mail verification


@pytest.mark.parametrize("base", BOTH)
async def test_email_send_and_verify(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base, verify_email=False)
    assert (await get_corp(client, ident, base))["rootUser"]["emailVerified"] is False
    r = await send_email(client, p, ident.email, base)
    assert r.status_code == 204, r.text
    assert r.content == b""
    r = await verify_email(client, p, ident.email.upper(), CODE, base)
    assert r.status_code == 204, r.text
    assert r.content == b""
    got = await get_corp(client, ident, base)
    assert got["rootUser"]["emailVerified"] is True
    assert got["rootUser"]["mobileNumberVerified"] is False


@pytest.mark.parametrize("base", BOTH)
async def test_email_send_unknown_or_not_a_corporate_root_is_email_not_found(
    client, programme, base
):
    p = await programme()
    assert conflict(await send_email(client, p, email(), base)) == "EMAIL_NOT_FOUND"
    consumer = await sign_up(client, p, "consumers", base, verify_email=False)
    assert conflict(await send_email(client, p, consumer.email, base)) == "EMAIL_NOT_FOUND"
    corporate = await sign_up(client, p, base=base)
    user_email = email()
    r = await client.post(
        f"{base}/users",
        headers=corporate.headers,
        json={"name": "Bob", "surname": "Builder", "email": user_email},
    )
    assert r.status_code == 200, r.text
    assert conflict(await send_email(client, p, user_email, base)) == "EMAIL_NOT_FOUND"
    # Another programme's corporate is unknown here.
    other = await programme()
    assert conflict(await send_email(client, other, corporate.email, base)) == "EMAIL_NOT_FOUND"


@pytest.mark.parametrize("base", BOTH)
async def test_email_verify_wrong_code_then_right_one(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base, verify_email=False)
    assert (await send_email(client, p, ident.email, base)).status_code == 204
    for wrong in ("654321", "000000"):
        r = await verify_email(client, p, ident.email, wrong, base)
        assert conflict(r) == "VERIFICATION_CODE_INVALID"
    assert (await get_corp(client, ident, base))["rootUser"]["emailVerified"] is False
    assert (await verify_email(client, p, ident.email, CODE, base)).status_code == 204
    assert (await get_corp(client, ident, base))["rootUser"]["emailVerified"] is True


@pytest.mark.parametrize("base", BOTH)
async def test_email_verify_without_a_sent_code_is_invalid(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base, verify_email=False)
    r = await verify_email(client, p, ident.email, CODE, base)
    assert conflict(r) == "VERIFICATION_CODE_INVALID"
    assert conflict(await verify_email(client, p, email(), CODE, base)) == (
        "VERIFICATION_CODE_INVALID"
    )
    assert (await get_corp(client, ident, base))["rootUser"]["emailVerified"] is False


@pytest.mark.parametrize("base", BOTH)
async def test_email_verify_a_consumer_email_through_corporates_is_invalid(client, programme, base):
    p = await programme()
    consumer = await sign_up(client, p, "consumers", base, verify_email=False)
    r = await client.post(
        f"{base}/consumers/verification/email/send",
        headers=p.headers,
        json={"email": consumer.email},
    )
    assert r.status_code == 204
    assert conflict(await verify_email(client, p, consumer.email, CODE, base)) == (
        "VERIFICATION_CODE_INVALID"
    )


EMAIL_VERIFY_INVALID = [
    ({"verificationCode": "12345"}, "verificationCode", "SIZE"),
    ({"verificationCode": "1234567"}, "verificationCode", "SIZE"),
    ({"verificationCode": "12345a"}, "verificationCode", "REGEX"),
    ({"verificationCode": None}, "verificationCode", "REQUIRED"),
    ({"email": None}, "email", "REQUIRED"),
    ({"email": "nope"}, "email", None),
]


@pytest.mark.parametrize("base", BOTH)
async def test_email_verify_malformed_is_400(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base, verify_email=False)
    assert (await send_email(client, p, ident.email, base)).status_code == 204
    wrong = []
    for change, name, error in EMAIL_VERIFY_INVALID:
        body = {"email": ident.email, "verificationCode": CODE, **change}
        body = {k: v for k, v in body.items() if v is not None}
        r = await client.post(
            f"{base}/corporates/verification/email/verify", headers=p.headers, json=body
        )
        errors = invalid(r)
        if name not in [n for n, _ in errors] or (error and (name, error) not in errors):
            wrong.append((change, errors))
    assert wrong == []
    assert (await get_corp(client, ident, base))["rootUser"]["emailVerified"] is False
    # Nothing above used the code up.
    assert (await verify_email(client, p, ident.email, CODE, base)).status_code == 204


@pytest.mark.parametrize("base", BOTH)
async def test_email_send_malformed_is_400(client, programme, base):
    p = await programme()
    r = await client.post(f"{base}/corporates/verification/email/send", headers=p.headers, json={})
    assert ("email", "REQUIRED") in invalid(r)
    r = await client.post(
        f"{base}/corporates/verification/email/send", headers=p.headers, json={"email": "x"}
    )
    assert "email" in [n for n, _ in invalid(r)]


# KYB


@pytest.mark.parametrize("base", BOTH)
async def test_kyb_get_shape_per_version(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base, verify_email=False)
    r = await client.get(f"{base}/corporates/kyb", headers=ident.headers)
    assert r.status_code == 200, r.text
    if base == LATEST:
        assert r.json() == {"kybStatus": "NOT_STARTED", "ongoingKybStatus": "NOT_STARTED"}
    else:
        assert r.json() == {"kybStatus": "NOT_STARTED"}


@pytest.mark.parametrize("base", BOTH)
async def test_kyb_start_needs_a_verified_email(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base, verify_email=False)
    assert conflict(await start_kyb(client, ident, base)) == "EMAIL_UNVERIFIED"
    assert await kyb_status(client, ident, base) == "NOT_STARTED"


@pytest.mark.parametrize("base", BOTH)
async def test_kyb_start_answers_a_reference_and_resumes_it(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    r = await start_kyb(client, ident, base)
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"reference"}
    reference = r.json()["reference"]
    assert isinstance(reference, str) and DIGITS.match(reference)
    assert await kyb_status(client, ident, base) == "INITIATED"
    again = await start_kyb(client, ident, base)
    assert again.status_code == 200, again.text
    assert again.json() == {"reference": reference}
    if base == LATEST:
        r = await client.get(f"{base}/corporates/kyb", headers=ident.headers)
        assert r.json()["ongoingKybStatus"] in {
            "NOT_STARTED",
            "INITIATED",
            "PENDING_REVIEW",
            "APPROVED",
            "REJECTED",
        }


@pytest.mark.parametrize("base", BOTH)
async def test_kyb_start_after_approval_is_refused(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    reference = (await start_kyb(client, ident, base)).json()["reference"]
    r = await client.post(f"/kyc/{reference}", data={"outcome": "approve"})
    assert r.status_code == 303
    assert await kyb_status(client, ident, base) == "APPROVED"
    assert conflict(await start_kyb(client, ident, base)) == "KYB_ALREADY_APPROVED"
    assert await kyb_status(client, ident, base) == "APPROVED"


@pytest.mark.parametrize("base", BOTH)
async def test_kyb_start_while_pending_review_is_refused(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    reference = (await start_kyb(client, ident, base)).json()["reference"]
    assert (await client.post(f"/kyc/{reference}", data={"outcome": "review"})).status_code == 303
    assert await kyb_status(client, ident, base) == "PENDING_REVIEW"
    assert conflict(await start_kyb(client, ident, base)) == "KYB_PENDING_REVIEW"


@pytest.mark.parametrize("base", BOTH)
@pytest.mark.parametrize("via", ["simulator", "page"])
async def test_kyb_after_permanent_rejection_is_refused(client, programme, base, via):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    reference = (await start_kyb(client, ident, base)).json()["reference"]
    if via == "simulator":
        r = await client.post(
            f"{SIM}/corporates/{ident.id}/reject", headers=sim(p), json={"permanent": True}
        )
        assert r.status_code == 204, r.text
    else:
        r = await client.post(f"/kyc/{reference}", data={"outcome": "reject_permanently"})
        assert r.status_code == 303
    assert await kyb_status(client, ident, base) == "REJECTED"
    assert conflict(await start_kyb(client, ident, base)) == "KYB_PERMANENTLY_REJECTED"
    assert await kyb_status(client, ident, base) == "REJECTED"


@pytest.mark.parametrize("base", BOTH)
@pytest.mark.parametrize("via", ["simulator", "simulator-no-body", "page"])
async def test_kyb_after_rejection_can_start_again(client, programme, base, via):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    first = (await start_kyb(client, ident, base)).json()["reference"]
    if via == "simulator":
        r = await client.post(
            f"{SIM}/corporates/{ident.id}/reject", headers=sim(p), json={"permanent": False}
        )
        assert r.status_code == 204, r.text
    elif via == "simulator-no-body":
        r = await client.post(f"{SIM}/corporates/{ident.id}/reject", headers=sim(p))
        assert r.status_code == 204, r.text
    else:
        assert (await client.post(f"/kyc/{first}", data={"outcome": "reject"})).status_code == 303
    assert await kyb_status(client, ident, base) == "REJECTED"
    r = await start_kyb(client, ident, base)
    assert r.status_code == 200, r.text
    second = r.json()["reference"]
    assert DIGITS.match(second)
    assert second != first
    assert await kyb_status(client, ident, base) == "INITIATED"
    page = await client.get(f"/kyc/{second}")
    assert page.status_code == 200
    assert "INITIATED" in page.text


# 3.1.0 root-user mobile verification


def mobile_path(step: str, base: str = OLD) -> str:
    return f"{base}/corporates/verification/mobile/{step}"


async def test_mobile_send_verify_flow_on_3_1_0(client, programme):
    p = await programme()
    ident = await sign_up(client, p, base=OLD)
    r = await client.post(mobile_path("send"), headers=ident.headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"timeLeftForRetry", "retriesLeft"}
    assert isinstance(body["timeLeftForRetry"], int) and not isinstance(
        body["timeLeftForRetry"], bool
    )
    assert body["timeLeftForRetry"] >= 0
    assert body["retriesLeft"] == 5

    r = await client.post(mobile_path("send"), headers=ident.headers)
    assert conflict(r) == "FREQUENCY_EXCEEDED"

    r = await client.post(f"{SIM}/clock/advance", headers=sim(p), json={"seconds": 16})
    assert r.status_code == 200, r.text
    r = await client.post(mobile_path("send"), headers=ident.headers)
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["retriesLeft"], int)

    r = await client.post(
        mobile_path("verify"), headers=ident.headers, json={"verificationCode": "654321"}
    )
    assert conflict(r) == "VERIFICATION_CODE_INVALID"
    assert (await get_corp(client, ident, OLD))["rootUser"]["mobileNumberVerified"] is False
    for bad in ("12345", "1234567", "abcdef"):
        r = await client.post(
            mobile_path("verify"), headers=ident.headers, json={"verificationCode": bad}
        )
        assert "verificationCode" in [n for n, _ in invalid(r)], bad
    r = await client.post(mobile_path("verify"), headers=ident.headers, json={})
    assert ("verificationCode", "REQUIRED") in invalid(r)

    r = await client.post(
        mobile_path("verify"), headers=ident.headers, json={"verificationCode": CODE}
    )
    assert r.status_code == 204, r.text
    assert r.content == b""
    got = await get_corp(client, ident, OLD)
    assert got["rootUser"]["mobileNumberVerified"] is True
    assert got["rootUser"]["emailVerified"] is True
    assert (await get_corp(client, ident, LATEST))["rootUser"]["mobileNumberVerified"] is True

    r = await client.post(f"{SIM}/clock/advance", headers=sim(p), json={"seconds": 16})
    assert r.status_code == 200
    assert conflict(await client.post(mobile_path("send"), headers=ident.headers)) == (
        "ALREADY_VERIFIED"
    )
    r = await client.post(
        mobile_path("verify"), headers=ident.headers, json={"verificationCode": CODE}
    )
    assert conflict(r) == "VERIFICATION_CODE_INVALID"


async def test_mobile_verify_without_a_sent_code_is_invalid(client, programme):
    p = await programme()
    ident = await sign_up(client, p, base=OLD)
    r = await client.post(
        mobile_path("verify"), headers=ident.headers, json={"verificationCode": CODE}
    )
    assert conflict(r) == "VERIFICATION_CODE_INVALID"
    assert (await get_corp(client, ident, OLD))["rootUser"]["mobileNumberVerified"] is False


@pytest.mark.parametrize("base", [LATEST, "/3.29.1/multi"])
async def test_mobile_verification_does_not_exist_on_3_29_1(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    r = await client.post(mobile_path("send", base), headers=ident.headers)
    assert r.status_code == 404, r.text
    r = await client.post(
        mobile_path("verify", base), headers=ident.headers, json={"verificationCode": CODE}
    )
    assert r.status_code == 404, r.text
    assert (await get_corp(client, ident))["rootUser"]["mobileNumberVerified"] is False


# Simulator


async def test_simulator_verify_approves_the_corporate(client, programme):
    p = await programme()
    ident = await sign_up(client, p, verify_email=False)
    r = await client.post(f"{SIM}/corporates/{ident.id}/verify", headers=sim(p))
    assert r.status_code == 204, r.text
    for base in BOTH:
        got = await get_corp(client, ident, base)
        assert got["rootUser"]["emailVerified"] is True
        assert got["rootUser"]["mobileNumberVerified"] is True
        assert await kyb_status(client, ident, base) == "APPROVED"
    assert conflict(await start_kyb(client, ident)) == "KYB_ALREADY_APPROVED"


async def test_simulator_verify_refusals(client, programme):
    p = await programme()
    other = await programme()
    ident = await sign_up(client, p, verify_email=False)
    consumer = await sign_up(client, p, "consumers", verify_email=False)
    foreign = await sign_up(client, other, verify_email=False)
    for unknown in ("999999999999", consumer.id, foreign.id):
        not_found(await client.post(f"{SIM}/corporates/{unknown}/verify", headers=sim(p)))
        not_found(
            await client.post(
                f"{SIM}/corporates/{unknown}/reject", headers=sim(p), json={"permanent": True}
            )
        )
    r = await client.post(f"{SIM}/corporates/{ident.id}/verify")
    assert r.status_code == 400, r.text
    r = await client.post(f"{SIM}/corporates/{ident.id}/verify", headers={"programme-key": "nope"})
    assert r.status_code == 401
    for who in (ident, foreign):
        assert await kyb_status(client, who) == "NOT_STARTED"
        assert (await get_corp(client, who))["rootUser"]["emailVerified"] is False
    r = await client.get("/multi/consumers/kyc", headers=consumer.headers)
    assert r.json()["fullDueDiligence"] == "NOT_STARTED"


# The sandbox provider page


async def test_sandbox_page_shows_and_decides(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    reference = (await start_kyb(client, ident)).json()["reference"]
    page = await client.get(f"/kyc/{reference}")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "INITIATED" in page.text
    assert "Acme Ltd" in page.text
    r = await client.post(f"/kyc/{reference}", data={"outcome": "approve"})
    assert r.status_code == 303
    assert r.headers["location"] == f"/kyc/{reference}"
    assert "APPROVED" in (await client.get(f"/kyc/{reference}")).text
    for base in BOTH:
        assert await kyb_status(client, ident, base) == "APPROVED"


async def test_sandbox_page_refusals(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    reference = (await start_kyb(client, ident)).json()["reference"]
    unknown = "1" + reference[1:] if reference[0] != "1" else "2" + reference[1:]
    assert (await client.get(f"/kyc/{unknown}")).status_code == 404
    assert (await client.post(f"/kyc/{unknown}", data={"outcome": "approve"})).status_code == 404
    r = await client.post(f"/kyc/{reference}", data={"outcome": "maybe"})
    assert r.status_code == 400
    assert await kyb_status(client, ident) == "INITIATED"


async def test_sandbox_page_does_not_serve_live_programmes(client, programme, container):
    p = await programme(mode="live")
    body = corporate_body(p)
    r = await client.post("/multi/corporates", headers=p.headers, json=body)
    assert r.status_code == 200, r.text
    created = r.json()
    address = body["rootUser"]["email"]
    assert (await send_email(client, p, address)).status_code == 204
    async with container.db.transaction() as session:
        rows = (
            (
                await session.execute(
                    select(OutboxMessage).where(
                        OutboxMessage.programme_id == int(p.id),
                        OutboxMessage.recipient == address,
                    )
                )
            )
            .scalars()
            .all()
        )
    assert len(rows) == 1
    code = re.search(r"\b(\d{6})\b", rows[0].body)
    assert code is not None
    if code.group(1) != CODE:  # a live code is random; the sandbox one must not work then
        assert conflict(await verify_email(client, p, address, CODE)) == "VERIFICATION_CODE_INVALID"
    assert (await verify_email(client, p, address, code.group(1))).status_code == 204
    r = await client.post(
        f"/multi/passwords/{created['rootUser']['id']['id']}/create",
        headers=p.headers,
        json={"password": {"value": PASSWORD}},
    )
    assert r.status_code == 200, r.text
    headers = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
    r = await client.post("/multi/corporates/kyb", headers=headers)
    assert r.status_code == 200, r.text
    reference = r.json()["reference"]
    assert (await client.get(f"/kyc/{reference}")).status_code == 404
    assert (await client.post(f"/kyc/{reference}", data={"outcome": "approve"})).status_code == 404
    r = await client.get("/multi/corporates/kyb", headers=headers)
    assert r.json()["kybStatus"] == "INITIATED"
    # The simulator is not there for live programmes either.
    r = await client.post(f"{SIM}/corporates/{created['id']['id']}/verify", headers=sim(p))
    assert r.status_code == 404


# Refusals shared by every corporate operation


# (method, path, body, logged-in) of every corporate operation, per base URL
COMMON_OPERATIONS = [
    ("POST", "/corporates", "create", False),
    ("GET", "/corporates", None, True),
    ("PATCH", "/corporates", {"tag": "changed"}, True),
    ("POST", "/corporates/verification/email/send", "email", False),
    ("POST", "/corporates/verification/email/verify", "email+code", False),
    ("POST", "/corporates/kyb", None, True),
    ("GET", "/corporates/kyb", None, True),
]
OPERATIONS = {
    LATEST: COMMON_OPERATIONS,
    "/3.29.1/multi": COMMON_OPERATIONS,
    OLD: [
        *COMMON_OPERATIONS,
        ("POST", "/corporates/verification/mobile/send", None, True),
        ("POST", "/corporates/verification/mobile/verify", {"verificationCode": CODE}, True),
    ],
}


def request_body(p: Any, spec: Any, ident: Any) -> Any:
    if spec == "create":
        return corporate_body(p)
    if spec == "email":
        return {"email": ident.email}
    if spec == "email+code":
        return {"email": ident.email, "verificationCode": CODE}
    return spec


@pytest.mark.parametrize("base", list(OPERATIONS))
async def test_refusals_of_every_operation(client, programme, base):
    """D7 for each operation: no api-key 400, unknown key 401 (no body); logged-in operations:
    no or bad token 401, another programme's key 403, a consumer's token 403, a logged-out
    token 401; and none of these refusals changes anything."""
    p = await programme()
    other = await programme()
    ident = await sign_up(client, p, base=base, verify_email=False)
    consumer = await sign_up(client, p, "consumers", base, verify_email=False)
    auth = {"Authorization": f"Bearer {ident.token}"}
    wrong: list[tuple[str, str, str, int]] = []

    async def expect(op: tuple[Any, ...], case: str, headers: dict[str, str], status: int) -> None:
        method, path, spec, _ = op
        r = await client.request(
            method, f"{base}{path}", headers=headers, json=request_body(p, spec, ident)
        )
        empty = status == 400 or r.content == b""
        if r.status_code != status or not empty:
            wrong.append((f"{method} {path}", case, r.text, r.status_code))

    for op in OPERATIONS[base]:
        token = auth if op[3] else {}
        await expect(op, "no api-key", token, 400)
        await expect(op, "empty api-key", {"api-key": "", **token}, 400)
        await expect(op, "unknown api-key", {"api-key": "unknown-key", **token}, 401)
        if op[3]:
            await expect(op, "no token", p.headers, 401)
            await expect(op, "bad token", {**p.headers, "Authorization": "Bearer nope"}, 401)
            await expect(op, "other programme's key", {**other.headers, **auth}, 403)
            await expect(op, "consumer token", consumer.headers, 403)
    assert (await client.post(f"{base}/logout", headers=ident.headers)).status_code in (200, 204)
    for op in OPERATIONS[base]:
        if op[3]:
            await expect(op, "logged-out token", ident.headers, 401)
    assert wrong == []
    # None of the refusals changed anything.
    fresh = await login(client, p, ident.email, base=base)
    assert fresh.status_code == 200, fresh.text
    ident.token = fresh.json()["token"]
    assert await get_corp(client, ident, LATEST) == without_password_flag(ident.created)
    assert await kyb_status(client, ident) == "NOT_STARTED"
    if base == OLD:  # no mobile code was sent by the refused calls
        r = await client.post(
            mobile_path("verify"), headers=ident.headers, json={"verificationCode": CODE}
        )
        assert conflict(r) == "VERIFICATION_CODE_INVALID"
    assert conflict(await verify_email(client, p, ident.email, CODE, base)) == (
        "VERIFICATION_CODE_INVALID"
    )


async def test_each_token_sees_and_changes_only_its_own_corporate(client, programme):
    p = await programme()
    a = await sign_up(client, p, base=OLD)
    b = await sign_up(client, p, base=OLD)
    b_before = await get_corp(client, b, OLD)
    for base in (*BOTH, "/3.29.1/multi"):
        got = await get_corp(client, a, base)
        assert got["id"]["id"] == a.id
        assert got["rootUser"]["email"] == a.email
    r = await patch(client, a, {"tag": "a-only", "name": "Alice", "feeGroup": "PREMIUM"})
    assert r.status_code == 200
    assert r.json()["id"]["id"] == a.id
    assert (await start_kyb(client, a)).status_code == 200
    assert (await client.post(mobile_path("send"), headers=a.headers)).status_code == 200
    r = await client.post(mobile_path("verify"), headers=a.headers, json={"verificationCode": CODE})
    assert r.status_code == 204
    assert await get_corp(client, b, OLD) == b_before
    assert await kyb_status(client, b) == "NOT_STARTED"
    # B's mobile code was never sent: A's verification could not have used it.
    r = await client.post(mobile_path("verify"), headers=b.headers, json={"verificationCode": CODE})
    assert conflict(r) == "VERIFICATION_CODE_INVALID"
    a_now = await get_corp(client, a, OLD)
    assert a_now["tag"] == "a-only"
    assert a_now["rootUser"]["mobileNumberVerified"] is True


@pytest.mark.parametrize("base", BOTH)
async def test_birth_date_stays_editable_after_kyb(client, programme, base):
    """3.29.1 locks only the root user's name, surname, e-mail and mobile after approval."""
    p = await programme()
    ident = await sign_up(client, p, base=base)
    r = await client.post(
        f"/simulate/api/corporates/{ident.id}/verify", headers={"programme-key": p.api_key}
    )
    assert r.status_code == 204
    dob = {"year": 1975, "month": 5, "day": 6}
    r = await patch(client, ident, {"dateOfBirth": dob}, base)
    assert r.status_code == 200, r.text
    if base == "/multi":
        assert (await get_corp(client, ident, base))["rootUser"]["dateOfBirth"] == dob
    r = await patch(client, ident, {"surname": "Changed"}, base)
    assert conflict(r) == "ROOT_USER_ALREADY_VERIFIED"
