"""Passwords (create, validate), login, logout and sessions (contract §5.1, §5.2; D7, D11) on
3.29.1 (`/multi`) and 3.1.0 (`/3.1.0/multi`)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import Prog
from tests.factories import (
    CODE,
    PASSWORD,
    Identity,
    consumer_body,
    corporate_body,
    email,
    login,
    sign_up,
)

LATEST = "/multi"
LEGACY = "/3.1.0/multi"
BASES = [LATEST, LEGACY]
DAY_MS = 86_400_000

COMPLEXITY = [
    ("Sh0rt!a", "PASSWORD_TOO_SHORT"),  # 7 characters
    ("Aa1!" + "a" * 27, "PASSWORD_TOO_LONG"),  # 31 characters
    ("alllowercase1!", "PASSWORD_TOO_SIMPLE"),  # no upper-case letter
    ("ALLUPPERCASE1!", "PASSWORD_TOO_SIMPLE"),  # no lower-case letter
    ("NoDigitsHere!", "PASSWORD_TOO_SIMPLE"),
    ("NoSpecial1234", "PASSWORD_TOO_SIMPLE"),
]


def bearer(p: Prog, token: str) -> dict[str, str]:
    return {**p.headers, "Authorization": f"Bearer {token}"}


async def advance(client: httpx.AsyncClient, p: Prog, seconds: int) -> None:
    r = await client.post(
        "/simulate/api/clock/advance",
        headers={"programme-key": p.api_key},
        json={"seconds": seconds},
    )
    assert r.status_code == 200, r.text


async def register(
    client: httpx.AsyncClient, p: Prog, kind: str = "corporates", base: str = LATEST
) -> dict[str, Any]:
    """A corporate or consumer whose root user has no password yet: (body sent, answer)."""
    body = corporate_body(p) if kind == "corporates" else consumer_body(p)
    r = await client.post(f"{base}/{kind}", headers=p.headers, json=body)
    assert r.status_code == 200, r.text
    created = r.json()
    return {
        "id": created["id"]["id"],
        "root_id": created["rootUser"]["id"]["id"],
        "email": body["rootUser"]["email"],
    }


async def create_password(
    client: httpx.AsyncClient, p: Prog, user_id: str, password: str, base: str = LATEST
) -> httpx.Response:
    return await client.post(
        f"{base}/passwords/{user_id}/create",
        headers=p.headers,
        json={"password": {"value": password}},
    )


async def authorised_user(
    client: httpx.AsyncClient, ident: Identity, base: str = LATEST
) -> tuple[dict[str, Any], str]:
    r = await client.post(
        f"{base}/users",
        headers=ident.headers,
        json={"name": "Bob", "surname": "Builder", "email": email()},
    )
    assert r.status_code == 200, r.text
    user = r.json()
    r = await client.post(f"{base}/users/{user['id']}/invite", headers=ident.headers)
    assert r.status_code == 204, r.text
    r = await client.post(
        f"{base}/users/{user['id']}/invite/consume",
        headers=ident.p.headers,
        json={"inviteCode": CODE, "password": {"value": PASSWORD}},
    )
    assert r.status_code == 200, r.text
    return user, r.json()["token"]


def assert_409(r: httpx.Response, code: str) -> None:
    assert r.status_code == 409, r.text
    assert r.json() == {"errorCode": code}


def assert_empty(r: httpx.Response, status: int) -> None:
    assert (r.status_code, r.content) == (status, b""), r.text


# Password create


@pytest.mark.parametrize("kind", ["corporates", "consumers"])
@pytest.mark.parametrize("base", BASES)
async def test_password_create_logs_the_root_user_in(client, programme, base, kind):
    p = await programme()
    ident = await register(client, p, kind, base)
    r = await create_password(client, p, ident["root_id"], PASSWORD, base)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"passwordInfo", "token"}
    assert body["passwordInfo"] == {
        "identityId": {"type": kind[:-1].upper(), "id": ident["id"]},
        "expiryDate": 0,
    }
    r = await client.get(f"{base}/{kind}", headers=bearer(p, body["token"]))
    assert r.status_code == 200, r.text
    assert r.json()["id"]["id"] == ident["id"]
    # The password is stored: the root user logs in with it.
    assert (await login(client, p, ident["email"], base=base)).status_code == 200

    r = await create_password(client, p, ident["root_id"], "An0ther-secret!", base)
    assert_409(r, "PASSWORD_ALREADY_CREATED")
    assert (await login(client, p, ident["email"], "An0ther-secret!", base)).status_code == 403
    assert (await login(client, p, ident["email"], base=base)).status_code == 200


@pytest.mark.parametrize(("password", "code"), COMPLEXITY)
async def test_password_create_refuses_a_weak_password_and_stores_nothing(
    client, programme, password, code
):
    p = await programme()
    ident = await register(client, p)
    assert_409(await create_password(client, p, ident["root_id"], password), code)
    assert (await login(client, p, ident["email"], password)).status_code == 403
    r = await create_password(client, p, ident["root_id"], PASSWORD)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("password", ["Aa1!aaaa", "Aa1!" + "a" * 26, "pa55 WORD?"])
async def test_password_create_accepts_the_limits(client, programme, password):
    p = await programme()
    ident = await register(client, p)
    r = await create_password(client, p, ident["root_id"], password)
    assert r.status_code == 200, r.text
    assert (await login(client, p, ident["email"], password)).status_code == 200


async def test_password_create_names_a_root_user_of_this_programme(client, programme):
    p = await programme()
    p2 = await programme()
    ident = await register(client, p)
    r = await create_password(client, p, "999999999999", PASSWORD)
    assert r.status_code == 404, r.text
    assert set(r.json()) == {"code", "message"}
    # Another programme's root user: 404, and that user is left without a password.
    r = await create_password(client, p2, ident["root_id"], PASSWORD)
    assert r.status_code == 404, r.text
    assert (await login(client, p, ident["email"])).status_code == 403
    assert (await create_password(client, p, ident["root_id"], PASSWORD)).status_code == 200


@pytest.mark.parametrize("base", BASES)
async def test_password_create_refuses_an_authorised_user(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    r = await client.post(
        f"{base}/users",
        headers=ident.headers,
        json={"name": "Bob", "surname": "Builder", "email": email()},
    )
    user = r.json()
    r = await create_password(client, p, user["id"], PASSWORD, base)
    assert_409(r, "PASSWORD_PROFILE_NOT_CONFIGURED_FOR_CREDENTIAL_TYPE")
    assert (await login(client, p, user["email"], base=base)).status_code == 403


async def test_password_create_refuses_malformed_requests(client, programme):
    p = await programme()
    ident = await register(client, p)
    url = f"{LATEST}/passwords/{ident['root_id']}/create"
    for body in ({}, {"password": {}}, {"password": {"value": "Aa1!" + "a" * 97}}):
        r = await client.post(url, headers=p.headers, json=body)
        assert r.status_code == 400, body
        assert "password" in r.json()["syntaxErrors"]["invalidFields"][0]["fieldName"]
    body = {"password": {"value": PASSWORD}}
    assert (await client.post(url, json=body)).status_code == 400
    assert_empty(await client.post(url, headers={"api-key": "unknown"}, json=body), 401)
    assert (await create_password(client, p, ident["root_id"], PASSWORD)).status_code == 200


async def test_password_expiry_follows_the_programme_setting(client, programme, container):
    p = await programme(passwordExpiryDays=30)
    ident = await register(client, p)
    before = container.clock.now_ms()
    r = await create_password(client, p, ident["root_id"], PASSWORD)
    after = container.clock.now_ms()
    assert r.status_code == 200, r.text
    expiry = r.json()["passwordInfo"]["expiryDate"]
    assert before + 30 * DAY_MS - 1000 <= expiry <= after + 30 * DAY_MS + 1000


# Password validate


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("password", [PASSWORD, "Aa1!aaaa", "Aa1!" + "a" * 26])
async def test_password_validate_accepts_a_good_password(client, programme, base, password):
    p = await programme()
    r = await client.post(
        f"{base}/passwords/validate", headers=p.headers, json={"password": {"value": password}}
    )
    assert_empty(r, 204)


@pytest.mark.parametrize(("password", "code"), COMPLEXITY)
async def test_password_validate_names_the_broken_rule(client, programme, password, code):
    p = await programme()
    for base in BASES:
        r = await client.post(
            f"{base}/passwords/validate", headers=p.headers, json={"password": {"value": password}}
        )
        assert_409(r, code)


async def test_password_validate_refuses_malformed_requests(client, programme):
    p = await programme()
    url = f"{LATEST}/passwords/validate"
    for body in ({}, {"password": {}}, {"password": None}, {"password": {"value": "a" * 101}}):
        r = await client.post(url, headers=p.headers, json=body)
        assert r.status_code == 400, body
        assert r.json()["syntaxErrors"]["invalidFields"], body
    good = {"password": {"value": PASSWORD}}
    assert (await client.post(url, json=good)).status_code == 400
    assert_empty(await client.post(url, headers={"api-key": "unknown"}, json=good), 401)


# Login


async def test_login_answer_3_29_1(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    for base in (LATEST, "/3.29.1/multi"):
        r = await login(client, p, ident.email, base=base)
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"token", "tokenType", "identity", "credentials"}
        assert body["tokenType"] == "AUTH"
        assert body["identity"] == {"type": "CORPORATE", "id": ident.id}
        assert body["credentials"] == {"type": "ROOT", "id": ident.root_id}
        r = await client.get(f"{base}/corporates", headers=bearer(p, body["token"]))
        assert r.status_code == 200, r.text


async def test_login_answer_3_1_0_has_no_token_type(client, programme):
    p = await programme()
    ident = await sign_up(client, p, "consumers", LEGACY)
    r = await login(client, p, ident.email, base=LEGACY)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"token", "identity", "credentials"}
    assert body["identity"] == {"type": "CONSUMER", "id": ident.id}
    assert body["credentials"] == {"type": "ROOT", "id": ident.root_id}
    r = await client.get(f"{LEGACY}/consumers", headers=bearer(p, body["token"]))
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("base", BASES)
async def test_login_e_mail_is_case_insensitive(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    r = await login(client, p, ident.email.upper(), base=base)
    assert r.status_code == 200, r.text
    assert r.json()["credentials"]["id"] == ident.root_id


@pytest.mark.parametrize("base", BASES)
async def test_login_refusals_are_403_without_a_body(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    wrong_password = await login(client, p, ident.email, "Wr0ng-secret!", base)
    unknown_email = await login(client, p, email(), base=base)
    assert_empty(wrong_password, 403)
    assert_empty(unknown_email, 403)
    assert wrong_password.headers.get("content-type") == unknown_email.headers.get("content-type")
    # The password is case-sensitive.
    assert_empty(await login(client, p, ident.email, PASSWORD.upper(), base), 403)
    # Another programme does not know the e-mail.
    p2 = await programme()
    assert_empty(await login(client, p2, ident.email, base=base), 403)
    # A root user with no password yet.
    fresh = await register(client, p, base=base)
    assert_empty(await login(client, p, fresh["email"], base=base), 403)


async def test_login_refuses_malformed_requests(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    url = f"{LATEST}/login_with_password"
    for body in (
        {"email": ident.email},
        {"password": {"value": PASSWORD}},
        {"email": "not-an-e-mail", "password": {"value": PASSWORD}},
        {"email": ident.email, "password": PASSWORD},
    ):
        r = await client.post(url, headers=p.headers, json=body)
        assert r.status_code == 400, body
    good = {"email": ident.email, "password": {"value": PASSWORD}}
    assert (await client.post(url, json=good)).status_code == 400
    assert_empty(await client.post(url, headers={"api-key": "unknown"}, json=good), 401)


async def test_root_user_is_locked_for_30_minutes_after_the_failure_limit(client, programme):
    p = await programme(failedLoginLimit=3)
    ident = await sign_up(client, p)
    for _ in range(3):
        assert_empty(await login(client, p, ident.email, "Wr0ng-secret!"), 403)
    assert_empty(await login(client, p, ident.email), 423)
    assert_empty(await login(client, p, ident.email.upper()), 423)
    assert_empty(await login(client, p, ident.email, base=LEGACY), 423)
    await advance(client, p, 29 * 60)
    assert_empty(await login(client, p, ident.email), 423)
    await advance(client, p, 2 * 60)  # 31 minutes after the lock
    r = await login(client, p, ident.email)
    assert r.status_code == 200, r.text
    assert (
        await client.get(f"{LATEST}/corporates", headers=bearer(p, r.json()["token"]))
    ).status_code == 200


async def test_default_failure_limit_is_five(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    for _ in range(4):
        assert_empty(await login(client, p, ident.email, "Wr0ng-secret!"), 403)
    assert (await login(client, p, ident.email)).status_code == 200
    for _ in range(5):
        assert_empty(await login(client, p, ident.email, "Wr0ng-secret!"), 403)
    assert_empty(await login(client, p, ident.email), 423)


async def test_successful_login_resets_the_failure_count(client, programme):
    p = await programme(failedLoginLimit=3)
    ident = await sign_up(client, p)
    for _ in range(2):
        for _ in range(2):
            assert_empty(await login(client, p, ident.email, "Wr0ng-secret!"), 403)
        r = await login(client, p, ident.email)
        assert r.status_code == 200, r.text


async def test_failures_of_one_user_do_not_count_against_another(client, programme):
    p = await programme(failedLoginLimit=2)
    ident = await sign_up(client, p)
    other = await sign_up(client, p)
    for _ in range(2):
        assert_empty(await login(client, p, other.email, "Wr0ng-secret!"), 403)
    assert_empty(await login(client, p, other.email), 423)
    assert (await login(client, p, ident.email)).status_code == 200


async def test_authorised_user_is_deactivated_after_the_failure_limit(client, programme):
    p = await programme(failedLoginLimit=3)
    ident = await sign_up(client, p)
    user, token = await authorised_user(client, ident)
    assert (await client.get(f"{LATEST}/users", headers=bearer(p, token))).status_code == 200
    for _ in range(3):
        assert_empty(await login(client, p, user["email"], "Wr0ng-secret!"), 403)
    assert_empty(await login(client, p, user["email"]), 403)  # deactivated, not locked
    r = await client.get(f"{LATEST}/users/{user['id']}", headers=ident.headers)
    assert r.json()["active"] is False
    # A deactivated user cannot execute operations either, with a token from before.
    assert_empty(await client.get(f"{LATEST}/users", headers=bearer(p, token)), 401)
    # Another active user activates it again.
    r = await client.post(f"{LATEST}/users/{user['id']}/activate", headers=ident.headers)
    assert r.status_code == 204, r.text
    r = await login(client, p, user["email"])
    assert r.status_code == 200, r.text
    assert r.json()["credentials"] == {"type": "USER", "id": user["id"]}
    # ... with a fresh failure count.
    for _ in range(2):
        assert_empty(await login(client, p, user["email"], "Wr0ng-secret!"), 403)
    assert (await login(client, p, user["email"])).status_code == 200


# Logout and sessions


@pytest.mark.parametrize("base", BASES)
async def test_logout_ends_only_its_own_session(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, base=base)
    first = (await login(client, p, ident.email, base=base)).json()["token"]
    second = (await login(client, p, ident.email, base=base)).json()["token"]
    assert_empty(await client.post(f"{base}/logout", headers=bearer(p, first)), 204)
    assert_empty(await client.get(f"{base}/corporates", headers=bearer(p, first)), 401)
    assert_empty(await client.post(f"{base}/logout", headers=bearer(p, first)), 401)
    r = await client.get(f"{base}/corporates", headers=bearer(p, second))
    assert r.status_code == 200, r.text
    r = await client.get(f"{base}/corporates", headers=ident.headers)  # from password create
    assert r.status_code == 200, r.text


async def test_logout_refusals(client, programme):
    p = await programme()
    p2 = await programme()
    ident = await sign_up(client, p)
    assert_empty(await client.post(f"{LATEST}/logout", headers=p.headers), 401)
    assert (
        await client.post(f"{LATEST}/logout", headers={"Authorization": f"Bearer {ident.token}"})
    ).status_code == 400
    assert_empty(await client.post(f"{LATEST}/logout", headers=bearer(p2, ident.token)), 403)
    assert (await client.get(f"{LATEST}/corporates", headers=ident.headers)).status_code == 200


async def test_idle_token_expires_after_five_minutes(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    idle = (await login(client, p, ident.email)).json()["token"]
    busy = (await login(client, p, ident.email)).json()["token"]
    legacy = (await login(client, p, ident.email, base=LEGACY)).json()["token"]
    await advance(client, p, 200)
    for token in (busy, legacy):
        assert (await client.get(f"{LATEST}/users", headers=bearer(p, token))).status_code == 200
    await advance(client, p, 101)  # `idle` unused for 301 s
    assert_empty(await client.get(f"{LATEST}/corporates", headers=bearer(p, idle)), 401)
    assert_empty(await client.get(f"{LEGACY}/corporates", headers=bearer(p, idle)), 401)
    await advance(client, p, 99)  # 400 s after login, 200 s after the last use
    assert (await client.get(f"{LATEST}/corporates", headers=bearer(p, busy))).status_code == 200
    r = await client.get(f"{LEGACY}/corporates", headers=bearer(p, legacy))
    assert r.status_code == 200
    await advance(client, p, 200)  # 600 s after login
    assert (await client.get(f"{LATEST}/corporates", headers=bearer(p, busy))).status_code == 200
    # A failed request does not renew anything: the idle token stays dead.
    assert_empty(await client.get(f"{LATEST}/corporates", headers=bearer(p, idle)), 401)
    # Another programme's clock is not moved.
    p2 = await programme()
    other = await sign_up(client, p2)
    assert (await client.get(f"{LATEST}/corporates", headers=other.headers)).status_code == 200


@pytest.mark.parametrize("base", BASES)
async def test_another_programmes_api_key_with_a_valid_token_is_403(client, programme, base):
    p = await programme()
    p2 = await programme()
    ident = await sign_up(client, p, base=base)
    for method, path in (("GET", "/corporates"), ("GET", "/users"), ("POST", "/logout")):
        r = await client.request(method, f"{base}{path}", headers=bearer(p2, ident.token))
        assert_empty(r, 403)
    # The token is still good with its own programme's key.
    assert (await client.get(f"{base}/corporates", headers=ident.headers)).status_code == 200
