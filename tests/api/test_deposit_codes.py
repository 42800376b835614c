"""Simulator deposits: the codes about the sender's txId and bank networks (contract §8)."""

from __future__ import annotations

import asyncio

from tests.factories import open_account, verified

SIM = "/simulate/api/accounts"


async def test_tx_id_is_credited_once(client, programme, admin_headers):
    p = await programme()
    ident = await verified(client, p)
    acc = await open_account(client, ident)
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
    other = await open_account(client, await verified(client, q))
    r = await client.post(
        f"{SIM}/{other['id']}/deposit", headers={"programme-key": q.api_key}, json=body
    )
    assert r.json() == {"code": "COMPLETED"}
    r = await client.get(f"/multi/managed_accounts/{acc['id']}", headers=ident.headers)
    assert r.json()["balances"]["availableBalance"] == 500


async def test_parallel_deposits_with_one_tx_id_credit_once(client, programme, admin_headers):
    p = await programme()
    ident = await verified(client, p)
    acc = await open_account(client, ident)
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


async def test_bank_network_payments_need_an_iban(client, programme):
    p = await programme(ibanAllocationDelaySeconds=0)
    ident = await verified(client, p)
    acc = await open_account(client, ident)
    h = {"programme-key": p.api_key}
    amount = {"currency": "EUR", "amount": 100}
    for extra in (
        {"paymentNetwork": "SEPA"},
        {"sepa": {"iban": "IE29AIBK93115212345678", "bankIdentifierCode": "AIBKIE2D"}},
        {"fasterPayments": {"accountNumber": "12345678", "sortCode": "123456"}},
    ):
        r = await client.post(
            f"{SIM}/{acc['id']}/deposit", headers=h, json={"depositAmount": amount, **extra}
        )
        assert r.json() == {"code": "DENIED_ACCOUNT_NOT_UPGRADED_TO_IBAN"}, extra
    r = await client.post(f"/multi/managed_accounts/{acc['id']}/iban", headers=ident.headers)
    assert r.json()["state"] == "ALLOCATED"
    r = await client.post(
        f"{SIM}/{acc['id']}/deposit",
        headers=h,
        json={"depositAmount": amount, "paymentNetwork": "SEPA"},
    )
    assert r.json() == {"code": "COMPLETED"}
    r = await client.post(
        f"{SIM}/{acc['id']}/deposit", headers=h, json={"depositAmount": amount, "txId": "x"}
    )
    assert r.status_code == 400
