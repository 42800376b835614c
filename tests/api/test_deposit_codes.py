"""Simulator deposits: the codes about the sender's txId and bank networks (contract §8)."""

from __future__ import annotations

import asyncio

from tests.factories import open_account, verified

SIM = "/simulate/api/accounts"


async def test_tx_id_is_credited_once(client, programme, admin_headers):
    p = await programme()
    ident = await verified(client, p)
    acc = await open_account(client, ident, iban=True)
    h = {"programme-key": p.api_key}
    body = {"depositAmount": {"currency": "EUR", "amount": 500}, "txId": 777}
    r = await client.post(f"{SIM}/{acc['id']}/deposit", headers=h, json=body)
    assert r.json() == {"code": "COMPLETED"}
    r = await client.post(f"{SIM}/{acc['id']}/deposit", headers=h, json=body)
    assert r.json() == {"code": "DENIED_INVALID_TX_ID"}
    for bad in (0, -5):
        r = await client.post(f"{SIM}/{acc['id']}/deposit", headers=h, json={**body, "txId": bad})
        assert r.json() == {"code": "DENIED_INVALID_TX_ID"}
    # Another programme may use the same txId.
    q = await programme()
    other = await open_account(client, await verified(client, q), iban=True)
    r = await client.post(
        f"{SIM}/{other['id']}/deposit", headers={"programme-key": q.api_key}, json=body
    )
    assert r.json() == {"code": "COMPLETED"}
    r = await client.get(f"/multi/managed_accounts/{acc['id']}", headers=ident.headers)
    assert r.json()["balances"]["availableBalance"] == 500


async def test_parallel_deposits_with_one_tx_id_credit_once(client, programme, admin_headers):
    p = await programme()
    ident = await verified(client, p)
    acc = await open_account(client, ident, iban=True)
    body = {"depositAmount": {"currency": "EUR", "amount": 100}, "txId": 4242}
    replies = await asyncio.gather(
        *[
            client.post(
                f"{SIM}/{acc['id']}/deposit", headers={"programme-key": p.api_key}, json=body
            )
            for _ in range(10)
        ]
    )
    codes = sorted(r.json()["code"] for r in replies)
    assert codes == ["COMPLETED"] + ["DENIED_INVALID_TX_ID"] * 9
    r = await client.get(f"/multi/managed_accounts/{acc['id']}", headers=ident.headers)
    assert r.json()["balances"]["availableBalance"] == 100
    r = await client.get(f"/portal/api/programmes/{p.id}/ledger/verify", headers=admin_headers)
    assert r.json()["ok"] is True


async def test_deposits_need_an_allocated_iban(client, programme):
    """D11a: by account id too, money from outside reaches only an account with an allocated
    IBAN, whether or not the deposit names a payment network, as on the reference."""
    p = await programme(ibanAllocationDelaySeconds=60)
    ident = await verified(client, p)
    acc = await open_account(client, ident)
    h = {"programme-key": p.api_key}
    amount = {"currency": "EUR", "amount": 100}
    r = await client.post(f"/multi/managed_accounts/{acc['id']}/iban", headers=ident.headers)
    assert r.json()["state"] == "PENDING_ALLOCATION"  # requested, not allocated yet
    for extra in (
        {},
        {"txId": 31},
        {"paymentNetwork": "SEPA"},
        {"sepa": {"iban": "IE29AIBK93115212345678", "bankIdentifierCode": "AIBKIE2D"}},
        {"fasterPayments": {"accountNumber": "12345678", "sortCode": "123456"}},
    ):
        r = await client.post(
            f"{SIM}/{acc['id']}/deposit", headers=h, json={"depositAmount": amount, **extra}
        )
        assert r.json() == {"code": "DENIED_ACCOUNT_NOT_UPGRADED_TO_IBAN"}, extra
    r = await client.post(f"/simulate/api/managed_accounts/{acc['id']}/iban/allocate", headers=h)
    assert r.status_code == 204
    r = await client.get(f"/multi/managed_accounts/{acc['id']}", headers=ident.headers)
    assert r.json()["balances"] == {"availableBalance": 0, "actualBalance": 0}
    r = await client.post(
        f"{SIM}/{acc['id']}/deposit",
        headers=h,
        json={"depositAmount": amount, "paymentNetwork": "SEPA"},
    )
    assert r.json() == {"code": "COMPLETED"}
    r = await client.post(f"{SIM}/{acc['id']}/deposit", headers=h, json={"depositAmount": amount})
    assert r.json() == {"code": "COMPLETED"}
    r = await client.get(f"/multi/managed_accounts/{acc['id']}", headers=ident.headers)
    assert r.json()["balances"] == {"availableBalance": 200, "actualBalance": 200}
    r = await client.post(
        f"{SIM}/{acc['id']}/deposit", headers=h, json={"depositAmount": amount, "txId": "x"}
    )
    assert r.status_code == 400


async def test_wrong_json_types_are_refused_on_every_api(client, programme, admin_headers):
    """Issue 9: the simulator and the operator API refuse wrong JSON types with 400 as the
    banking API does, and change nothing; an integral number written 5.0 is still an integer."""
    p = await programme()
    ident = await verified(client, p)
    acc = await open_account(client, ident, iban=True)
    h = {"programme-key": p.api_key}
    for body in (
        {"depositAmount": {"currency": "EUR", "amount": False}},
        {"depositAmount": {"currency": "EUR", "amount": "100"}},
        {"depositAmount": {"currency": "EUR", "amount": 1.5}},
        {"depositAmount": {"currency": 978, "amount": 100}},
        {"depositAmount": {"currency": "EUR", "amount": 100}, "txId": True},
    ):
        r = await client.post(f"{SIM}/{acc['id']}/deposit", headers=h, json=body)
        assert r.status_code == 400, body
        assert r.json()["syntaxErrors"]["invalidFields"], r.text
    for body in ({"seconds": True}, {"seconds": "5"}):
        r = await client.post("/simulate/api/clock/advance", headers=h, json=body)
        assert r.status_code == 400, body
    r = await client.post("/simulate/api/corporates/1/reject", headers=h, json={"permanent": 1})
    assert r.status_code == 400
    settings = f"/portal/api/programmes/{p.id}/settings"
    for body in ({"stepUpRequired": 0}, {"failedLoginLimit": "5"}, {"failedLoginLimit": True}):
        r = await client.patch(settings, headers=admin_headers, json=body)
        assert r.status_code == 400, body
    r = await client.get(f"/portal/api/programmes/{p.id}", headers=admin_headers)
    assert r.json()["settings"]["stepUpRequired"] is False
    assert r.json()["settings"]["failedLoginLimit"] == 5
    r = await client.get(f"/multi/managed_accounts/{acc['id']}", headers=ident.headers)
    assert r.json()["balances"] == {"availableBalance": 0, "actualBalance": 0}
    # 100.0 is the integer 100 (JSON Schema counts it as one).
    body = {"depositAmount": {"currency": "EUR", "amount": 100.0}}
    r = await client.post(f"{SIM}/{acc['id']}/deposit", headers=h, json=body)
    assert r.json() == {"code": "COMPLETED"}
    r = await client.patch(settings, headers=admin_headers, json={"failedLoginLimit": 7.0})
    assert r.status_code == 200 and r.json()["failedLoginLimit"] == 7
