"""The 3.63 line's base URL, `/3.63.4/multi` (issue 43 §1, decisions D34 to D36), black-box:
its own description (`info.version` 3.63.4) with every 3.29.1 operation but the spend rules
`PUT`, which answers 404 there; the per-resource payment challenges marked deprecated there and
only there; one core and one session model with `/multi` (a token, an identity, an account are
the same through either); and the callers it refuses as every base does. The line's new
operations answer 404 on every other base."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.test_managed_cards import create
from tests.factories import login, open_account, sign_up, verified

LINE = "/3.63.4/multi"
DEPRECATED = {
    f"{kind}{operation}"
    for kind in ("send", "outgoingWireTransfer")
    for operation in ("SCAChallenge", "SCAVerify", "SCAChallengePush")
}


def operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        operation["operationId"]: operation
        for item in document["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    }


async def test_the_line_has_its_own_description_with_every_3_29_1_operation_but_one(
    client: httpx.AsyncClient,
) -> None:
    line = (await client.get(f"{LINE}/openapi.json")).json()
    latest = (await client.get("/multi/openapi.json")).json()
    assert line["info"]["version"] == "3.63.4"
    assert latest["info"]["version"] == "3.29.1"
    # Confirmation of Payee's and scheduling's operations are the line's own (0084, 0085).
    assert set(operations(line)) == set(operations(latest)) - {"managedCardSpendRulesSet"} | {
        "outgoingWireTransferConfirm",
        "outgoingWireTransferSingleCancel",
        "transferCancel",
        "sendCancel",
        "outgoingWireTransferCancel",
        "multipleSCAChallenge",
        "multipleSCAVerify",
        "multipleSCAChallengePush",
        "beneficiaryBatchCreate",
        "beneficiariesGet",
        "beneficiaryGet",
        "beneficiaryBatchRemove",
        "beneficiaryBatchesGet",
        "beneficiaryBatchGet",
        "beneficiaryBatchSCAChallenge",
        "beneficiaryBatchSCAVerify",
        "beneficiaryBatchSCAChallengePush",
        # Linked accounts (0087).
        "linkedAccountsGet",
        "linkedAccountCreate",
        "linkedAccountGet",
        "linkedAccountUpdate",
        "linkedAccountRemove",
        "linkedAccountBlock",
        "linkedAccountUnblock",
        "linkedAccountVerificationsGet",
    }
    assert "put" not in line["paths"]["/managed_cards/{id}/spend_rules"]
    assert "3.63 line" in line["info"]["description"]


async def test_the_per_resource_challenges_are_deprecated_on_the_line_only(
    client: httpx.AsyncClient,
) -> None:
    line = operations((await client.get(f"{LINE}/openapi.json")).json())
    latest = operations((await client.get("/multi/openapi.json")).json())
    assert {op for op, body in line.items() if body.get("deprecated")} == DEPRECATED | {
        "outgoingWireTransferCancel"  # the bulk cancel, for the single one (v3.63.md §5.2)
    }
    assert {op for op, body in latest.items() if body.get("deprecated")} == {
        "managedCardSpendRulesSet"
    }


async def test_the_spend_rules_put_is_gone_on_the_line(client, programme) -> None:
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    rules = {"allowedMerchantCategories": ["5411"]}
    path = f"/managed_cards/{card['id']}/spend_rules"
    gone = await client.put(f"{LINE}{path}", headers=ident.headers, json=rules)
    assert gone.status_code == 404
    # The same card and caller on 3.29.1, where the operation is deprecated but served.
    kept = await client.put(f"/multi{path}", headers=ident.headers, json=rules)
    assert kept.status_code == 200, kept.text
    assert kept.json()["allowedMerchantCategories"] == ["5411"]
    # The line reads the rules the 3.29.1 call set: one card, one store.
    read = await client.get(f"{LINE}{path}", headers=ident.headers)
    assert read.status_code == 200
    assert read.json()["cardLevelSpendRules"]["allowedMerchantCategories"] == ["5411"]


async def test_one_core_and_one_session_model_for_every_base(client, programme) -> None:
    p = await programme()
    ident = await verified(client, p, base=LINE)
    # An identity made on the line logs in on /multi, and that token works on the line.
    r = await login(client, p, ident.email)
    assert r.status_code == 200, r.text
    headers = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
    me = await client.get(f"{LINE}/corporates", headers=headers)
    assert me.status_code == 200, me.text
    assert me.json()["id"]["id"] == ident.id
    # An account opened on the line is the same account on /multi, field for field.
    account = await open_account(client, ident, base=LINE)
    there = await client.get(f"/multi/managed_accounts/{account['id']}", headers=ident.headers)
    assert there.status_code == 200
    assert there.json() == account


async def test_the_line_refuses_the_callers_every_base_refuses(
    client, programme, container
) -> None:
    mine, theirs = await programme(), await programme()
    owner = await verified(client, mine, base=LINE)
    account = await open_account(client, owner, base=LINE)
    path = f"{LINE}/managed_accounts/{account['id']}"
    no_key = await client.get(path, headers={"Authorization": owner.headers["Authorization"]})
    assert no_key.status_code == 400
    assert no_key.json()["syntaxErrors"]["invalidFields"][0]["fieldName"] == "api-key"
    unknown = {**owner.headers, "api-key": "mb_sbx_nope"}
    assert (await client.get(path, headers=unknown)).status_code == 401
    # The owner's token with another programme's key: refused before anything is read.
    other_key = {**owner.headers, "api-key": theirs.api_key}
    assert (await client.get(path, headers=other_key)).status_code == 403
    # Another identity of the same programme: the account does not exist for it.
    stranger = await sign_up(client, mine, base=LINE)
    assert (await client.get(path, headers=stranger.headers)).status_code == 404
    assert (await client.get(path, headers=owner.headers)).status_code == 200


async def test_the_lines_new_operations_are_the_lines_alone(client, programme) -> None:
    """D35: none of the line's new paths is served on 3.29.1 or 3.1.0: each answers 404 there,
    not 405 or 500."""
    p = await programme()
    ident = await sign_up(client, p)
    new = (
        ("POST", "/transfers/bulk/cancel"),
        ("POST", "/sends/bulk/cancel"),
        ("POST", "/outgoing_wire_transfers/bulk/cancel"),
        ("POST", "/outgoing_wire_transfers/1/confirm"),
        ("POST", "/outgoing_wire_transfers/1/cancel"),
        ("POST", "/challenges/otp/SMS"),
        ("GET", "/beneficiaries"),
        ("GET", "/linked_accounts"),
        ("POST", "/linked_accounts/1/block"),
    )
    for base in ("/multi", "/3.29.1/multi", "/3.1.0/multi"):
        for method, path in new:
            r = await client.request(method, f"{base}{path}", headers=ident.headers)
            assert r.status_code == 404, (base, method, path, r.status_code)
