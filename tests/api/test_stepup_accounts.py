"""Managed-account operations demand a stepped-up session when the programme says so (D7)."""

from __future__ import annotations

import pytest

from tests.factories import CODE, login, open_account, otp_step_up, verified

BASES = ["/multi", "/3.1.0/multi"]


async def enrol_sms(client, headers):
    assert (
        await client.post("/multi/authentication_factors/otp/SMS", headers=headers)
    ).status_code == 204
    r = await client.post(
        "/multi/authentication_factors/otp/SMS/verify",
        headers=headers,
        json={"verificationCode": CODE},
    )
    assert r.status_code == 204, r.text


@pytest.mark.parametrize("base", BASES)
async def test_account_operations_need_step_up(client, programme, admin_headers, base):
    p = await programme()
    ident = await verified(client, p, "corporates")
    acc = await open_account(client, ident)
    await enrol_sms(client, ident.headers)
    r = await client.patch(
        f"/portal/api/programmes/{p.id}/settings",
        headers=admin_headers,
        json={"stepUpRequired": True},
    )
    assert r.status_code == 200
    profile = p.profiles["corporateManagedAccount"]
    calls = [
        ("GET", f"{base}/managed_accounts", None),
        (
            "POST",
            f"{base}/managed_accounts",
            {"profileId": profile, "friendlyName": "Two", "currency": "EUR"},
        ),
        ("GET", f"{base}/managed_accounts/{acc['id']}", None),
        ("PATCH", f"{base}/managed_accounts/{acc['id']}", {"friendlyName": "Renamed"}),
    ]
    for method, url, body in calls:
        r = await client.request(method, url, headers=ident.headers, json=body)
        assert r.status_code == 403, (method, url, r.text)
        assert r.json()["errorCode"] == "STEP_UP_REQUIRED"
        assert r.json()["message"]
    # Nothing was created or renamed while refused.
    await otp_step_up(client, ident.headers)
    r = await client.get(f"{base}/managed_accounts", headers=ident.headers)
    assert r.status_code == 200
    assert r.json()["count"] == 1
    assert r.json()["accounts"][0]["friendlyName"] == "Main"
    for method, url, body in calls:
        r = await client.request(method, url, headers=ident.headers, json=body)
        assert r.status_code == 200, (method, url, r.text)
    # A new login starts un-stepped.
    fresh = (await login(client, p, ident.email)).json()["token"]
    r = await client.get(
        f"{base}/managed_accounts", headers={**p.headers, "Authorization": f"Bearer {fresh}"}
    )
    assert r.status_code == 403
