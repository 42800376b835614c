"""The issue's "done when": each identity type signs up, verifies, logs in, is approved and
invites a user who logs in, on both versions."""

from __future__ import annotations

import pytest

from tests.factories import CODE, PASSWORD, email, login, sign_up


@pytest.mark.parametrize("kind", ["corporates", "consumers"])
@pytest.mark.parametrize("base", ["/multi", "/3.1.0/multi"])
async def test_sign_up_to_approved_with_an_invited_user(client, programme, kind, base):
    p = await programme()
    ident = await sign_up(client, p, kind, base)
    r = await login(client, p, ident.email, base=base)
    assert r.status_code == 200, r.text
    ident.token = r.json()["token"]

    dd = "kyb" if kind == "corporates" else "kyc"
    r = await client.post(f"{base}/{kind}/{dd}", headers=ident.headers)
    assert r.status_code == 200, r.text
    reference = r.json()["reference"]
    page = await client.get(f"/kyc/{reference}")
    assert page.status_code == 200
    assert "INITIATED" in page.text
    r = await client.post(f"/kyc/{reference}", data={"outcome": "approve"})
    assert r.status_code == 303
    r = await client.get(f"{base}/{kind}/{dd}", headers=ident.headers)
    status_field = "kybStatus" if kind == "corporates" else "fullDueDiligence"
    assert r.json()[status_field] == "APPROVED"

    user_email = email()
    r = await client.post(
        f"{base}/users",
        headers=ident.headers,
        json={"name": "Bob", "surname": "Builder", "email": user_email},
    )
    assert r.status_code == 200, r.text
    user_id = r.json()["id"]
    assert (
        await client.post(f"{base}/users/{user_id}/invite", headers=ident.headers)
    ).status_code == 204
    r = await client.post(
        f"{base}/users/{user_id}/invite/consume",
        headers=p.headers,
        json={"inviteCode": CODE, "password": {"value": PASSWORD}},
    )
    assert r.status_code == 200, r.text
    r = await login(client, p, user_email, base=base)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["credentials"] == {"type": "USER", "id": user_id}
    assert body["identity"] == {"type": kind[:-1].upper(), "id": ident.id}
