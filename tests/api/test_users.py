"""Authorised users (contract §5.4) on 3.29.1 (`/multi`) and 3.1.0 (`/3.1.0/multi`): create, list,
get, update, activate and deactivate, invites, e-mail verification and KYC of a user, and the
refusals every `/users` operation shares (D7)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from multibank.kernel.ids import new_id
from multibank.users.models import User
from tests.conftest import Prog
from tests.factories import CODE, PASSWORD, Identity, email, login, sign_up

LATEST = "/multi"
LEGACY = "/3.1.0/multi"
BASES = [LATEST, LEGACY]
DIGITS = re.compile(r"^[0-9]+$")
USER_KEYS_310 = {"id", "identity", "name", "surname", "email", "active"}
DAY = 86_400


def user_body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "Bob", "surname": "Builder", "email": email()}
    body.update(over)
    return body


async def create_user(
    client: httpx.AsyncClient, ident: Identity, base: str = LATEST, **over: Any
) -> dict[str, Any]:
    r = await client.post(f"{base}/users", headers=ident.headers, json=user_body(**over))
    assert r.status_code == 200, r.text
    return r.json()


async def invited_user(
    client: httpx.AsyncClient, ident: Identity, base: str = LATEST, **over: Any
) -> tuple[dict[str, Any], str]:
    """A user who consumed an invite: (user, bearer token of that user)."""
    user = await create_user(client, ident, base, **over)
    r = await client.post(f"{base}/users/{user['id']}/invite", headers=ident.headers)
    assert r.status_code == 204, r.text
    r = await client.post(
        f"{base}/users/{user['id']}/invite/consume",
        headers=ident.p.headers,
        json={"inviteCode": CODE, "password": {"value": PASSWORD}},
    )
    assert r.status_code == 200, r.text
    return user, r.json()["token"]


def bearer(p: Prog, token: str) -> dict[str, str]:
    return {**p.headers, "Authorization": f"Bearer {token}"}


async def advance(client: httpx.AsyncClient, p: Prog, seconds: int) -> None:
    r = await client.post(
        "/simulate/api/clock/advance",
        headers={"programme-key": p.api_key},
        json={"seconds": seconds},
    )
    assert r.status_code == 200, r.text


async def get_user(client: httpx.AsyncClient, ident: Identity, user_id: str, base: str = LATEST):
    r = await client.get(f"{base}/users/{user_id}", headers=ident.headers)
    assert r.status_code == 200, r.text
    return r.json()


def invalid_fields(r: httpx.Response) -> dict[str, str]:
    assert r.status_code == 400, r.text
    body = r.json()
    assert isinstance(body["message"], str)
    return {f["fieldName"]: f["error"] for f in body["syntaxErrors"]["invalidFields"]}


def assert_409(r: httpx.Response, code: str) -> None:
    assert r.status_code == 409, r.text
    assert r.json() == {"errorCode": code}


def assert_404(r: httpx.Response) -> None:
    assert r.status_code == 404, r.text
    assert set(r.json()) == {"code", "message"}


# Create


@pytest.mark.parametrize("kind", ["corporates", "consumers"])
@pytest.mark.parametrize("base", BASES)
async def test_create_user(client, programme, base, kind):
    p = await programme()
    ident = await sign_up(client, p, kind, base)
    sent = user_body(
        mobile={"countryCode": "+356", "number": "79111111"},
        dateOfBirth={"year": 1985, "month": 3, "day": 4},
    )
    r = await client.post(f"{base}/users", headers=ident.headers, json=sent)
    assert r.status_code == 200, r.text
    user = r.json()
    assert DIGITS.match(user["id"])
    assert user["id"] != ident.root_id
    assert user["identity"] == {"type": kind[:-1].upper(), "id": ident.id}
    assert (user["name"], user["surname"], user["email"]) == (
        sent["name"],
        sent["surname"],
        sent["email"],
    )
    assert user["active"] is True
    if base == LATEST:
        assert user["mobile"] == sent["mobile"]
        assert user["dateOfBirth"] == sent["dateOfBirth"]
    else:
        # 3.1.0 has no mobile or date of birth: they are ignored and never answered.
        assert set(user) == USER_KEYS_310
    assert await get_user(client, ident, user["id"], base) == user


async def test_create_without_optional_fields_answers_neither(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    user = await create_user(client, ident)
    assert set(user) == USER_KEYS_310


async def test_legacy_version_never_shows_mobile_or_date_of_birth(client, programme):
    """A user created through 3.29.1 with both fields reads without them through 3.1.0 (D11)."""
    p = await programme()
    ident = await sign_up(client, p)
    user = await create_user(
        client,
        ident,
        mobile={"countryCode": "+44", "number": "7700900999"},
        dateOfBirth={"year": 1990, "month": 5, "day": 6},
    )
    assert "mobile" in user
    assert "dateOfBirth" in user
    legacy = await get_user(client, ident, user["id"], LEGACY)
    assert set(legacy) == USER_KEYS_310
    assert legacy == {k: v for k, v in user.items() if k in USER_KEYS_310}
    r = await client.get(f"{LEGACY}/users", headers=ident.headers)
    assert [set(u) for u in r.json()["users"]] == [USER_KEYS_310]
    r = await client.patch(f"{LEGACY}/users/{user['id']}", headers=ident.headers, json={})
    assert r.status_code == 200, r.text
    assert set(r.json()) == USER_KEYS_310
    # ... and 3.1.0 leaves them alone.
    assert (await get_user(client, ident, user["id"]))["mobile"] == user["mobile"]


@pytest.mark.parametrize("base", BASES)
async def test_create_refuses_malformed_fields(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    url = f"{base}/users"
    r = await client.post(url, headers=ident.headers, json=user_body(name="N" * 21))
    assert invalid_fields(r) == {"name": "SIZE"}
    r = await client.post(url, headers=ident.headers, json=user_body(surname="S" * 21))
    assert invalid_fields(r) == {"surname": "SIZE"}
    r = await client.post(url, headers=ident.headers, json=user_body(email="not-an-e-mail"))
    assert "email" in invalid_fields(r)
    r = await client.post(url, headers=ident.headers, json={"name": "Bob", "surname": "B"})
    assert invalid_fields(r) == {"email": "REQUIRED"}
    r = await client.get(url, headers=ident.headers)
    assert r.json()["count"] == 0  # nothing was created
    # 20 characters is the limit, not beyond it.
    user = await create_user(client, ident, base, name="N" * 20, surname="S" * 20)
    assert (user["name"], user["surname"]) == ("N" * 20, "S" * 20)


@pytest.mark.parametrize("base", BASES)
async def test_create_refuses_an_e_mail_in_use_anywhere_in_the_programme(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    other = await sign_up(client, p, "consumers", base=base)
    taken = await create_user(client, ident, base)
    others_user = await create_user(client, other, base)
    for used in (
        taken["email"],
        taken["email"].upper(),
        ident.email,  # the root user's
        ident.email.upper(),
        others_user["email"],  # another identity's user
        other.email,  # another identity's root user
    ):
        r = await client.post(f"{base}/users", headers=ident.headers, json=user_body(email=used))
        assert_409(r, "EMAIL_NOT_UNIQUE")
    r = await client.get(f"{base}/users", headers=ident.headers)
    assert r.json()["count"] == 1
    # E-mails are unique per programme only.
    p2 = await programme()
    ident2 = await sign_up(client, p2, base=base)
    await create_user(client, ident2, base, email=taken["email"])


async def test_create_mobile_rules(client, programme):
    p = await programme()
    ident = await sign_up(client, p)  # root mobile +44 7700900123
    url = f"{LATEST}/users"
    for code in ("abc", "+0", "44a"):
        body = user_body(mobile={"countryCode": code, "number": "7700900555"})
        r = await client.post(url, headers=ident.headers, json=body)
        assert_409(r, "MOBILE_OR_COUNTRY_CODE_INVALID")
    first = await create_user(client, ident, mobile={"countryCode": "+44", "number": "7700900555"})
    for mobile in (first["mobile"], {"countryCode": "+44", "number": "7700900123"}):
        body = user_body(mobile=mobile)
        assert_409(await client.post(url, headers=ident.headers, json=body), "MOBILE_NOT_UNIQUE")
    r = await client.get(url, headers=ident.headers)
    assert r.json()["count"] == 1
    # Unique within the identity only: another identity's user may have the same number.
    other = await sign_up(client, p)
    again = await create_user(client, other, mobile=first["mobile"])
    assert again["mobile"] == first["mobile"]
    # A number without the `+` is a valid prefix too.
    await create_user(client, ident, mobile={"countryCode": "356", "number": "79000001"})


# List


@pytest.mark.parametrize("base", BASES)
async def test_list_pages_and_filters(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    r = await client.get(f"{base}/users", headers=ident.headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"users": [], "count": 0, "responseCount": 0}  # the root is not listed

    users = [await create_user(client, ident, base) for _ in range(3)]
    ids = {u["id"] for u in users}
    r = await client.get(f"{base}/users", headers=ident.headers)
    body = r.json()
    assert (body["count"], body["responseCount"]) == (3, 3)
    assert {u["id"] for u in body["users"]} == ids
    assert ident.root_id not in {u["id"] for u in body["users"]}
    assert {u["id"]: u for u in body["users"]} == {u["id"]: u for u in users}

    first = (await client.get(f"{base}/users?offset=0&limit=2", headers=ident.headers)).json()
    second = (await client.get(f"{base}/users?offset=2&limit=2", headers=ident.headers)).json()
    assert (first["count"], first["responseCount"]) == (3, 2)
    assert (second["count"], second["responseCount"]) == (3, 1)
    paged = [u["id"] for u in first["users"] + second["users"]]
    assert sorted(paged) == sorted(ids)
    beyond = (await client.get(f"{base}/users?offset=3", headers=ident.headers)).json()
    assert beyond == {"users": [], "count": 3, "responseCount": 0}

    off = users[1]["id"]
    r = await client.post(f"{base}/users/{off}/deactivate", headers=ident.headers)
    assert r.status_code == 204
    active = (await client.get(f"{base}/users?active=true", headers=ident.headers)).json()
    assert (active["count"], {u["id"] for u in active["users"]}) == (2, ids - {off})
    inactive = (await client.get(f"{base}/users?active=false", headers=ident.headers)).json()
    assert inactive["count"] == 1
    assert [(u["id"], u["active"]) for u in inactive["users"]] == [(off, False)]

    wanted = users[2]
    r = await client.get(f"{base}/users", headers=ident.headers, params={"email": wanted["email"]})
    assert r.json() == {"users": [wanted], "count": 1, "responseCount": 1}
    for nobody in (ident.email, email()):
        r = await client.get(f"{base}/users", headers=ident.headers, params={"email": nobody})
        assert r.json()["count"] == 0
    r = await client.get(
        f"{base}/users", headers=ident.headers, params={"email": wanted["email"], "active": "false"}
    )
    assert r.json()["count"] == 0


@pytest.mark.parametrize("base", BASES)
async def test_list_refuses_bad_paging(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    for query, field in (
        ("limit=0", "limit"),
        ("offset=-1", "offset"),
        ("limit=x", "limit"),
        ("email=not-an-e-mail", "email"),
    ):
        r = await client.get(f"{base}/users?{query}", headers=ident.headers)
        assert field in invalid_fields(r), query


async def test_list_limit_is_capped_at_100(client, programme, container):
    p = await programme()
    ident = await sign_up(client, p)
    made = await create_user(client, ident)
    # 100 more users of the identity, written straight to the database (cheaper than the API).
    async with container.db.transaction() as db:
        now = container.clock.now_ms()
        for i in range(100):
            address = f"cap{i}-{email()}"
            db.add(
                User(
                    id=new_id(),
                    programme_id=int(p.id),
                    identity_id=int(ident.id),
                    identity_type="CORPORATE",
                    role="USER",
                    name="Cap",
                    surname=f"User{i}",
                    email=address,
                    email_key=address,
                    password_history=[],
                    created_at=now,
                )
            )
    for base in BASES:
        for limit in ("500", "101", None):
            params = {"limit": limit} if limit else {}
            r = await client.get(f"{base}/users", headers=ident.headers, params=params)
            body = r.json()
            assert (body["count"], body["responseCount"], len(body["users"])) == (101, 100, 100)
        first = await client.get(f"{base}/users?limit=500", headers=ident.headers)
        rest = await client.get(f"{base}/users?offset=100&limit=500", headers=ident.headers)
        assert rest.json()["responseCount"] == 1
        ids = {u["id"] for u in first.json()["users"] + rest.json()["users"]}
        assert len(ids) == 101
        assert made["id"] in ids


# Get


@pytest.mark.parametrize("base", BASES)
async def test_get_is_limited_to_the_callers_authorised_users(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    other = await sign_up(client, p, base=base)
    mine = await create_user(client, ident, base)
    theirs = await create_user(client, other, base)
    assert await get_user(client, ident, mine["id"], base) == mine
    for user_id in (theirs["id"], ident.root_id, other.root_id, "999999999999"):
        assert_404(await client.get(f"{base}/users/{user_id}", headers=ident.headers))
    # A user's own token reads its own record too.
    _, token = await invited_user(client, ident, base)
    r = await client.get(f"{base}/users/{mine['id']}", headers=bearer(p, token))
    assert r.json() == mine


# Update


@pytest.mark.parametrize("base", BASES)
async def test_update_changes_only_the_fields_sent(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    user = await create_user(client, ident, base)
    url = f"{base}/users/{user['id']}"
    r = await client.patch(url, headers=ident.headers, json={"name": "Robert"})
    assert r.status_code == 200, r.text
    assert r.json() == {**user, "name": "Robert"}
    new_email = email()
    r = await client.patch(
        url, headers=ident.headers, json={"surname": "Smith", "email": new_email}
    )
    assert r.json() == {**user, "name": "Robert", "surname": "Smith", "email": new_email}
    r = await client.patch(url, headers=ident.headers, json={})
    assert r.json() == {**user, "name": "Robert", "surname": "Smith", "email": new_email}
    assert await get_user(client, ident, user["id"], base) == r.json()
    r = await client.patch(url, headers=ident.headers, json={"name": "N" * 21})
    assert invalid_fields(r) == {"name": "SIZE"}
    # The old e-mail is free again; the new one is not.
    await create_user(client, ident, base, email=user["email"])
    r = await client.post(f"{base}/users", headers=ident.headers, json=user_body(email=new_email))
    assert_409(r, "EMAIL_NOT_UNIQUE")


async def test_update_mobile_and_date_of_birth(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    user = await create_user(client, ident, dateOfBirth={"year": 1970, "month": 1, "day": 1})
    url = f"{LATEST}/users/{user['id']}"
    mobile = {"countryCode": "+356", "number": "79222222"}
    r = await client.patch(url, headers=ident.headers, json={"mobile": mobile})
    assert r.json() == {**user, "mobile": mobile}
    dob = {"year": 2000, "month": 2, "day": 29}
    r = await client.patch(url, headers=ident.headers, json={"dateOfBirth": dob})
    assert r.json() == {**user, "mobile": mobile, "dateOfBirth": dob}
    # Its own number again is no conflict; the root user's is.
    r = await client.patch(url, headers=ident.headers, json={"mobile": mobile})
    assert r.status_code == 200, r.text
    root_mobile = {"countryCode": "+44", "number": "7700900123"}
    r = await client.patch(url, headers=ident.headers, json={"mobile": root_mobile})
    assert_409(r, "MOBILE_NOT_UNIQUE")
    bad = {"countryCode": "xyz", "number": "79222223"}
    r = await client.patch(url, headers=ident.headers, json={"mobile": bad})
    assert_409(r, "MOBILE_OR_COUNTRY_CODE_INVALID")
    assert (await get_user(client, ident, user["id"]))["mobile"] == mobile


@pytest.mark.parametrize("base", BASES)
async def test_update_refuses_an_e_mail_in_use(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    user = await create_user(client, ident, base)
    other = await create_user(client, ident, base)
    url = f"{base}/users/{user['id']}"
    for used in (other["email"], other["email"].upper(), ident.email, ident.email.upper()):
        r = await client.patch(url, headers=ident.headers, json={"email": used, "name": "Changed"})
        assert_409(r, "EMAIL_NOT_UNIQUE")
    assert await get_user(client, ident, user["id"], base) == user  # the name did not change
    # Its own address (in any case) is not a conflict.
    r = await client.patch(url, headers=ident.headers, json={"email": user["email"]})
    assert r.status_code == 200, r.text
    r = await client.patch(url, headers=ident.headers, json={"email": user["email"].upper()})
    assert r.status_code == 200, r.text


# Deactivate and activate


@pytest.mark.parametrize("base", BASES)
async def test_deactivate_and_activate(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    user, token = await invited_user(client, ident, base)
    assert (await client.get(f"{base}/users", headers=bearer(p, token))).status_code == 200

    r = await client.post(f"{base}/users/{user['id']}/deactivate", headers=ident.headers)
    assert r.status_code == 204, r.text
    assert r.content == b""
    assert (await get_user(client, ident, user["id"], base))["active"] is False
    r = await login(client, p, user["email"], base=base)
    assert (r.status_code, r.content) == (403, b"")
    r = await client.get(f"{base}/users", headers=bearer(p, token))
    assert (r.status_code, r.content) == (401, b"")

    r = await client.post(f"{base}/users/{user['id']}/activate", headers=ident.headers)
    assert r.status_code == 204, r.text
    assert (await get_user(client, ident, user["id"], base))["active"] is True
    r = await login(client, p, user["email"], base=base)
    assert r.status_code == 200, r.text
    assert r.json()["credentials"] == {"type": "USER", "id": user["id"]}
    assert (
        await client.get(f"{base}/users", headers=bearer(p, r.json()["token"]))
    ).status_code == 200


async def test_an_authorised_user_can_activate_another(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    _, first_token = await invited_user(client, ident)
    second, _ = await invited_user(client, ident)
    r = await client.post(
        f"{LATEST}/users/{second['id']}/deactivate", headers=bearer(p, first_token)
    )
    assert r.status_code == 204
    assert (await login(client, p, second["email"])).status_code == 403
    r = await client.post(f"{LATEST}/users/{second['id']}/activate", headers=bearer(p, first_token))
    assert r.status_code == 204
    assert (await login(client, p, second["email"])).status_code == 200


# Invites


@pytest.mark.parametrize("base", BASES)
async def test_invite_send_validate_consume(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    user = await create_user(client, ident, base)
    url = f"{base}/users/{user['id']}/invite"
    r = await client.post(url, headers=ident.headers)
    assert (r.status_code, r.content) == (204, b"")
    # Validate and consume need the api-key only.
    r = await client.post(f"{url}/validate", headers=p.headers, json={"inviteCode": CODE})
    assert (r.status_code, r.content) == (204, b"")
    r = await client.post(f"{url}/validate", headers=p.headers, json={"inviteCode": CODE})
    assert r.status_code == 204  # validating does not use the invite up
    r = await client.post(
        f"{url}/consume",
        headers=p.headers,
        json={"inviteCode": CODE, "password": {"value": PASSWORD}},
    )
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"token"}
    token = r.json()["token"]
    r = await client.get(f"{base}/users", headers=bearer(p, token))
    assert r.status_code == 200, r.text
    assert [u["id"] for u in r.json()["users"]] == [user["id"]]
    assert (await login(client, p, user["email"], base=base)).status_code == 200

    assert_409(await client.post(url, headers=ident.headers), "INVITE_ALREADY_CONSUMED")
    r = await client.post(f"{url}/validate", headers=p.headers, json={"inviteCode": CODE})
    assert_409(r, "INVITE_OR_INVITE_CODE_INVALID")
    r = await client.post(
        f"{url}/consume",
        headers=p.headers,
        json={"inviteCode": CODE, "password": {"value": "An0ther-secret!"}},
    )
    assert_409(r, "INVITE_OR_INVITE_CODE_INVALID")
    assert (await login(client, p, user["email"], "An0ther-secret!", base)).status_code == 403


@pytest.mark.parametrize("base", BASES)
async def test_wrong_invite_code_does_not_use_the_invite_up(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    user = await create_user(client, ident, base)
    url = f"{base}/users/{user['id']}/invite"
    assert (await client.post(url, headers=ident.headers)).status_code == 204
    r = await client.post(f"{url}/validate", headers=p.headers, json={"inviteCode": "654321"})
    assert_409(r, "INVITE_OR_INVITE_CODE_INVALID")
    r = await client.post(f"{url}/validate", headers=p.headers, json={"inviteCode": CODE})
    assert r.status_code == 204, r.text
    r = await client.post(
        f"{url}/consume",
        headers=p.headers,
        json={"inviteCode": "654321", "password": {"value": PASSWORD}},
    )
    assert_409(r, "INVITE_OR_INVITE_CODE_INVALID")
    assert (await login(client, p, user["email"], base=base)).status_code == 403
    r = await client.post(
        f"{url}/consume",
        headers=p.headers,
        json={"inviteCode": CODE, "password": {"value": PASSWORD}},
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("base", BASES)
async def test_a_deactivated_user_cannot_consume_an_invite(client, programme, base):
    """Consuming logs the user in, which a deactivated user may not."""
    p = await programme()
    ident = await sign_up(client, p, base=base)
    user = await create_user(client, ident, base)
    url = f"{base}/users/{user['id']}"
    assert (await client.post(f"{url}/invite", headers=ident.headers)).status_code == 204
    assert (await client.post(f"{url}/deactivate", headers=ident.headers)).status_code == 204
    consume = {"inviteCode": CODE, "password": {"value": PASSWORD}}
    r = await client.post(f"{url}/invite/consume", headers=p.headers, json=consume)
    assert (r.status_code, r.content) == (403, b"")
    assert (await login(client, p, user["email"], base=base)).status_code == 403
    # Activated again, the same invite still works.
    assert (await client.post(f"{url}/activate", headers=ident.headers)).status_code == 204
    r = await client.post(f"{url}/invite/consume", headers=p.headers, json=consume)
    assert r.status_code == 200, r.text
    assert (
        await client.get(f"{base}/users", headers=bearer(p, r.json()["token"]))
    ).status_code == 200


@pytest.mark.parametrize("base", BASES)
async def test_invite_not_sent_is_invalid(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    user = await create_user(client, ident, base)
    url = f"{base}/users/{user['id']}/invite"
    r = await client.post(f"{url}/validate", headers=p.headers, json={"inviteCode": CODE})
    assert_409(r, "INVITE_OR_INVITE_CODE_INVALID")
    r = await client.post(
        f"{url}/consume",
        headers=p.headers,
        json={"inviteCode": CODE, "password": {"value": PASSWORD}},
    )
    assert_409(r, "INVITE_OR_INVITE_CODE_INVALID")


async def test_invite_lasts_thirty_days(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    user = await create_user(client, ident)
    url = f"{LATEST}/users/{user['id']}/invite"
    assert (await client.post(url, headers=ident.headers)).status_code == 204
    await advance(client, p, 29 * DAY)
    r = await client.post(f"{url}/validate", headers=p.headers, json={"inviteCode": CODE})
    assert r.status_code == 204, r.text
    await advance(client, p, 2 * DAY)  # 31 days after sending
    r = await client.post(f"{url}/validate", headers=p.headers, json={"inviteCode": CODE})
    assert_409(r, "INVITE_OR_INVITE_CODE_INVALID")
    consume = {"inviteCode": CODE, "password": {"value": PASSWORD}}
    r = await client.post(f"{url}/consume", headers=p.headers, json=consume)
    assert_409(r, "INVITE_OR_INVITE_CODE_INVALID")
    # A new invite works again (the root logs in anew: its session idled out long ago).
    r = await login(client, p, ident.email)
    ident.token = r.json()["token"]
    assert (await client.post(url, headers=ident.headers)).status_code == 204
    r = await client.post(f"{url}/consume", headers=p.headers, json=consume)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("password", "code"),
    [
        ("Sh0rt!", "PASSWORD_TOO_SHORT"),
        ("Aa1!" + "a" * 27, "PASSWORD_TOO_LONG"),
        ("alllowercase1!", "PASSWORD_TOO_SIMPLE"),
        ("NoDigitsHere!", "PASSWORD_TOO_SIMPLE"),
    ],
)
@pytest.mark.parametrize("base", BASES)
async def test_consume_with_a_weak_password_keeps_the_invite(
    client, programme, base, password, code
):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    user = await create_user(client, ident, base)
    url = f"{base}/users/{user['id']}/invite"
    assert (await client.post(url, headers=ident.headers)).status_code == 204
    r = await client.post(
        f"{url}/consume",
        headers=p.headers,
        json={"inviteCode": CODE, "password": {"value": password}},
    )
    assert_409(r, code)
    assert (await login(client, p, user["email"], password, base)).status_code == 403
    r = await client.post(f"{url}/validate", headers=p.headers, json={"inviteCode": CODE})
    assert r.status_code == 204, r.text
    r = await client.post(
        f"{url}/consume",
        headers=p.headers,
        json={"inviteCode": CODE, "password": {"value": PASSWORD}},
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("base", BASES)
async def test_invite_validate_and_consume_name_only_authorised_users_of_the_programme(
    client, programme, base
):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    user = await create_user(client, ident, base)
    assert (
        await client.post(f"{base}/users/{user['id']}/invite", headers=ident.headers)
    ).status_code == 204
    p2 = await programme()
    consume = {"inviteCode": CODE, "password": {"value": PASSWORD}}
    for user_id, headers in (
        (user["id"], p2.headers),  # another programme's api-key
        (ident.root_id, p.headers),  # a root user
        ("999999999999", p.headers),
    ):
        r = await client.post(
            f"{base}/users/{user_id}/invite/validate", headers=headers, json={"inviteCode": CODE}
        )
        assert_404(r)
        r = await client.post(
            f"{base}/users/{user_id}/invite/consume", headers=headers, json=consume
        )
        assert_404(r)
    r = await client.post(f"{base}/users/{user['id']}/invite/validate", headers=p.headers, json={})
    assert invalid_fields(r) == {"inviteCode": "REQUIRED"}
    r = await client.post(
        f"{base}/users/{user['id']}/invite/consume", headers=p.headers, json={"inviteCode": CODE}
    )
    assert invalid_fields(r) == {"password": "REQUIRED"}
    r = await client.post(
        f"{base}/users/{user['id']}/invite/consume", headers=p.headers, json=consume
    )
    assert r.status_code == 200, r.text


# E-mail verification of authorised users (3.29.1 only)


async def test_authorised_user_email_verification(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    user = await create_user(client, ident)
    send = f"{LATEST}/users/verification/email/send"
    verify = f"{LATEST}/users/verification/email/verify"
    # No code sent yet: nothing to verify.
    r = await client.post(
        verify, headers=p.headers, json={"email": user["email"], "verificationCode": CODE}
    )
    assert_409(r, "VERIFICATION_CODE_INVALID")
    r = await client.post(send, headers=p.headers, json={"email": user["email"]})
    assert (r.status_code, r.content) == (204, b"")
    r = await client.post(
        verify, headers=p.headers, json={"email": user["email"], "verificationCode": "654321"}
    )
    assert_409(r, "VERIFICATION_CODE_INVALID")
    r = await client.post(
        verify, headers=p.headers, json={"email": user["email"].upper(), "verificationCode": CODE}
    )
    assert (r.status_code, r.content) == (204, b"")
    # The code is used up.
    r = await client.post(
        verify, headers=p.headers, json={"email": user["email"], "verificationCode": CODE}
    )
    assert_409(r, "VERIFICATION_CODE_INVALID")


async def test_authorised_user_email_verification_refusals(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    user = await create_user(client, ident)
    send = f"{LATEST}/users/verification/email/send"
    verify = f"{LATEST}/users/verification/email/verify"
    for unknown in (email(), ident.email):  # nobody's, and a root user's
        r = await client.post(send, headers=p.headers, json={"email": unknown})
        assert_409(r, "EMAIL_NOT_FOUND")
    # The root's own verification code is not accepted here.
    r = await client.post(
        f"{LATEST}/corporates/verification/email/send",
        headers=p.headers,
        json={"email": ident.email},
    )
    assert r.status_code == 204
    r = await client.post(
        verify, headers=p.headers, json={"email": ident.email, "verificationCode": CODE}
    )
    assert_409(r, "VERIFICATION_CODE_INVALID")
    # Another programme does not know the user.
    p2 = await programme()
    r = await client.post(send, headers=p2.headers, json={"email": user["email"]})
    assert_409(r, "EMAIL_NOT_FOUND")
    for bad in ("12345", "abcdef", "1234567"):
        r = await client.post(
            verify, headers=p.headers, json={"email": user["email"], "verificationCode": bad}
        )
        assert "verificationCode" in invalid_fields(r)
    r = await client.post(send, headers=p.headers, json={})
    assert invalid_fields(r) == {"email": "REQUIRED"}


# KYC of an authorised user (3.29.1 only)


async def kyc(client: httpx.AsyncClient, p: Prog, token: str) -> httpx.Response:
    return await client.post(f"{LATEST}/users/kyc", headers=bearer(p, token))


async def test_user_kyc_of_a_corporates_user(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    user, token = await invited_user(client, ident)
    # A changed e-mail must be verified again before KYC.
    new_email = email()
    r = await client.patch(
        f"{LATEST}/users/{user['id']}", headers=ident.headers, json={"email": new_email}
    )
    assert r.status_code == 200, r.text
    assert_409(await kyc(client, p, token), "EMAIL_NOT_VERIFIED")
    for step, extra in (("send", {}), ("verify", {"verificationCode": CODE})):
        r = await client.post(
            f"{LATEST}/users/verification/email/{step}",
            headers=p.headers,
            json={"email": new_email, **extra},
        )
        assert r.status_code == 204, r.text
    assert_409(await kyc(client, p, token), "KYB_IDENTITY_NOT_APPROVED")
    r = await client.post(
        f"/simulate/api/corporates/{ident.id}/verify", headers={"programme-key": p.api_key}
    )
    assert r.status_code == 204, r.text
    r = await kyc(client, p, token)
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"reference"}
    reference = r.json()["reference"]
    assert DIGITS.match(reference)
    page = await client.get(f"/kyc/{reference}")
    assert page.status_code == 200
    assert "INITIATED" in page.text
    r = await client.post(f"/kyc/{reference}", data={"outcome": "approve"})
    assert r.status_code == 303
    assert_409(await kyc(client, p, token), "KYC_ALREADY_APPROVED")


async def test_user_kyc_of_a_consumers_user_needs_no_kyb(client, programme):
    p = await programme()
    ident = await sign_up(client, p, "consumers")
    _, token = await invited_user(client, ident)
    r = await kyc(client, p, token)
    assert r.status_code == 200, r.text
    assert DIGITS.match(r.json()["reference"])


async def test_user_kyc_refusals(client, programme):
    p = await programme()
    ident = await sign_up(client, p, "consumers")
    _, token = await invited_user(client, ident)
    r = await client.post(f"{LATEST}/users/kyc", headers=p.headers)
    assert (r.status_code, r.content) == (401, b"")
    p2 = await programme()
    r = await kyc(client, p2, token)
    assert (r.status_code, r.content) == (403, b"")
    r = await client.post(f"{LATEST}/users/kyc", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 400


@pytest.mark.parametrize(
    "path",
    [
        "/users/verification/email/send",
        "/users/verification/email/verify",
        "/users/kyc",
    ],
)
async def test_user_verification_and_kyc_do_not_exist_in_3_1_0(client, programme, path):
    p = await programme()
    ident = await sign_up(client, p, base=LEGACY)
    _, token = await invited_user(client, ident, LEGACY)
    body = {"email": ident.email, "verificationCode": CODE}
    r = await client.post(f"{LEGACY}{path}", headers=bearer(p, token), json=body)
    assert r.status_code == 404, r.text


async def test_user_verification_and_kyc_are_not_in_the_3_1_0_description(client):
    ops = {
        op.get("operationId")
        for item in (await client.get(f"{LEGACY}/openapi.json")).json()["paths"].values()
        for op in item.values()
    }
    latest_ops = {
        op.get("operationId")
        for item in (await client.get(f"{LATEST}/openapi.json")).json()["paths"].values()
        for op in item.values()
    }
    names = {"authorisedUserEmailVerificationCodeSend", "authorisedUserEmailVerify", "userKyc"}
    assert names <= latest_ops
    assert not names & ops
    # Whatever it answers, 3.1.0 never starts a user KYC.
    assert "usersGet" in ops


# Refusals shared by every /users operation


def operations(base: str, user_id: str, user_email: str) -> list[tuple[str, str, Any, bool]]:
    """(method, path, body, needs a bearer token) of every /users operation of `base`."""
    ops: list[tuple[str, str, Any, bool]] = [
        ("GET", "/users", None, True),
        ("POST", "/users", user_body(), True),
        ("GET", f"/users/{user_id}", None, True),
        ("PATCH", f"/users/{user_id}", {"name": "Changed"}, True),
        ("POST", f"/users/{user_id}/activate", None, True),
        ("POST", f"/users/{user_id}/deactivate", None, True),
        ("POST", f"/users/{user_id}/invite", None, True),
        ("POST", f"/users/{user_id}/invite/validate", {"inviteCode": CODE}, False),
        (
            "POST",
            f"/users/{user_id}/invite/consume",
            {"inviteCode": CODE, "password": {"value": PASSWORD}},
            False,
        ),
    ]
    if base == LATEST:
        ops += [
            ("POST", "/users/verification/email/send", {"email": user_email}, False),
            (
                "POST",
                "/users/verification/email/verify",
                {"email": user_email, "verificationCode": CODE},
                False,
            ),
            ("POST", "/users/kyc", None, True),
        ]
    return ops


@pytest.mark.parametrize("base", BASES)
async def test_every_users_operation_checks_api_key_and_token(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    user = await create_user(client, ident, base)
    p2 = await programme()
    token = {"Authorization": f"Bearer {ident.token}"}
    for method, path, body, needs_token in operations(base, user["id"], user["email"]):
        what = f"{method} {path}"
        kwargs: dict[str, Any] = {} if body is None else {"json": body}
        r = await client.request(method, f"{base}{path}", headers=token, **kwargs)
        assert r.status_code == 400, what
        r = await client.request(
            method, f"{base}{path}", headers={**token, "api-key": "unknown-key"}, **kwargs
        )
        assert (r.status_code, r.content) == (401, b""), what
        if needs_token:
            r = await client.request(method, f"{base}{path}", headers=p.headers, **kwargs)
            assert (r.status_code, r.content) == (401, b""), what
            r = await client.request(
                method, f"{base}{path}", headers={**token, **p2.headers}, **kwargs
            )
            assert (r.status_code, r.content) == (403, b""), what
    # None of it changed anything.
    r = await client.get(f"{base}/users", headers=ident.headers)
    assert r.json() == {"users": [user], "count": 1, "responseCount": 1}
    r = await client.post(
        f"{base}/users/{user['id']}/invite/validate", headers=p.headers, json={"inviteCode": CODE}
    )
    assert_409(r, "INVITE_OR_INVITE_CODE_INVALID")


@pytest.mark.parametrize("base", BASES)
async def test_another_identitys_users_are_404_and_left_untouched(client, programme, base):
    p = await programme()
    owner = await sign_up(client, p, base=base)
    stranger = await sign_up(client, p, "consumers", base=base)
    user = await create_user(client, owner, base)
    off = await create_user(client, owner, base)
    r = await client.post(f"{base}/users/{off['id']}/deactivate", headers=owner.headers)
    assert r.status_code == 204
    off = await get_user(client, owner, off["id"], base)

    for method, path, body in (
        ("GET", f"/users/{user['id']}", None),
        ("PATCH", f"/users/{user['id']}", {"name": "Hijacked", "email": email()}),
        ("POST", f"/users/{user['id']}/deactivate", None),
        ("POST", f"/users/{user['id']}/invite", None),
        ("POST", f"/users/{off['id']}/activate", None),
    ):
        kwargs: dict[str, Any] = {} if body is None else {"json": body}
        r = await client.request(method, f"{base}{path}", headers=stranger.headers, **kwargs)
        assert_404(r)
    r = await client.get(f"{base}/users", headers=stranger.headers)
    assert r.json()["count"] == 0
    r = await client.get(f"{base}/users", headers=owner.headers, params={"email": user["email"]})
    assert r.json()["count"] == 1

    assert await get_user(client, owner, user["id"], base) == user
    assert await get_user(client, owner, off["id"], base) == off
    assert off["active"] is False
    r = await client.post(
        f"{base}/users/{user['id']}/invite/validate", headers=p.headers, json={"inviteCode": CODE}
    )
    assert_409(r, "INVITE_OR_INVITE_CODE_INVALID")  # no invite was sent
    # Another programme's identity cannot see the user either.
    p2 = await programme()
    outsider = await sign_up(client, p2, base=base)
    assert_404(await client.get(f"{base}/users/{user['id']}", headers=outsider.headers))
