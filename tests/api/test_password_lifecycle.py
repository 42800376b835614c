"""Password update, lost password, expired passwords, identities and delegated access."""

from __future__ import annotations

import itertools

import pytest

from tests.factories import CODE, PASSWORD, login, sign_up

NEW = "An0ther-secret!"
SIM = "/simulate/api/clock/advance"


def pw(value: str) -> dict[str, str]:
    return {"value": value}


@pytest.mark.parametrize("base", ["/multi", "/3.1.0/multi"])
async def test_update_password(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, "corporates", base)
    url = f"{base}/passwords/update"
    r = await client.post(
        url, headers=ident.headers, json={"oldPassword": pw("Wrong-pass1!"), "newPassword": pw(NEW)}
    )
    assert r.status_code == 409
    assert r.json() == {"errorCode": "PASSWORD_INCORRECT"}
    r = await client.post(
        url, headers=ident.headers, json={"oldPassword": pw(PASSWORD), "newPassword": pw(PASSWORD)}
    )
    assert r.json() == {"errorCode": "PASSWORD_ALREADY_USED"}
    r = await client.post(
        url, headers=ident.headers, json={"oldPassword": pw(PASSWORD), "newPassword": pw("short")}
    )
    assert r.json() == {"errorCode": "PASSWORD_TOO_SHORT"}
    r = await client.post(
        url, headers=ident.headers, json={"oldPassword": pw(PASSWORD), "newPassword": pw(NEW)}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["passwordInfo"]["identityId"] == {"type": "CORPORATE", "id": ident.id}
    assert body["passwordInfo"]["expiryDate"] == 0
    # The old token ended with the change; the new one works; the old password no longer does.
    assert (await client.get(f"{base}/corporates", headers=ident.headers)).status_code == 401
    new_headers = {**p.headers, "Authorization": f"Bearer {body['token']}"}
    assert (await client.get(f"{base}/corporates", headers=new_headers)).status_code == 200
    assert (await login(client, p, ident.email, PASSWORD, base)).status_code == 403
    assert (await login(client, p, ident.email, NEW, base)).status_code == 200


async def test_last_five_passwords_cannot_be_reused(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    history = [PASSWORD, *[f"Pass-word{i}!" for i in range(5)]]
    headers = ident.headers
    for old, new in itertools.pairwise(history):
        r = await client.post(
            "/multi/passwords/update",
            headers=headers,
            json={"oldPassword": pw(old), "newPassword": pw(new)},
        )
        assert r.status_code == 200, r.text
        headers = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
    current = history[-1]
    for reused in history[-5:]:
        r = await client.post(
            "/multi/passwords/update",
            headers=headers,
            json={"oldPassword": pw(current), "newPassword": pw(reused)},
        )
        assert r.json() == {"errorCode": "PASSWORD_ALREADY_USED"}, reused
    # The sixth-newest is out of the window and may be used again.
    r = await client.post(
        "/multi/passwords/update",
        headers=headers,
        json={"oldPassword": pw(current), "newPassword": pw(history[0])},
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("base", ["/multi", "/3.1.0/multi"])
async def test_lost_password(client, programme, base):
    p = await programme()
    ident = await sign_up(client, p, "consumers", base)
    other = await login(client, p, ident.email, base=base)
    other_headers = {**p.headers, "Authorization": f"Bearer {other.json()['token']}"}
    r = await client.post(
        f"{base}/passwords/lost_password/start", headers=p.headers, json={"email": ident.email}
    )
    assert r.status_code == 204
    # D11a: a sandbox programme says an address has no account, as the reference does.
    r = await client.post(
        f"{base}/passwords/lost_password/start",
        headers=p.headers,
        json={"email": "nobody@example.com"},
    )
    assert r.status_code == 409
    assert r.json() == {"errorCode": "ACCOUNT_NOT_FOUND"}
    resume = f"{base}/passwords/lost_password/resume"
    bad = {"nonce": "654321", "email": ident.email, "newPassword": pw(NEW)}
    r = await client.post(resume, headers=p.headers, json=bad)
    assert r.json() == {"errorCode": "INVALID_NONCE_OR_EMAIL"}
    r = await client.post(
        resume, headers=p.headers, json={**bad, "nonce": CODE, "email": "x@example.com"}
    )
    assert r.json() == {"errorCode": "INVALID_NONCE_OR_EMAIL"}
    r = await client.post(
        resume, headers=p.headers, json={**bad, "nonce": CODE, "newPassword": pw("weakpass")}
    )
    assert r.json() == {"errorCode": "PASSWORD_TOO_SIMPLE"}
    r = await client.post(resume, headers=p.headers, json={**bad, "nonce": CODE})
    assert r.status_code == 200, r.text
    token = r.json()["token"]
    # Every other session ended; the new one works; the nonce is used up.
    assert (await client.get(f"{base}/consumers", headers=other_headers)).status_code == 401
    assert (await client.get(f"{base}/consumers", headers=ident.headers)).status_code == 401
    fresh = {**p.headers, "Authorization": f"Bearer {token}"}
    assert (await client.get(f"{base}/consumers", headers=fresh)).status_code == 200
    r = await client.post(
        resume, headers=p.headers, json={**bad, "nonce": CODE, "newPassword": pw("Yet-another1!")}
    )
    assert r.json() == {"errorCode": "INVALID_NONCE_OR_EMAIL"}
    assert (await login(client, p, ident.email, NEW, base)).status_code == 200


@pytest.mark.parametrize("base", ["/multi", "/3.1.0/multi"])
async def test_lost_password_in_a_live_programme_never_tells_who_has_an_account(
    client, programme, base
):
    p = await programme(mode="live")
    ident = await sign_up(client, p, "consumers", base, verify_email=False)
    answers = []
    for email in (ident.email, "nobody@example.com"):
        r = await client.post(
            f"{base}/passwords/lost_password/start", headers=p.headers, json={"email": email}
        )
        answers.append((r.status_code, r.content))
    assert answers == [(204, b""), (204, b"")]


async def test_lost_password_nonce_expires(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    await client.post(
        "/multi/passwords/lost_password/start", headers=p.headers, json={"email": ident.email}
    )
    await client.post(SIM, headers={"programme-key": p.api_key}, json={"seconds": 3601})
    r = await client.post(
        "/multi/passwords/lost_password/resume",
        headers=p.headers,
        json={"nonce": CODE, "email": ident.email, "newPassword": pw(NEW)},
    )
    assert r.json() == {"errorCode": "INVALID_NONCE_OR_EMAIL"}


@pytest.mark.parametrize("base", ["/multi", "/3.1.0/multi"])
async def test_expired_password_gives_a_token_for_update_only(client, programme, base):
    p = await programme(passwordExpiryDays=30)
    ident = await sign_up(client, p, "corporates", base)
    r = await client.post(SIM, headers={"programme-key": p.api_key}, json={"seconds": 31 * 86400})
    assert r.status_code == 200
    r = await login(client, p, ident.email, base=base)
    assert r.status_code == 409
    assert set(r.json()) == {"token"}
    temp = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
    assert (await client.get(f"{base}/corporates", headers=temp)).status_code == 401
    r = await client.post(
        f"{base}/passwords/update",
        headers=temp,
        json={"oldPassword": pw(PASSWORD), "newPassword": pw(NEW)},
    )
    assert r.status_code == 200, r.text
    info = r.json()["passwordInfo"]
    assert info["expiryDate"] > 0
    fresh = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
    assert (await client.get(f"{base}/corporates", headers=fresh)).status_code == 200
    assert (await client.get(f"{base}/corporates", headers=temp)).status_code == 401
    assert (await login(client, p, ident.email, NEW, base)).status_code == 200


async def test_identities_and_access_token(client, programme):
    p = await programme()
    corp = await sign_up(client, p, "corporates")
    r = await client.get("/multi/identities", headers=corp.headers)
    assert r.status_code == 200
    assert r.json() == [{"id": {"type": "CORPORATE", "id": corp.id}, "name": "Acme Ltd"}]
    r = await client.post(
        "/multi/access_token",
        headers=corp.headers,
        json={"identity": {"type": "CORPORATE", "id": corp.id}},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["identity"] == {"type": "CORPORATE", "id": corp.id}
    assert body["credentials"] == {"type": "ROOT", "id": corp.root_id}
    delegated = {**p.headers, "Authorization": f"Bearer {body['token']}"}
    assert (await client.get("/multi/corporates", headers=delegated)).status_code == 200
    # Another identity, or a malformed one, is refused.
    cons = await sign_up(client, p, "consumers")
    r = await client.post(
        "/multi/access_token",
        headers=corp.headers,
        json={"identity": {"type": "CONSUMER", "id": cons.id}},
    )
    assert r.status_code == 403
    r = await client.post(
        "/multi/access_token", headers=corp.headers, json={"identity": {"type": "X", "id": "1"}}
    )
    assert r.status_code == 400
    r = await client.get("/multi/identities", headers=cons.headers)
    assert r.json() == [{"id": {"type": "CONSUMER", "id": cons.id}, "name": "Grace Hopper"}]


async def test_identities_and_access_token_are_not_in_310(client, programme):
    p = await programme()
    corp = await sign_up(client, p)
    assert (await client.get("/3.1.0/multi/identities", headers=corp.headers)).status_code == 404
    r = await client.post(
        "/3.1.0/multi/access_token",
        headers=corp.headers,
        json={"identity": {"type": "CORPORATE", "id": corp.id}},
    )
    assert r.status_code == 404


async def test_refusals(client, programme):
    p, other = await programme(), await programme()
    corp = await sign_up(client, p)
    for method, path, body in (
        ("GET", "/multi/identities", None),
        ("POST", "/multi/access_token", {"identity": {"type": "CORPORATE", "id": corp.id}}),
        ("POST", "/multi/passwords/update", {"oldPassword": pw(PASSWORD), "newPassword": pw(NEW)}),
    ):
        r = await client.request(method, path, json=body)
        assert r.status_code == 400, path
        r = await client.request(method, path, headers={"api-key": "nope"}, json=body)
        assert r.status_code == 401, path
        r = await client.request(method, path, headers=p.headers, json=body)
        assert r.status_code == 401, path
        wrong = {**other.headers, "Authorization": corp.headers["Authorization"]}
        r = await client.request(method, path, headers=wrong, json=body)
        assert r.status_code == 403, path
    # The password did not change through any refused call.
    assert (await login(client, p, corp.email)).status_code == 200
