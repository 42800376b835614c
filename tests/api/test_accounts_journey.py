"""Issue 5's "done when": a funded account is listed, filtered, IBAN-upgraded, blocked and
charged fees on both versions, and the ledger holds."""

from __future__ import annotations

import pytest

from tests.factories import deposit, open_account, verified


@pytest.mark.parametrize("base", ["/multi", "/3.1.0/multi"])
async def test_funded_account_lifecycle(client, programme, admin_headers, base):
    p = await programme(ibanAllocationDelaySeconds=0)
    ident = await verified(client, p, "corporates", base)
    acc = await open_account(client, ident, "EUR", base, tag="ops")
    assert acc["balances"] == {"availableBalance": 0, "actualBalance": 0}
    assert acc["state"] == {"state": "ACTIVE"}

    # Money from outside reaches an account once it has its IBAN (D11a).
    r = await client.post(f"{base}/managed_accounts/{acc['id']}/iban", headers=ident.headers)
    assert r.status_code == 200, r.text
    iban = r.json()
    assert iban["state"] == "ALLOCATED"
    assert iban["bankAccountDetails"][0]["details"]["iban"].startswith("IE")
    assert await deposit(client, p, acc["id"], 1000) == "COMPLETED"

    r = await client.get(f"{base}/managed_accounts?tag=ops&state=ACTIVE", headers=ident.headers)
    assert r.status_code == 200, r.text
    assert r.json()["count"] == 1
    assert r.json()["accounts"][0]["balances"]["availableBalance"] == 1000

    fee_path = f"{base}/corporates/fees/charge"
    body = {"feeType": "ADMIN_FEE", "source": {"type": "managed_accounts", "id": acc["id"]}}
    r = await client.post(fee_path, headers=ident.headers, json=body)
    assert r.status_code == (200 if base == "/multi" else 204), r.text
    r = await client.get(f"{base}/managed_accounts/{acc['id']}", headers=ident.headers)
    assert r.json()["balances"] == {"availableBalance": 900, "actualBalance": 900}

    r = await client.post(f"{base}/managed_accounts/{acc['id']}/block", headers=ident.headers)
    assert r.status_code == 204
    r = await client.get(f"{base}/managed_accounts/{acc['id']}", headers=ident.headers)
    assert r.json()["state"] == {"state": "BLOCKED", "blockedReason": "USER"}

    r = await client.get(f"/portal/api/programmes/{p.id}/ledger/verify", headers=admin_headers)
    assert r.json() == {"ok": True, "violations": []}
