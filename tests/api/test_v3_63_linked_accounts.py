"""Linked accounts on the 3.63 line (issue 43 §4, v3.63.md §4, D39, D42-D45, decision 0087),
black-box over HTTP: the eight operations, each create 409 of D39 in its order, the 400s, the
list's filters (`DESTROYED` read as `REMOVED`), block, unblock and remove, the verification
run and what completes its steps (the simulator's `verify` and `set`, a deposit with the
instruction's reference), step-up, idempotency, the refused callers and the events."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.payments_support import customer, profile, settings
from tests.api.test_card_funding import events
from tests.api.webhook_support import receiving
from tests.conftest import Prog
from tests.factories import Identity, open_account, otp_step_up, sign_up, verified

LINE = "/3.63.4/multi"
LA = f"{LINE}/linked_accounts"
SIM = "/simulate/api/linked_accounts"
IBAN = "DE89370400440532013000"
OTHER_IBAN = "GB82WEST12345698765432"
UK = {"accountNumber": "12345678", "sortCode": "123456"}


def body(**over: Any) -> dict[str, Any]:
    return {
        "name": "Acme Ltd",
        "type": "BUSINESS",
        "country": "DE",
        "accountReference": {"iban": IBAN, "bankIdentifierCode": "DEUTDEFF"},
        "friendlyName": "Savings",
        "tag": "main",
        **over,
    }


async def create(
    client: httpx.AsyncClient, ident: Identity, headers: dict[str, str] | None = None, **over: Any
) -> httpx.Response:
    return await client.post(LA, headers=headers or ident.headers, json=body(**over))


async def made(client: httpx.AsyncClient, ident: Identity, **over: Any) -> dict[str, Any]:
    r = await create(client, ident, **over)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def runs(client: httpx.AsyncClient, ident: Identity, account_id: str) -> list[Any]:
    r = await client.get(f"{LA}/{account_id}/verifications", headers=ident.headers)
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["count"] == page["responseCount"] == len(page["verificationRuns"])
    out: list[Any] = page["verificationRuns"]
    return out


def steps(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["step"]: s for s in run["verificationSteps"]}


async def state(client: httpx.AsyncClient, ident: Identity, account_id: str) -> str:
    r = await client.get(f"{LA}/{account_id}", headers=ident.headers)
    assert r.status_code == 200, r.text
    out: str = r.json()["state"]
    return out


async def sim(client: httpx.AsyncClient, p: Prog, path: str, json: Any) -> httpx.Response:
    return await client.post(f"{SIM}/{path}", headers={"programme-key": p.api_key}, json=json)


async def verify_all(client: httpx.AsyncClient, p: Prog, account_id: str) -> None:
    r = await sim(client, p, f"{account_id}/set", {"state": "VERIFIED"})
    assert r.status_code == 204, r.text


async def iban_of(client: httpx.AsyncClient, ident: Identity, acc: str) -> dict[str, str]:
    r = await client.get(f"/multi/managed_accounts/{acc}/iban", headers=ident.headers)
    assert r.status_code == 200, r.text
    details: dict[str, str] = r.json()["bankAccountDetails"][0]["details"]
    return details


async def test_a_new_account_awaits_its_verification(client, programme):
    p = await programme()
    ident, acc = await customer(client, p, sms=False)
    r = await create(client, ident)
    assert r.status_code == 200, r.text
    account = r.json()
    assert account == {
        "id": account["id"],
        "profileId": p.profiles["linkedAccounts"],
        "tag": "main",
        "friendlyName": "Savings",
        "name": "Acme Ltd",
        "type": "BUSINESS",
        "currency": "EUR",
        "country": "DE",
        "accountReference": {"iban": IBAN, "bankIdentifierCode": "DEUTDEFF"},
        "state": "PENDING_VERIFICATION",
        "creationTimestamp": account["creationTimestamp"],
        "owner": {"type": "CORPORATE", "id": ident.id},
    }
    assert (await client.get(f"{LA}/{account['id']}", headers=ident.headers)).json() == account
    [run] = await runs(client, ident, account["id"])
    assert run["state"] == "PENDING" and "completedTimestamp" not in run
    by_step = steps(run)
    assert [s["step"] for s in run["verificationSteps"]] == [
        "USER_DECLARATION_SCA_CHALLENGE",
        "TRANSFER_INSTRUCTION",
        "INTERNAL_CHECKS",
    ]
    assert by_step["USER_DECLARATION_SCA_CHALLENGE"]["status"] == "PENDING_USER"
    assert by_step["INTERNAL_CHECKS"]["status"] == "PENDING_REVIEW"
    instruction = by_step["TRANSFER_INSTRUCTION"]
    assert instruction["status"] == "PENDING_USER"
    details = instruction["details"]
    assert details["amount"] == {"currency": "EUR", "amount": 1}
    assert details["reference"].startswith("LINK-") and len(details["reference"]) == 13
    mine = await iban_of(client, ident, acc)
    assert details["destination"]["accountReference"]["iban"] == mine["iban"]
    assert details["destination"]["accountOwnerName"]
    # Not on the other bases (D35).
    for base in ("/multi", "/3.29.1/multi", "/3.1.0/multi"):
        got = await client.get(f"{base}/linked_accounts/{account['id']}", headers=ident.headers)
        assert got.status_code == 404


async def test_a_consumer_links_personal_accounts_and_a_uk_one_is_in_gbp(client, programme):
    p = await programme()
    ident, _ = await customer(client, p, kind="consumers", sms=False)
    refused = await create(client, ident)
    assert refused.json() == {"errorCode": "INVALID_IDENTITY_TYPE"}
    uk = await made(client, ident, type="PERSONAL", country="GB", accountReference=UK)
    assert uk["currency"] == "GBP" and uk["accountReference"] == UK
    iban_gbp = await made(client, ident, type="PERSONAL", currency="GBP")
    assert iban_gbp["currency"] == "GBP"
    described = await made(
        client, ident, type="PERSONAL", accountReference={"accountDescriptor": "card 1234"}
    )
    assert described["currency"] == "EUR"
    # Without an account in GBP, the instruction names its oldest account with an IBAN.
    [run] = await runs(client, ident, uk["id"])
    destination = steps(run)["TRANSFER_INSTRUCTION"]["details"]["destination"]
    assert "iban" in destination["accountReference"]


async def test_the_destination_is_the_oldest_account_in_the_currency(client, programme):
    p = await programme()
    ident, eur = await customer(client, p, sms=False)
    gbp = (await open_account(client, ident, "GBP", iban=True))["id"]
    later_eur = (await open_account(client, ident, "EUR", iban=True))["id"]
    uk = await made(client, ident, accountReference=UK)
    [run] = await runs(client, ident, uk["id"])
    where = steps(run)["TRANSFER_INSTRUCTION"]["details"]["destination"]["accountReference"]
    details = await iban_of(client, ident, gbp)
    assert where == {"accountNumber": details["accountNumber"], "sortCode": details["sortCode"]}
    sepa = await made(client, ident)
    [run] = await runs(client, ident, sepa["id"])
    where = steps(run)["TRANSFER_INSTRUCTION"]["details"]["destination"]["accountReference"]
    assert where["iban"] == (await iban_of(client, ident, eur))["iban"]
    assert where["iban"] != (await iban_of(client, ident, later_eur))["iban"]


async def test_each_create_conflict(client, programme, admin_headers):
    p = await programme()
    ident, acc = await customer(client, p, sms=False)
    managed = await iban_of(client, ident, acc)
    gbp = (await open_account(client, ident, "GBP", iban=True))["id"]
    uk_managed = await iban_of(client, ident, gbp)
    cases = [
        ({"profileId": p.profiles["corporate"]}, "PROFILE_NOT_FOUND"),
        ({"type": "PERSONAL"}, "INVALID_IDENTITY_TYPE"),
        ({"accountReference": {"iban": IBAN, **UK}}, "ACCOUNT_NUMBER_AND_IBAN_PROVIDED"),
        ({"accountReference": {"iban": IBAN, "sortCode": "123456"}}, "SORT_CODE_AND_IBAN_PROVIDED"),
        ({"accountReference": {"accountNumber": "12345678"}}, "SORT_CODE_MISSING"),
        ({"accountReference": {"sortCode": "123456"}}, "ACCOUNT_NUMBER_MISSING"),
        ({"accountReference": {}}, "NO_ACCOUNT_DETAILS_PROVIDED"),
        ({"accountReference": {"accountDescriptor": ""}}, "ACCOUNT_DESCRIPTOR_MISSING"),
        ({"accountReference": UK, "currency": "EUR"}, "IBAN_MISSING"),
        ({"currency": "USD"}, "CURRENCY_NOT_SUPPORTED_BY_PROFILE"),
        ({"country": "ZZ"}, "COUNTRY_NOT_SUPPORTED_BY_PROFILE"),
        ({"accountReference": {"iban": managed["iban"]}}, "THIS_IS_A_MANAGED_ACCOUNT"),
        (
            {"accountReference": {k: uk_managed[k] for k in ("accountNumber", "sortCode")}},
            "THIS_IS_A_MANAGED_ACCOUNT",
        ),
        # Two rules broken: the first in D39's order answers.
        ({"type": "PERSONAL", "accountReference": {}}, "INVALID_IDENTITY_TYPE"),
        ({"accountReference": {}, "currency": "USD"}, "NO_ACCOUNT_DETAILS_PROVIDED"),
    ]
    for over, code in cases:
        r = await create(client, ident, **over)
        assert (r.status_code, r.json()) == (409, {"errorCode": code}), over
    first = await made(client, ident)
    again = await create(client, ident, friendlyName="Again")
    assert again.json() == {"errorCode": "LINKED_ACCOUNT_ALREADY_ADDED"}
    # Nothing was made by a refused create.
    page = (await client.get(LA, headers=ident.headers)).json()
    assert [a["id"] for a in page["accounts"]] == [first["id"]]
    # Once removed (or rejected), the same account may be linked again.
    assert (
        await client.post(f"{LA}/{first['id']}/remove", headers=ident.headers)
    ).status_code == 204
    await made(client, ident)

    # The identity must be approved and hold an active account with an IBAN.
    unverified = await sign_up(client, p, base=LINE)
    no_account = await verified(client, p, base=LINE)
    no_iban = await verified(client, p, base=LINE)
    await open_account(client, no_iban, base=LINE)
    for who in (unverified, no_account, no_iban):
        r = await create(client, who)
        assert r.json() == {"errorCode": "MANAGED_ACCOUNT_MISSING"}
    # The profile, once the operator makes it inactive.
    await profile(client, admin_headers, p, "linkedAccounts", active=False)
    assert (await create(client, ident, accountReference=UK)).json() == {
        "errorCode": "PROFILE_INACTIVE"
    }


async def test_at_most_twenty_accounts_not_removed(client, programme):
    p = await programme()
    ident, _ = await customer(client, p, sms=False)
    ids = []
    for i in range(20):
        ids.append(
            (await made(client, ident, accountReference={"accountDescriptor": f"n{i}"}))["id"]
        )
    r = await create(client, ident)
    assert (r.status_code, r.json()) == (409, {"errorCode": "MODEL_CONSTRAINTS_VIOLATED"})
    assert (await client.post(f"{LA}/{ids[0]}/remove", headers=ident.headers)).status_code == 204
    await made(client, ident)


async def test_malformed_values_are_400(client, programme):
    p = await programme()
    ident, _ = await customer(client, p, sms=False)
    for over, field in (
        ({"country": "de"}, "country"),
        ({"accountReference": {"iban": "DE89370400440532013001"}}, "accountReference.iban"),
        ({"accountReference": {"accountNumber": "1234567", "sortCode": "123456"}}, None),
        ({"name": "x" * 101}, "name"),
        ({"name": ""}, "name"),
        ({"type": "OTHER"}, "type"),
        ({"tag": "a b"}, "tag"),
        ({"currency": "eur"}, "currency"),
        ({"friendlyName": "x" * 51}, "friendlyName"),
    ):
        r = await create(client, ident, **over)
        assert r.status_code == 400, (over, r.text)
        fields = [f["fieldName"] for f in r.json()["syntaxErrors"]["invalidFields"]]
        assert field is None or field in fields, (over, fields)
    r = await client.post(LA, headers=ident.headers, json={"name": "Acme"})
    assert r.status_code == 400
    for params in ({"state": "NOPE"}, {"limit": "101"}, {"limit": "0"}, {"offset": "-1"}):
        assert (await client.get(LA, headers=ident.headers, params=params)).status_code == 400
    account = await made(client, ident)
    r = await client.patch(
        f"{LA}/{account['id']}", headers=ident.headers, json={"friendlyName": ""}
    )
    assert r.status_code == 400
    r = await client.get(
        f"{LA}/{account['id']}/verifications", headers=ident.headers, params={"state": "NOPE"}
    )
    assert r.status_code == 400


async def test_update_changes_the_tag_and_friendly_name_only(client, programme):
    p = await programme()
    ident, _ = await customer(client, p, sms=False)
    account = await made(client, ident)
    path = f"{LA}/{account['id']}"
    r = await client.patch(path, headers=ident.headers, json={"tag": "other", "name": "Nope"})
    assert r.status_code == 200, r.text
    assert r.json() == {**account, "tag": "other"}
    r = await client.patch(path, headers=ident.headers, json={"friendlyName": "Renamed"})
    assert r.json() == {**account, "tag": "other", "friendlyName": "Renamed"}
    assert (await client.get(path, headers=ident.headers)).json()["friendlyName"] == "Renamed"
    assert (await client.post(f"{path}/remove", headers=ident.headers)).status_code == 204
    r = await client.patch(path, headers=ident.headers, json={"tag": "late"})
    assert (r.status_code, r.json()) == (409, {"errorCode": "LINKED_ACCOUNT_REMOVED"})
    assert await state(client, ident, account["id"]) == "REMOVED"


async def test_block_unblock_and_remove(client, programme):
    p = await programme()
    ident, _ = await customer(client, p, sms=False)
    account = await made(client, ident)
    path = f"{LA}/{account['id']}"

    async def op(name: str) -> Any:
        r = await client.post(f"{path}/{name}", headers=ident.headers)
        return r.status_code if r.status_code == 204 else (r.status_code, r.json()["errorCode"])

    assert await op("block") == (409, "LINKED_ACCOUNT_INACTIVE")
    assert await op("unblock") == (409, "LINKED_ACCOUNT_INACTIVE")
    await verify_all(client, p, account["id"])
    assert await state(client, ident, account["id"]) == "ACTIVE"
    assert await op("unblock") == (409, "LINKED_ACCOUNT_NOT_BLOCKED")
    assert await op("block") == 204
    assert await state(client, ident, account["id"]) == "BLOCKED"
    assert await op("block") == (409, "LINKED_ACCOUNT_ALREADY_BLOCKED")
    assert await op("unblock") == 204
    assert await state(client, ident, account["id"]) == "ACTIVE"
    assert await op("remove") == 204
    assert await state(client, ident, account["id"]) == "REMOVED"
    assert await op("remove") == (409, "LINKED_ACCOUNT_ALREADY_REMOVED")
    assert await op("block") == (409, "LINKED_ACCOUNT_REMOVED")
    assert await op("unblock") == (409, "LINKED_ACCOUNT_REMOVED")

    rejected = await made(client, ident, accountReference=UK)
    r = await sim(client, p, f"{rejected['id']}/set", {"state": "REJECTED"})
    assert r.status_code == 204
    path = f"{LA}/{rejected['id']}"
    assert await op("remove") == (409, "LINKED_ACCOUNT_REJECTED")
    assert await op("block") == (409, "LINKED_ACCOUNT_INACTIVE")
    # One still verifying may be removed.
    pending = await made(client, ident, accountReference={"accountDescriptor": "x"})
    path = f"{LA}/{pending['id']}"
    assert await op("remove") == 204


async def test_the_list_filters(client, programme):
    p = await programme()
    ident, _ = await customer(client, p, sms=False)
    first = await made(client, ident, tag="a", friendlyName="One")
    second = await made(client, ident, accountReference=UK, tag="b", friendlyName="Two")
    third = await made(client, ident, accountReference={"accountDescriptor": "x"}, tag="b")
    await verify_all(client, p, first["id"])
    assert (
        await client.post(f"{LA}/{third['id']}/remove", headers=ident.headers)
    ).status_code == 204

    async def ids(**params: Any) -> list[str]:
        r = await client.get(LA, headers=ident.headers, params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        assert page["responseCount"] == len(page["accounts"])
        return [a["id"] for a in page["accounts"]]

    assert await ids() == [third["id"], second["id"], first["id"]]  # newest first
    assert await ids(state="ACTIVE") == [first["id"]]
    assert await ids(state=["ACTIVE", "PENDING_VERIFICATION"]) == [second["id"], first["id"]]
    assert await ids(state="DESTROYED") == [third["id"]]
    assert await ids(state="REMOVED") == [third["id"]]
    assert await ids(currency="GBP") == [second["id"]]
    assert await ids(tag="b") == [third["id"], second["id"]]
    assert await ids(friendlyName="One") == [first["id"]]
    assert await ids(profileId=p.profiles["linkedAccounts"], limit=1, offset=1) == [second["id"]]
    assert await ids(profileId=p.profiles["corporate"]) == []
    assert await ids(createdFrom=first["creationTimestamp"] + 10**9) == []
    assert await ids(createdTo=first["creationTimestamp"] - 1) == []
    r = await client.get(LA, headers=ident.headers, params={"limit": 1})
    assert r.json()["count"] == 3 and r.json()["responseCount"] == 1


async def test_the_simulators_verify_and_set(client, programme):
    p, other = await programme(), await programme()
    ident, _ = await customer(client, p, sms=False)
    account = await made(client, ident)
    aid = account["id"]
    r = await sim(client, p, f"{aid}/verify", {"steps": ["INTERNAL_CHECKS"], "result": "COMPLETED"})
    assert r.status_code == 204, r.text
    [run] = await runs(client, ident, aid)
    assert run["state"] == "PENDING"
    checks = steps(run)["INTERNAL_CHECKS"]
    assert checks["status"] == "COMPLETED" and checks["completedTimestamp"] > 0
    r = await sim(client, p, f"{aid}/verify", {"steps": ["MICRO_DEPOSIT"], "result": "COMPLETED"})
    assert r.status_code == 400
    for bad in (
        {"steps": [], "result": "COMPLETED"},
        {"steps": ["X"], "result": "COMPLETED"},
        {"steps": ["INTERNAL_CHECKS"], "result": "MAYBE"},
    ):
        assert (await sim(client, p, f"{aid}/verify", bad)).status_code == 400
    assert (await sim(client, p, f"{aid}/set", {"state": "ACTIVE"})).status_code == 400
    r = await sim(
        client,
        p,
        f"{aid}/verify",
        {
            "steps": ["USER_DECLARATION_SCA_CHALLENGE", "TRANSFER_INSTRUCTION"],
            "result": "COMPLETED",
        },
    )
    assert r.status_code == 204
    assert await state(client, ident, aid) == "ACTIVE"
    [run] = await runs(client, ident, aid)
    assert run["state"] == "VERIFIED" and run["completedTimestamp"] > 0
    assert "overriddenReason" not in run
    for path, json in (
        ("verify", {"steps": ["INTERNAL_CHECKS"], "result": "REJECTED"}),
        ("set", {"state": "REJECTED"}),
    ):
        r = await sim(client, p, f"{aid}/{path}", json)
        assert (r.status_code, r.json()) == (409, {"errorCode": "ALREADY_COMPLETED"})

    rejected = (await made(client, ident, accountReference=UK))["id"]
    r = await sim(
        client, p, f"{rejected}/verify", {"steps": ["INTERNAL_CHECKS"], "result": "REJECTED"}
    )
    assert r.status_code == 204
    assert await state(client, ident, rejected) == "REJECTED"
    [run] = await runs(client, ident, rejected)
    assert run["state"] == "REJECTED"
    assert steps(run)["INTERNAL_CHECKS"]["status"] == "REJECTED"
    r = await sim(client, p, f"{rejected}/set", {"state": "VERIFIED"})
    assert (r.status_code, r.json()) == (409, {"errorCode": "ALREADY_REJECTED"})

    overridden = (await made(client, ident, accountReference={"accountDescriptor": "d"}))["id"]
    await verify_all(client, p, overridden)
    [run] = await runs(client, ident, overridden)
    assert (run["state"], run["overriddenReason"]) == ("VERIFIED", "SIMULATOR")
    assert await state(client, ident, overridden) == "ACTIVE"

    # Unknown, another programme's, no key.
    assert (await sim(client, p, "1/set", {"state": "VERIFIED"})).status_code == 404
    r = await sim(client, other, f"{aid}/set", {"state": "VERIFIED"})
    assert r.status_code == 404
    r = await client.post(f"{SIM}/{aid}/set", json={"state": "VERIFIED"})
    assert r.status_code == 400


async def test_a_deposit_with_the_instructions_reference_completes_its_step(client, programme):
    p = await programme()
    ident, acc = await customer(client, p, sms=False)
    _, elsewhere = await customer(client, p, sms=False)
    account = await made(client, ident)
    [run] = await runs(client, ident, account["id"])
    reference = steps(run)["TRANSFER_INSTRUCTION"]["details"]["reference"]
    key = {"programme-key": p.api_key}

    async def deposit(target: str, ref: str) -> None:
        r = await client.post(
            f"/simulate/api/accounts/{target}/deposit",
            headers=key,
            json={"depositAmount": {"currency": "EUR", "amount": 1}, "reference": ref},
        )
        assert r.status_code == 200 and r.json()["code"] == "COMPLETED", r.text

    async def status() -> str:
        [run] = await runs(client, ident, account["id"])
        out: str = steps(run)["TRANSFER_INSTRUCTION"]["status"]
        return out

    await deposit(acc, "LINK-NOTTHIS")
    await deposit(elsewhere, reference)  # the right reference to another account
    assert await status() == "PENDING_USER"
    # By IBAN, as a bank's transfer arrives.
    iban = (await iban_of(client, ident, acc))["iban"]
    r = await client.post(
        "/simulate/api/accounts/deposit",
        headers=key,
        json={
            "depositAmount": {"currency": "EUR", "amount": 1},
            "destinationIbanDetails": {"iban": iban},
            "reference": reference,
        },
    )
    assert r.json()["code"] == "COMPLETED"
    assert await status() == "COMPLETED"
    r = await sim(
        client,
        p,
        f"{account['id']}/verify",
        {"steps": ["USER_DECLARATION_SCA_CHALLENGE", "INTERNAL_CHECKS"], "result": "COMPLETED"},
    )
    assert r.status_code == 204
    assert await state(client, ident, account["id"]) == "ACTIVE"
    # By account id too, for another account.
    second = await made(client, ident, accountReference=UK, currency="GBP")
    [run] = await runs(client, ident, second["id"])
    ref = steps(run)["TRANSFER_INSTRUCTION"]["details"]["reference"]
    await deposit(acc, ref)
    [run] = await runs(client, ident, second["id"])
    assert steps(run)["TRANSFER_INSTRUCTION"]["status"] == "COMPLETED"


async def test_step_up_where_d39_asks_for_it(client, programme, admin_headers):
    p = await programme()
    ident, _ = await customer(client, p, sms=True)
    account = await made(client, ident)
    await verify_all(client, p, account["id"])
    await settings(client, admin_headers, p, stepUpRequired=True)
    path = f"{LA}/{account['id']}"
    for method, url, json in (
        ("GET", LA, None),
        ("POST", LA, body(accountReference=UK)),
        ("GET", path, None),
        ("PATCH", path, {"tag": "x"}),
        ("GET", f"{path}/verifications", None),
    ):
        r = await client.request(method, url, headers=ident.headers, json=json)
        assert r.status_code == 403, (method, url)
        assert r.json()["errorCode"] == "STEP_UP_REQUIRED"
    # Block, unblock and remove need none.
    assert (await client.post(f"{path}/block", headers=ident.headers)).status_code == 204
    assert (await client.post(f"{path}/unblock", headers=ident.headers)).status_code == 204
    await otp_step_up(client, ident.headers, LINE)
    assert (await client.get(path, headers=ident.headers)).status_code == 200
    assert (await create(client, ident, accountReference=UK)).status_code == 200


async def test_idempotency_on_create_block_and_unblock(client, programme):
    p = await programme()
    ident = await verified(client, p, base=LINE)
    headers = {**ident.headers, "idempotency-ref": "link-1"}
    # A first call refused with 409 stores nothing: once the identity has its account, the
    # same ref makes the account.
    r = await create(client, ident, headers=headers)
    assert r.json() == {"errorCode": "MANAGED_ACCOUNT_MISSING"}
    await open_account(client, ident, iban=True)
    first = await create(client, ident, headers=headers)
    assert first.status_code == 200, first.text
    again = await create(client, ident, headers=headers)
    assert again.status_code == 200 and again.json() == first.json()
    assert (await client.get(LA, headers=ident.headers)).json()["count"] == 1
    # Another body under the same ref is refused.
    other = await create(client, ident, headers=headers, accountReference=UK)
    assert other.status_code == 400
    assert other.json()["message"] == "Payloads do not match for the same idempotency-ref."
    await verify_all(client, p, first.json()["id"])
    block = f"{LA}/{first.json()['id']}/block"
    ref = {**ident.headers, "idempotency-ref": "block-1"}
    assert (await client.post(block, headers=ref)).status_code == 204
    assert (await client.post(block, headers=ref)).status_code == 204  # the answer again
    assert await state(client, ident, first.json()["id"]) == "BLOCKED"


async def test_the_callers_refused(client, programme):
    p, theirs = await programme(), await programme()
    ident, _ = await customer(client, p, sms=False)
    account = await made(client, ident)
    stranger, _ = await customer(client, p, sms=False)
    path = f"{LA}/{account['id']}"
    operations = (
        ("GET", LA, None),
        ("POST", LA, body(accountReference=UK)),
        ("GET", path, None),
        ("PATCH", path, {"tag": "x"}),
        ("POST", f"{path}/remove", None),
        ("POST", f"{path}/block", None),
        ("POST", f"{path}/unblock", None),
        ("GET", f"{path}/verifications", None),
    )
    token = {"Authorization": ident.headers["Authorization"]}
    for method, url, json in operations:
        r = await client.request(method, url, headers=token, json=json)
        assert r.status_code == 400, (method, url)
        assert r.json()["syntaxErrors"]["invalidFields"][0]["fieldName"] == "api-key"
        unknown = {**ident.headers, "api-key": "mb_sbx_nope"}
        assert (await client.request(method, url, headers=unknown, json=json)).status_code == 401
        other_key = {**ident.headers, "api-key": theirs.api_key}
        assert (await client.request(method, url, headers=other_key, json=json)).status_code == 403
        assert (await client.request(method, url, headers=p.headers, json=json)).status_code == 401
        if url != LA:
            r = await client.request(method, url, headers=stranger.headers, json=json)
            assert r.status_code == 404, (method, url)
    # The stranger's list is its own; the account is unchanged.
    assert (await client.get(LA, headers=stranger.headers)).json()["count"] == 0
    assert (await client.get(path, headers=ident.headers)).json() == account
    assert (await client.get(f"{LA}/99999", headers=ident.headers)).status_code == 404


async def test_the_events(client, programme, admin_headers):
    with receiving() as receiver:
        p = await programme()
        await settings(client, admin_headers, p, webhookUrl=receiver.url)
        ident, _ = await customer(client, p, sms=False)
        account = await made(client, ident)
        await verify_all(client, p, account["id"])
        for op in ("block", "unblock", "remove"):
            r = await client.post(f"{LA}/{account['id']}/{op}", headers=ident.headers)
            assert r.status_code == 204
        rejected = await made(client, ident, accountReference=UK)
        r = await sim(client, p, f"{rejected['id']}/set", {"state": "REJECTED"})
        assert r.status_code == 204
        found = list(reversed(await events(client, admin_headers, p, "linked_accounts")))
    mine = [e for e in found if e["linkedAccount"]["id"] == account["id"]]
    assert [e["eventType"] for e in mine] == [
        "PENDING_VERIFICATION",
        "VERIFIED",
        "BLOCKED",
        "UNBLOCKED",
        "REMOVED",
    ]
    assert [e["linkedAccount"]["state"] for e in mine] == [
        "PENDING_VERIFICATION",
        "ACTIVE",
        "BLOCKED",
        "ACTIVE",
        "REMOVED",
    ]
    assert mine[0]["linkedAccount"] == account
    assert mine[0]["publishedTimestamp"].isdigit()
    other = [e["eventType"] for e in found if e["linkedAccount"]["id"] == rejected["id"]]
    assert other == ["PENDING_VERIFICATION", "REJECTED"]


async def test_the_root_users_batch_challenge_completes_the_declaration(client, programme):
    """D37, D39: the ownership declaration is confirmed by a batch challenge of type
    `linked_account_declaration`; once passed, the step is COMPLETED and one already passed
    cannot be challenged again (STATE_INVALID)."""
    p = await programme()
    ident, _ = await customer(client, p)  # with an SMS factor
    account = await made(client, ident)
    body_ = {"resourceType": "linked_account_declaration", "resourceIds": [account["id"]]}
    r = await client.post(f"{LINE}/challenges/otp/SMS", headers=ident.headers, json=body_)
    assert r.status_code == 200, r.text
    challenge = r.json()["scaChallengeId"]
    r = await client.post(
        f"{LINE}/challenges/{challenge}/otp/SMS/verify",
        headers=ident.headers,
        json={"verificationCode": "123456", "resourceType": "linked_account_declaration"},
    )
    assert r.status_code == 204, r.text
    [run] = await runs(client, ident, account["id"])
    assert steps(run)["USER_DECLARATION_SCA_CHALLENGE"]["status"] == "COMPLETED"
    assert steps(run)["TRANSFER_INSTRUCTION"]["status"] == "PENDING_USER"
    r = await client.post(f"{LINE}/challenges/otp/SMS", headers=ident.headers, json=body_)
    assert (r.status_code, r.json()) == (409, {"errorCode": "STATE_INVALID"})


async def test_a_wire_transfer_to_an_active_linked_account(client, programme, admin_headers):
    """D39, v3.63.md §4.5: `destinationBeneficiary: {type: linked_accounts, id}` pays one of the
    identity's own ACTIVE linked accounts, with no Confirmation of Payee; while such a wire
    transfer has not ended the account cannot be removed (LINKED_ACCOUNT_HAS_PENDING_ACTIONS)."""
    p = await programme()
    ident, acc = await customer(client, p, funds=100_000)
    gbp_ident, gbp_acc = await customer(client, p, funds=100_000, currency="GBP")
    linked = await made(client, ident)
    waiting = await made(client, ident, accountReference={"iban": OTHER_IBAN})
    uk = await made(client, gbp_ident, accountReference=UK, country="GB")
    for account in (linked, uk):
        await verify_all(client, p, account["id"])
    wire = {
        "profileId": p.profiles["outgoingWireTransfers"],
        "sourceInstrument": {"type": "managed_accounts", "id": acc},
        "transferAmount": {"currency": "EUR", "amount": 5_000},
        "description": "To my savings",
        "destinationBeneficiary": {"type": "linked_accounts", "id": linked["id"]},
    }
    path = f"{LINE}/outgoing_wire_transfers"
    r = await client.post(path, headers=ident.headers, json=wire)
    assert r.status_code == 200, r.text
    owt = r.json()
    assert owt["state"] == "PENDING_CHALLENGE"
    assert owt["destination"] == {"type": "linked_accounts", "id": linked["id"]}
    assert "validationOutcomes" not in owt
    # 3.29.1 shows the bank details it pays.
    old = (
        await client.get(f"/multi/outgoing_wire_transfers/{owt['id']}", headers=ident.headers)
    ).json()
    assert old["destination"]["bankAccountDetails"]["iban"] == IBAN
    r = await client.post(f"{LA}/{linked['id']}/remove", headers=ident.headers)
    assert (r.status_code, r.json()) == (409, {"errorCode": "LINKED_ACCOUNT_HAS_PENDING_ACTIONS"})
    r = await client.post(f"{path}/{owt['id']}/cancel", headers=ident.headers)
    assert r.json()["state"] == "CANCELLED"
    assert (
        await client.post(f"{LA}/{linked['id']}/remove", headers=ident.headers)
    ).status_code == 204
    # Not one it can pay: unknown, not verified, removed; or in another currency.
    for target in ("999999", waiting["id"], linked["id"]):
        r = await client.post(
            path,
            headers=ident.headers,
            json={**wire, "destinationBeneficiary": {"type": "linked_accounts", "id": target}},
        )
        assert r.json() == {"errorCode": "EXTERNAL_DESTINATION_ACCOUNT_NOT_FOUND"}, target
    # A UK one is paid by Faster Payments, with no Confirmation of Payee either.
    r = await client.post(
        path,
        headers=gbp_ident.headers,
        json={
            **wire,
            "sourceInstrument": {"type": "managed_accounts", "id": gbp_acc},
            "transferAmount": {"currency": "GBP", "amount": 5_000},
            "description": "Savings",
            "destinationBeneficiary": {"type": "linked_accounts", "id": uk["id"]},
        },
    )
    assert r.status_code == 200, r.text
    assert (r.json()["type"], r.json()["state"]) == ("FASTER_PAYMENTS", "PENDING_CHALLENGE")
    r = await client.post(
        path,
        headers=gbp_ident.headers,
        json={
            **wire,
            "sourceInstrument": {"type": "managed_accounts", "id": gbp_acc},
            "destinationBeneficiary": {"type": "linked_accounts", "id": uk["id"]},
        },
    )
    assert r.json() == {"errorCode": "CURRENCY_MISMATCH"}
