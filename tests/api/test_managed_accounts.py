"""Managed accounts, black-box over HTTP (contract §2, §3 rows 47-56, §5.7, §5.8, §6, §8;
decisions D4, D5, D8, D11): create, get, update, list filters, IBAN upgrade, block and unblock,
remove (3.1.0 only), simulator deposits by id and by IBAN, and the refusals of every operation.

Most tests run on `/multi` (3.29.1) and `/3.1.0/multi`; `/3.29.1/multi` gets a smoke test. Every
scenario ends with the portal's ledger check (D5).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest
from stdnum import iban as stdnum_iban

from tests.conftest import Prog
from tests.factories import Identity, deposit, open_account, sign_up, verified

LATEST = "/multi"
LEGACY = "/3.1.0/multi"
V3291 = "/3.29.1/multi"
BASES = [LATEST, LEGACY]
SIM = "/simulate/api"
BIC = re.compile(r"^[a-zA-Z0-9]{4}[a-zA-Z]{2}[a-zA-Z0-9]{2}[a-zA-Z0-9]{0,3}$")
SEPA_IBAN = re.compile(r"^[a-zA-Z]{2}[0-9]{2}[a-zA-Z0-9]{11,30}$")
UNKNOWN_IBAN = "IE29AIBK93115212345678"  # valid check digits, never allocated here


# Helpers


def sim(p: Prog) -> dict[str, str]:
    return {"programme-key": p.api_key}


def ma_profile(ident: Identity) -> str:
    kind = "corporateManagedAccount" if ident.kind == "corporates" else "consumerManagedAccount"
    return ident.p.profiles[kind]


def create_body(ident: Identity, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "profileId": ma_profile(ident),
        "friendlyName": "Main",
        "currency": "EUR",
    }
    body.update(over)
    return body


async def advance(client: httpx.AsyncClient, p: Prog, seconds: int) -> None:
    r = await client.post(f"{SIM}/clock/advance", headers=sim(p), json={"seconds": seconds})
    assert r.status_code == 200, r.text


async def ledger_ok(client: httpx.AsyncClient, admin_headers: dict[str, str], p: Prog) -> None:
    r = await client.get(f"/portal/api/programmes/{p.id}/ledger/verify", headers=admin_headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"ok": True, "violations": []}


async def get_account(
    client: httpx.AsyncClient, ident: Identity, account_id: str, base: str = LATEST
) -> dict[str, Any]:
    r = await client.get(f"{base}/managed_accounts/{account_id}", headers=ident.headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def get_iban(
    client: httpx.AsyncClient, ident: Identity, account_id: str, base: str = LATEST
) -> dict[str, Any]:
    r = await client.get(f"{base}/managed_accounts/{account_id}/iban", headers=ident.headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def listing(
    client: httpx.AsyncClient, ident: Identity, base: str, params: list[tuple[str, Any]]
) -> dict[str, Any]:
    r = await client.get(f"{base}/managed_accounts", headers=ident.headers, params=params)
    assert r.status_code == 200, (params, r.text)
    body: dict[str, Any] = r.json()
    assert body["responseCount"] == len(body["accounts"]), body
    return body


async def listed_ids(
    client: httpx.AsyncClient, ident: Identity, base: str, params: list[tuple[str, Any]]
) -> set[str]:
    body = await listing(client, ident, base, params)
    ids = [a["id"] for a in body["accounts"]]
    assert len(ids) == len(set(ids)), body
    # Without paging, `count` (all matching) equals the page.
    assert body["count"] == len(ids), (params, body)
    return set(ids)


async def act(
    client: httpx.AsyncClient, ident: Identity, base: str, account_id: str, action: str
) -> httpx.Response:
    return await client.post(
        f"{base}/managed_accounts/{account_id}/{action}", headers=ident.headers
    )


async def portal(
    client: httpx.AsyncClient, admin_headers: dict[str, str], p: Prog, account_id: str, action: str
) -> httpx.Response:
    return await client.post(
        f"/portal/api/programmes/{p.id}/managed_accounts/{account_id}/{action}",
        headers=admin_headers,
    )


def conflict(r: httpx.Response, code: str) -> None:
    assert r.status_code == 409, r.text
    assert r.json()["errorCode"] == code, r.text


def bad_request(r: httpx.Response, field: str | None = None) -> None:
    assert r.status_code == 400, r.text
    if field is not None:
        names = [f.get("fieldName") for f in r.json()["syntaxErrors"]["invalidFields"]]
        assert field in names, r.text


async def deposit_by_iban(
    client: httpx.AsyncClient, p: Prog, iban: str, amount: int, currency: str, deprecated: bool
) -> str:
    body: dict[str, Any] = {"depositAmount": {"currency": currency, "amount": amount}}
    if deprecated:
        body["iban"] = iban
    else:
        body["destinationIbanDetails"] = {"iban": iban}
    r = await client.post(f"{SIM}/accounts/deposit", headers=sim(p), json=body)
    assert r.status_code == 200, r.text
    code: str = r.json()["code"]
    return code


# Create


@pytest.mark.parametrize("kind", ["corporates", "consumers"])
@pytest.mark.parametrize("base", BASES)
async def test_create_answers_every_field(client, programme, admin_headers, container, base, kind):
    p = await programme()
    ident = await verified(client, p, kind, base)
    before = container.clock.now_ms()
    r = await client.post(
        f"{base}/managed_accounts",
        headers=ident.headers,
        json=create_body(ident, friendlyName="Operating account", currency="GBP", tag="ops_1-A"),
    )
    after = container.clock.now_ms()
    assert r.status_code == 200, r.text
    acc = r.json()
    assert set(acc) == {
        "id",
        "profileId",
        "tag",
        "friendlyName",
        "currency",
        "balances",
        "state",
        "creationTimestamp",
    }
    assert re.fullmatch(r"[0-9]+", acc["id"]), acc
    assert acc["profileId"] == ma_profile(ident)
    assert acc["tag"] == "ops_1-A"
    assert acc["friendlyName"] == "Operating account"
    assert acc["currency"] == "GBP"
    assert acc["balances"] == {"availableBalance": 0, "actualBalance": 0}
    assert acc["state"] == {"state": "ACTIVE"}
    assert isinstance(acc["creationTimestamp"], int)
    assert before <= acc["creationTimestamp"] <= after  # epoch milliseconds

    # The same account when read back, on the other base URL too (D11).
    for b in (LATEST, LEGACY):
        assert await get_account(client, ident, acc["id"], b) == acc

    # Without a tag; a 50-character name is the longest allowed.
    name50 = "N" * 50
    plain = await open_account(client, ident, "USD", base, friendlyName=name50)
    tag50 = await open_account(client, ident, "EUR", base, tag="T" * 50)
    assert tag50["tag"] == "T" * 50
    assert "tag" not in plain or plain["tag"] is None
    assert plain["friendlyName"] == name50
    assert plain["currency"] == "USD"
    assert plain["id"] != acc["id"]
    assert await listed_ids(client, ident, base, []) == {acc["id"], plain["id"], tag50["id"]}
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize("base", BASES)
async def test_create_refuses_bad_bodies(client, programme, admin_headers, base):
    p = await programme()
    ident = await verified(client, p, "corporates", base)
    cases: list[tuple[dict[str, Any], str]] = [
        (create_body(ident, friendlyName=""), "friendlyName"),
        (create_body(ident, friendlyName="x" * 51), "friendlyName"),
        (create_body(ident, currency="eur"), "currency"),
        (create_body(ident, currency="EU"), "currency"),
        (create_body(ident, currency="EURO"), "currency"),
        (create_body(ident, currency="E1R"), "currency"),
        (create_body(ident, tag="bad tag"), "tag"),
        (create_body(ident, tag="bad!"), "tag"),
        (create_body(ident, tag="t" * 51), "tag"),
        (create_body(ident, profileId="abc"), "profileId"),
        ({"friendlyName": "Main", "currency": "EUR"}, "profileId"),
        ({"profileId": ma_profile(ident), "currency": "EUR"}, "friendlyName"),
        ({"profileId": ma_profile(ident), "friendlyName": "Main"}, "currency"),
    ]
    for body, field in cases:
        r = await client.post(f"{base}/managed_accounts", headers=ident.headers, json=body)
        bad_request(r, field)
    r = await client.post(
        f"{base}/managed_accounts",
        headers={**ident.headers, "content-type": "application/json"},
        content=b"{not json",
    )
    bad_request(r)
    assert await listed_ids(client, ident, base, []) == set()
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize("base", BASES)
async def test_create_conflicts(client, programme, admin_headers, base):
    p = await programme()
    other_p = await programme()
    corp = await verified(client, p, "corporates", base)
    cons = await verified(client, p, "consumers", base)

    async def create(ident: Identity, **over: Any) -> httpx.Response:
        return await client.post(
            f"{base}/managed_accounts", headers=ident.headers, json=create_body(ident, **over)
        )

    # A profile that is not the owner type's managed-account profile is not found.
    for ident, profile_id in [
        (corp, p.profiles["consumerManagedAccount"]),
        (corp, p.profiles["corporate"]),
        (corp, p.profiles["consumer"]),
        (corp, other_p.profiles["corporateManagedAccount"]),
        (corp, "9999999999"),
        (cons, p.profiles["corporateManagedAccount"]),
        (cons, p.profiles["consumer"]),
        (cons, other_p.profiles["consumerManagedAccount"]),
    ]:
        conflict(await create(ident, profileId=profile_id), "PROFILE_NOT_FOUND")

    conflict(await create(corp, currency="JPY"), "CURRENCY_NOT_SUPPORTED_BY_PROFILE")
    conflict(await create(cons, currency="CHF"), "CURRENCY_NOT_SUPPORTED_BY_PROFILE")

    profile_url = f"/portal/api/programmes/{p.id}/profiles/{p.profiles['corporateManagedAccount']}"
    r = await client.patch(profile_url, headers=admin_headers, json={"active": False})
    assert r.status_code == 200, r.text
    conflict(await create(corp), "PROFILE_INACTIVE")
    # The consumer profile is a profile of its own and stays active.
    assert (await create(cons)).status_code == 200
    r = await client.patch(profile_url, headers=admin_headers, json={"active": True})
    assert r.status_code == 200, r.text
    r = await create(corp)
    assert r.status_code == 200, r.text

    assert len(await listed_ids(client, corp, base, [])) == 1
    assert len(await listed_ids(client, cons, base, [])) == 1
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize("kind", ["corporates", "consumers"])
@pytest.mark.parametrize("base", BASES)
async def test_create_needs_a_verified_owner(client, programme, admin_headers, base, kind):
    p = await programme()
    ident = await sign_up(client, p, kind, base)
    r = await client.post(
        f"{base}/managed_accounts", headers=ident.headers, json=create_body(ident)
    )
    conflict(r, "OWNER_IDENTITY_NOT_VERIFIED")
    assert await listed_ids(client, ident, base, []) == set()
    r = await client.post(f"{SIM}/{kind}/{ident.id}/verify", headers=sim(p))
    assert r.status_code == 204, r.text
    r = await client.post(
        f"{base}/managed_accounts", headers=ident.headers, json=create_body(ident)
    )
    assert r.status_code == 200, r.text
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize("base", BASES)
async def test_create_idempotency_ref(client, programme, admin_headers, base):
    p = await programme()
    ident = await verified(client, p, "corporates", base)
    url = f"{base}/managed_accounts"
    headers = {**ident.headers, "idempotency-ref": "create-1"}
    body = create_body(ident, friendlyName="Once")
    first = await client.post(url, headers=headers, json=body)
    assert first.status_code == 200, first.text
    again = await client.post(url, headers=headers, json=body)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert await listed_ids(client, ident, base, []) == {first.json()["id"]}

    r = await client.post(url, headers=headers, json=create_body(ident, friendlyName="Twice"))
    assert r.status_code == 400, r.text
    assert r.json()["message"] == "Payloads do not match for the same idempotency-ref."
    assert await listed_ids(client, ident, base, []) == {first.json()["id"]}

    other = await client.post(
        url, headers={**ident.headers, "idempotency-ref": "create-2"}, json=body
    )
    assert other.status_code == 200, other.text
    assert other.json()["id"] != first.json()["id"]
    assert await listed_ids(client, ident, base, []) == {first.json()["id"], other.json()["id"]}
    await ledger_ok(client, admin_headers, p)


# Get and update


@pytest.mark.parametrize("base", BASES)
async def test_get_and_update(client, programme, admin_headers, base):
    p = await programme()
    ident = await verified(client, p, "corporates", base)
    acc = await open_account(client, ident, "EUR", base, friendlyName="Main", tag="first")
    url = f"{base}/managed_accounts/{acc['id']}"

    async def patch(body: dict[str, Any]) -> httpx.Response:
        return await client.patch(url, headers=ident.headers, json=body)

    r = await patch({"tag": "second"})
    assert r.status_code == 200, r.text
    assert r.json() == {**acc, "tag": "second"}
    r = await patch({"friendlyName": "Renamed"})
    assert r.status_code == 200, r.text
    assert r.json() == {**acc, "tag": "second", "friendlyName": "Renamed"}
    r = await patch({})
    assert r.status_code == 200, r.text
    assert r.json() == {**acc, "tag": "second", "friendlyName": "Renamed"}
    r = await patch({"friendlyName": "Both", "tag": "third"})
    assert r.status_code == 200, r.text
    expected = {**acc, "tag": "third", "friendlyName": "Both"}
    assert r.json() == expected

    for body, field in [
        ({"friendlyName": ""}, "friendlyName"),
        ({"friendlyName": "x" * 51}, "friendlyName"),
        ({"tag": "bad tag"}, "tag"),
        ({"tag": "t" * 51}, "tag"),
    ]:
        bad_request(await patch(body), field)
    assert await get_account(client, ident, acc["id"], base) == expected

    r = await client.get(f"{base}/managed_accounts/987654321", headers=ident.headers)
    assert r.status_code == 404, r.text
    r = await client.patch(
        f"{base}/managed_accounts/987654321", headers=ident.headers, json={"tag": "x"}
    )
    assert r.status_code == 404, r.text
    r = await client.get(f"{base}/managed_accounts/abc", headers=ident.headers)
    assert r.status_code in (400, 404), r.text
    await ledger_ok(client, admin_headers, p)


# List


@pytest.mark.parametrize("base", BASES)
async def test_list_filters(client, programme, admin_headers, base):
    p = await programme()
    ident = await verified(client, p, "corporates", base)
    a1 = await open_account(client, ident, "EUR", base, friendlyName="Main", tag="alpha")
    await advance(client, p, 10)
    a2 = await open_account(client, ident, "GBP", base, friendlyName="Savings", tag="beta")
    await advance(client, p, 10)
    a3 = await open_account(client, ident, "USD", base, friendlyName="Main", tag="alpha")
    await advance(client, p, 10)
    a4 = await open_account(client, ident, "EUR", base, friendlyName="Blocked", tag="gamma")
    a5 = await open_account(client, ident, "EUR", base, friendlyName="System")
    a6 = await open_account(client, ident, "EUR", base, friendlyName="Gone", tag="gamma")
    assert (await act(client, ident, base, a4["id"], "block")).status_code == 204
    assert (await portal(client, admin_headers, p, a5["id"], "block")).status_code == 204
    # Remove is a 3.1.0 operation; the account is the same on every base URL (D11).
    assert (await act(client, ident, LEGACY, a6["id"], "remove")).status_code == 204
    ids = {
        k: a["id"] for k, a in {"a1": a1, "a2": a2, "a3": a3, "a4": a4, "a5": a5, "a6": a6}.items()
    }

    def want(*names: str) -> set[str]:
        return {ids[n] for n in names}

    everything = want("a1", "a2", "a3", "a4", "a5", "a6")
    t1, t2, t3 = a1["creationTimestamp"], a2["creationTimestamp"], a3["creationTimestamp"]
    t4 = a4["creationTimestamp"]
    assert t1 + 10_000 <= t2 and t2 + 10_000 <= t3 and t3 + 10_000 <= t4

    cases: list[tuple[list[tuple[str, Any]], set[str]]] = [
        ([], everything),
        ([("state", "ACTIVE")], want("a1", "a2", "a3")),
        ([("state", "BLOCKED")], want("a4", "a5")),
        ([("state", "DESTROYED")], want("a6")),
        ([("state", "ACTIVE"), ("state", "BLOCKED")], want("a1", "a2", "a3", "a4", "a5")),
        ([("state", "BLOCKED"), ("state", "DESTROYED")], want("a4", "a5", "a6")),
        ([("state.blockedReason", "USER")], want("a4")),
        ([("state.blockedReason", "SYSTEM")], want("a5")),
        ([("state.blockedReason", "USER"), ("state.blockedReason", "SYSTEM")], want("a4", "a5")),
        ([("state.blockedReason", "LOST")], set()),
        ([("state.destroyedReason", "USER")], want("a6")),
        ([("state.destroyedReason", "SYSTEM"), ("state.destroyedReason", "LOST")], set()),
        ([("profileId", ma_profile(ident))], everything),
        ([("profileId", p.profiles["consumerManagedAccount"])], set()),
        ([("profileId", "123")], set()),
        ([("friendlyName", "Main")], want("a1", "a3")),
        ([("friendlyName", "Savings")], want("a2")),
        ([("friendlyName", "Mai")], set()),
        ([("friendlyName", "main")], set()),
        ([("friendlyName", "Ma%")], set()),
        ([("friendlyName", "Ma*")], set()),
        ([("friendlyName", "Ma_n")], set()),
        ([("tag", "alpha")], want("a1", "a3")),
        ([("tag", "gamma")], want("a4", "a6")),
        ([("tag", "alph")], set()),
        ([("tag", "ALPHA")], set()),
        ([("currency", "EUR")], want("a1", "a4", "a5", "a6")),
        ([("currency", "GBP")], want("a2")),
        ([("currency", "USD")], want("a3")),
        ([("currency", "CHF")], set()),
        ([("createdFrom", t1 + 5_000)], want("a2", "a3", "a4", "a5", "a6")),
        ([("createdTo", t2 + 5_000)], want("a1", "a2")),
        ([("createdFrom", t1 + 5_000), ("createdTo", t2 + 5_000)], want("a2")),
        ([("createdFrom", t3 + 5_000)], want("a4", "a5", "a6")),
        ([("createdTo", t1 - 5_000)], set()),
        ([("createdFrom", t2 + 5_000), ("createdTo", t2 + 6_000)], set()),
        ([("currency", "EUR"), ("state", "ACTIVE")], want("a1")),
        ([("tag", "gamma"), ("state", "DESTROYED")], want("a6")),
        ([("friendlyName", "Main"), ("currency", "USD"), ("tag", "alpha")], want("a3")),
        ([("limit", 500)], everything),
        ([("limit", 100)], everything),
        ([("offset", 0)], everything),
    ]
    for params, expected in cases:
        assert await listed_ids(client, ident, base, params) == expected, params

    # Paging: `count` is every match, `responseCount` this page; pages do not overlap.
    seen: list[str] = []
    for offset in (0, 2, 4):
        page = await listing(client, ident, base, [("offset", offset), ("limit", 2)])
        assert page["count"] == 6 and page["responseCount"] == 2, page
        seen += [a["id"] for a in page["accounts"]]
    assert len(seen) == 6 and set(seen) == everything
    page = await listing(client, ident, base, [("offset", 5), ("limit", 10)])
    assert (page["count"], page["responseCount"]) == (6, 1)
    page = await listing(client, ident, base, [("offset", 6)])
    assert (page["count"], page["responseCount"], page["accounts"]) == (6, 0, [])
    page = await listing(client, ident, base, [("state", "ACTIVE"), ("limit", 1), ("offset", 1)])
    assert (page["count"], page["responseCount"]) == (3, 1)
    assert page["accounts"][0]["id"] in want("a1", "a2", "a3")
    # Past the last match the page is empty and still counts every match.
    page = await listing(client, ident, base, [("state", "ACTIVE"), ("offset", 3)])
    assert (page["count"], page["responseCount"], page["accounts"]) == (3, 0, [])

    # Each listed account is the full ManagedAccount, the same as a GET.
    body = await listing(client, ident, base, [])
    for account in body["accounts"]:
        assert account == await get_account(client, ident, account["id"], base)
    by_id = {a["id"]: a for a in body["accounts"]}
    assert by_id[ids["a4"]]["state"] == {"state": "BLOCKED", "blockedReason": "USER"}
    assert by_id[ids["a5"]]["state"] == {"state": "BLOCKED", "blockedReason": "SYSTEM"}
    assert by_id[ids["a6"]]["state"] == {"state": "DESTROYED", "destroyedReason": "USER"}

    for params in [
        [("state", "FOO")],
        [("state", "ACTIVE"), ("state", "active")],
        [("state.blockedReason", "FOO")],
        [("state.destroyedReason", "FOO")],
        [("limit", 0)],
        [("limit", -1)],
        [("limit", "ten")],
        [("offset", -1)],
        [("offset", "x")],
        [("currency", "eur")],
        [("currency", "EURO")],
        [("currency", "EU")],
        [("createdFrom", "yesterday")],
        [("createdTo", "1.5")],
        [("createdFrom", -1)],
        [("createdFrom", 2**63)],
        [("createdTo", 10**20)],
        [("profileId", "abc")],
        [("friendlyName", "")],
        [("friendlyName", "x" * 51)],
        [("tag", "bad tag")],
    ]:
        r = await client.get(f"{base}/managed_accounts", headers=ident.headers, params=params)
        assert r.status_code == 400, (params, r.text)
    await ledger_ok(client, admin_headers, p)


async def test_list_caps_pages_at_100(client, programme, admin_headers):
    p = await programme()
    ident = await verified(client, p, "corporates", LATEST)
    made: set[str] = set()
    for size in [11] + [10] * 9:  # in batches: requests overlap where the database allows it
        batch = [open_account(client, ident, "EUR", LATEST) for _ in range(size)]
        made |= {a["id"] for a in await asyncio.gather(*batch)}
    assert len(made) == 101
    for params in ([], [("limit", 500)], [("limit", 101)], [("limit", 100)]):
        page = await listing(client, ident, LATEST, params)
        assert (page["count"], page["responseCount"]) == (101, 100), params
    rest = await listing(client, ident, LEGACY, [("offset", 100), ("limit", 500)])
    assert (rest["count"], rest["responseCount"]) == (101, 1)
    first = await listing(client, ident, LEGACY, [("limit", 500)])
    assert {a["id"] for a in first["accounts"]} | {rest["accounts"][0]["id"]} == made
    await ledger_ok(client, admin_headers, p)


# IBAN


def check_bank_details(body: dict[str, Any], currency: str) -> str:
    """The ALLOCATED answer's bank details are valid; returns the IBAN."""
    assert body["state"] == "ALLOCATED", body
    details = body["bankAccountDetails"]
    assert details, body
    ibans: set[str] = set()
    fps = []
    for entry in details:
        for field in ("beneficiaryNameAndSurname", "beneficiaryBank", "beneficiaryBankAddress"):
            assert isinstance(entry[field], str) and entry[field], entry
        d = entry["details"]
        if "iban" in d:
            assert stdnum_iban.is_valid(d["iban"]), d
            bic = d.get("bankIdentifierCode", d.get("code"))
            assert bic is not None and BIC.fullmatch(bic), d
            if "bankIdentifierCode" in d:
                assert SEPA_IBAN.fullmatch(d["iban"]) and 15 <= len(d["iban"]) <= 34, d
            ibans.add(d["iban"])
        else:
            assert re.fullmatch(r"[0-9]{6}", d["sortCode"]), d
            assert re.fullmatch(r"[0-9]{8}", d["accountNumber"]), d
            fps.append(d)
    assert len(ibans) == 1, body  # one account, one IBAN
    if currency == "GBP":
        assert len(fps) == 1, body
    if currency == "EUR":
        assert any("bankIdentifierCode" in e["details"] for e in details), body
    return ibans.pop()


@pytest.mark.parametrize("base", BASES)
async def test_iban_upgrade_after_the_allocation_delay(client, programme, admin_headers, base):
    p = await programme(ibanAllocationDelaySeconds=5)
    ident = await verified(client, p, "corporates", base)
    acc = await open_account(client, ident, "EUR", base)
    url = f"{base}/managed_accounts/{acc['id']}/iban"

    assert await get_iban(client, ident, acc["id"], base) == {
        "state": "UNALLOCATED",
        "bankAccountDetails": [],
    }
    r = await client.post(url, headers=ident.headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"state": "PENDING_ALLOCATION", "bankAccountDetails": []}
    assert await get_iban(client, ident, acc["id"], base) == r.json()
    conflict(await client.post(url, headers=ident.headers), "IBAN_ALREADY_REQUESTED")
    await advance(client, p, 6)
    body = await get_iban(client, ident, acc["id"], base)
    iban = check_bank_details(body, "EUR")
    assert iban.startswith("IE")
    assert await get_iban(client, ident, acc["id"], LEGACY if base == LATEST else LATEST) == body
    conflict(await client.post(url, headers=ident.headers), "INSTRUMENT_ALREADY_UPGRADED_TO_IBAN")
    # The upgrade changes neither the account's state nor its balances.
    assert await get_account(client, ident, acc["id"], base) == acc

    # Money sent to the IBAN lands on the account.
    assert await deposit_by_iban(client, p, iban, 2500, "EUR", deprecated=False) == "COMPLETED"
    got = await get_account(client, ident, acc["id"], base)
    assert got["balances"] == {"availableBalance": 2500, "actualBalance": 2500}
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize("base", BASES)
async def test_iban_allocation_by_simulator_and_per_currency(
    client, programme, admin_headers, base
):
    p = await programme(ibanAllocationDelaySeconds=600)
    ident = await verified(client, p, "corporates", base)
    allocated: dict[str, str] = {}
    for currency in ("GBP", "USD", "EUR"):
        acc = await open_account(client, ident, currency, base)
        r = await client.post(f"{base}/managed_accounts/{acc['id']}/iban", headers=ident.headers)
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "PENDING_ALLOCATION"
        r = await client.post(f"{SIM}/managed_accounts/{acc['id']}/iban/allocate", headers=sim(p))
        assert r.status_code == 204, r.text
        allocated[acc["id"]] = check_bank_details(
            await get_iban(client, ident, acc["id"], base), currency
        )
        # Nothing left to allocate.
        r = await client.post(f"{SIM}/managed_accounts/{acc['id']}/iban/allocate", headers=sim(p))
        assert r.status_code == 409, r.text
    assert len(set(allocated.values())) == 3

    # A second identity and another programme get IBANs of their own.
    other = await verified(client, p, "consumers", base)
    other_acc = await open_account(client, other, "EUR", base)
    p2 = await programme(ibanAllocationDelaySeconds=0)
    ident2 = await verified(client, p2, "corporates", base)
    acc2 = await open_account(client, ident2, "EUR", base)
    for who, prog, acc_id in ((other, p, other_acc["id"]), (ident2, p2, acc2["id"])):
        r = await client.post(f"{base}/managed_accounts/{acc_id}/iban", headers=who.headers)
        assert r.status_code == 200, r.text
        if prog is p:
            r = await client.post(f"{SIM}/managed_accounts/{acc_id}/iban/allocate", headers=sim(p))
            assert r.status_code == 204, r.text
        allocated[acc_id] = check_bank_details(await get_iban(client, who, acc_id, base), "EUR")
    assert len(set(allocated.values())) == len(allocated) == 5

    r = await client.post(f"{SIM}/managed_accounts/987654321/iban/allocate", headers=sim(p))
    assert r.status_code == 404, r.text
    # Another programme's account is not this programme's to allocate.
    r = await client.post(
        f"{SIM}/managed_accounts/{other_acc['id']}/iban/allocate", headers=sim(p2)
    )
    assert r.status_code == 404, r.text
    await ledger_ok(client, admin_headers, p)
    await ledger_ok(client, admin_headers, p2)


@pytest.mark.parametrize("base", BASES)
async def test_iban_upgrade_conflicts(client, programme, admin_headers, base):
    p = await programme(ibanAllocationDelaySeconds=0)
    ident = await verified(client, p, "corporates", base)

    # A currency without an IBAN scheme.
    profile_url = f"/portal/api/programmes/{p.id}/profiles/{p.profiles['corporateManagedAccount']}"
    r = await client.patch(
        profile_url, headers=admin_headers, json={"currencies": ["EUR", "GBP", "USD", "CHF"]}
    )
    assert r.status_code == 200, r.text
    chf = await open_account(client, ident, "CHF", base)
    r = await client.post(f"{base}/managed_accounts/{chf['id']}/iban", headers=ident.headers)
    conflict(r, "IBAN_NOT_SUPPORTED")
    assert (await get_iban(client, ident, chf["id"], base))["state"] == "UNALLOCATED"

    # Blocked: not active; after unblock the upgrade works.
    blk = await open_account(client, ident, "EUR", base)
    assert (await act(client, ident, base, blk["id"], "block")).status_code == 204
    conflict(await act(client, ident, base, blk["id"], "iban"), "INSTRUMENT_IS_NOT_ACTIVE")
    assert (await portal(client, admin_headers, p, blk["id"], "unblock")).status_code == 204
    assert (await portal(client, admin_headers, p, blk["id"], "block")).status_code == 204
    conflict(await act(client, ident, base, blk["id"], "iban"), "INSTRUMENT_IS_NOT_ACTIVE")
    assert (await get_iban(client, ident, blk["id"], base))["state"] == "UNALLOCATED"
    assert (await portal(client, admin_headers, p, blk["id"], "unblock")).status_code == 204
    r = await act(client, ident, base, blk["id"], "iban")
    assert r.status_code == 200, r.text
    check_bank_details(r.json(), "EUR")

    # Removed (through 3.1.0): not active either.
    gone = await open_account(client, ident, "GBP", base)
    assert (await act(client, ident, LEGACY, gone["id"], "remove")).status_code == 204
    conflict(await act(client, ident, base, gone["id"], "iban"), "INSTRUMENT_IS_NOT_ACTIVE")
    assert (await get_iban(client, ident, gone["id"], base))["state"] == "UNALLOCATED"
    await ledger_ok(client, admin_headers, p)


# Block and unblock


@pytest.mark.parametrize("base", BASES)
async def test_block_and_unblock(client, programme, admin_headers, base):
    p = await programme()
    ident = await verified(client, p, "consumers", base)
    acc = await open_account(client, ident, "EUR", base)
    assert await deposit(client, p, acc["id"], 700) == "COMPLETED"
    funded = {"availableBalance": 700, "actualBalance": 700}

    async def state() -> dict[str, Any]:
        got = await get_account(client, ident, acc["id"], base)
        assert got["balances"] == funded
        result: dict[str, Any] = got["state"]
        return result

    r = await act(client, ident, base, acc["id"], "block")
    assert r.status_code == 204 and r.content == b"", r.text
    assert await state() == {"state": "BLOCKED", "blockedReason": "USER"}
    conflict(await act(client, ident, base, acc["id"], "block"), "INSTRUMENT_ALREADY_BLOCKED")
    assert await deposit(client, p, acc["id"], 100) == "DENIED_ACCOUNT_INACTIVE"
    r = await act(client, ident, base, acc["id"], "unblock")
    assert r.status_code == 204 and r.content == b"", r.text
    assert await state() == {"state": "ACTIVE"}
    conflict(await act(client, ident, base, acc["id"], "unblock"), "INSTRUMENT_NOT_BLOCKED")

    # A SYSTEM block (the operator's) cannot be lifted by the user.
    assert (await portal(client, admin_headers, p, acc["id"], "block")).status_code == 204
    assert await state() == {"state": "BLOCKED", "blockedReason": "SYSTEM"}
    conflict(await act(client, ident, base, acc["id"], "unblock"), "INSTRUMENT_INACTIVE")
    conflict(await act(client, ident, base, acc["id"], "block"), "INSTRUMENT_ALREADY_BLOCKED")
    assert await state() == {"state": "BLOCKED", "blockedReason": "SYSTEM"}
    conflict(
        await portal(client, admin_headers, p, acc["id"], "block"), "INSTRUMENT_ALREADY_BLOCKED"
    )
    assert (await portal(client, admin_headers, p, acc["id"], "unblock")).status_code == 204
    assert await state() == {"state": "ACTIVE"}
    conflict(await portal(client, admin_headers, p, acc["id"], "unblock"), "INSTRUMENT_NOT_BLOCKED")

    # The operator can lift a user's block too.
    assert (await act(client, ident, base, acc["id"], "block")).status_code == 204
    assert (await portal(client, admin_headers, p, acc["id"], "unblock")).status_code == 204
    assert await state() == {"state": "ACTIVE"}

    # The portal finds accounts of its own programme only.
    other_p = await programme()
    r = await portal(client, admin_headers, other_p, acc["id"], "block")
    assert r.status_code == 404, r.text
    assert (await portal(client, admin_headers, p, "987654321", "block")).status_code == 404
    assert await state() == {"state": "ACTIVE"}
    assert await deposit(client, p, acc["id"], 100) == "COMPLETED"
    funded = {"availableBalance": 800, "actualBalance": 800}
    assert await state() == {"state": "ACTIVE"}
    await ledger_ok(client, admin_headers, p)


# Remove (3.1.0 only) and data shared across versions


async def test_remove_on_310(client, programme, admin_headers):
    p = await programme(ibanAllocationDelaySeconds=0)
    ident = await verified(client, p, "corporates", LATEST)

    # Created on /multi, read, blocked and removed on /3.1.0/multi (D11).
    acc = await open_account(client, ident, "EUR", LATEST, tag="shared")
    assert await get_account(client, ident, acc["id"], LEGACY) == acc
    assert (await act(client, ident, LEGACY, acc["id"], "block")).status_code == 204
    got = await get_account(client, ident, acc["id"], LATEST)
    assert got["state"] == {"state": "BLOCKED", "blockedReason": "USER"}
    r = await act(client, ident, LEGACY, acc["id"], "remove")
    assert r.status_code == 204 and r.content == b"", r.text
    for b in (LATEST, LEGACY, V3291):
        got = await get_account(client, ident, acc["id"], b)
        assert got == {**acc, "state": {"state": "DESTROYED", "destroyedReason": "USER"}}
    conflict(await act(client, ident, LEGACY, acc["id"], "remove"), "INSTRUMENT_ALREADY_REMOVED")
    for b in (LATEST, LEGACY):
        for action in ("block", "unblock"):
            conflict(await act(client, ident, b, acc["id"], action), "INSTRUMENT_DESTROYED")
        conflict(await act(client, ident, b, acc["id"], "iban"), "INSTRUMENT_IS_NOT_ACTIVE")
    for action in ("block", "unblock"):
        conflict(await portal(client, admin_headers, p, acc["id"], action), "INSTRUMENT_DESTROYED")
    assert await deposit(client, p, acc["id"], 100) == "DENIED_ACCOUNT_INACTIVE"
    got = await get_account(client, ident, acc["id"], LEGACY)
    assert got == {**acc, "state": {"state": "DESTROYED", "destroyedReason": "USER"}}

    # Funds must be gone first.
    funded = await open_account(client, ident, "EUR", LEGACY)
    assert await deposit(client, p, funded["id"], 1000) == "COMPLETED"
    conflict(await act(client, ident, LEGACY, funded["id"], "remove"), "BALANCE_NOT_ZERO")
    got = await get_account(client, ident, funded["id"], LEGACY)
    assert got["state"] == {"state": "ACTIVE"}
    assert got["balances"] == {"availableBalance": 1000, "actualBalance": 1000}

    # An active, empty account (with an IBAN) can be removed; its IBAN takes no more money.
    empty = await open_account(client, ident, "EUR", LEGACY)
    r = await act(client, ident, LEGACY, empty["id"], "iban")
    assert r.status_code == 200, r.text
    iban = check_bank_details(r.json(), "EUR")
    assert (await act(client, ident, LEGACY, empty["id"], "remove")).status_code == 204
    got = await get_account(client, ident, empty["id"], LATEST)
    assert got["state"] == {"state": "DESTROYED", "destroyedReason": "USER"}
    assert await deposit_by_iban(client, p, iban, 100, "EUR", False) == "DENIED_ACCOUNT_INACTIVE"
    got = await get_account(client, ident, empty["id"], LATEST)
    assert got["balances"] == {"availableBalance": 0, "actualBalance": 0}

    # 3.29.1 has no remove operation.
    keep = await open_account(client, ident, "EUR", LATEST)
    for b in (LATEST, V3291):
        r = await act(client, ident, b, keep["id"], "remove")
        assert r.status_code == 404, r.text
    assert (await get_account(client, ident, keep["id"], LEGACY))["state"] == {"state": "ACTIVE"}
    r = await act(client, ident, LEGACY, "987654321", "remove")
    assert r.status_code == 404, r.text
    await ledger_ok(client, admin_headers, p)


async def test_smoke_v3291(client, programme, admin_headers):
    p = await programme(ibanAllocationDelaySeconds=0)
    ident = await verified(client, p, "corporates", V3291)
    acc = await open_account(client, ident, "GBP", V3291, tag="smoke")
    assert acc["state"] == {"state": "ACTIVE"}
    assert await get_account(client, ident, acc["id"], V3291) == acc
    assert await get_account(client, ident, acc["id"], LATEST) == acc
    assert await listed_ids(client, ident, V3291, [("tag", "smoke")]) == {acc["id"]}
    r = await client.patch(
        f"{V3291}/managed_accounts/{acc['id']}", headers=ident.headers, json={"tag": "smoked"}
    )
    assert r.status_code == 200 and r.json()["tag"] == "smoked", r.text
    assert (await get_iban(client, ident, acc["id"], V3291))["state"] == "UNALLOCATED"
    r = await act(client, ident, V3291, acc["id"], "iban")
    assert r.status_code == 200, r.text
    check_bank_details(r.json(), "GBP")
    assert (await act(client, ident, V3291, acc["id"], "block")).status_code == 204
    conflict(await act(client, ident, V3291, acc["id"], "block"), "INSTRUMENT_ALREADY_BLOCKED")
    assert (await act(client, ident, V3291, acc["id"], "unblock")).status_code == 204
    assert (await act(client, ident, V3291, acc["id"], "remove")).status_code == 404
    await ledger_ok(client, admin_headers, p)


# Simulator deposits


async def test_deposit_by_account_id_codes(client, programme, admin_headers):
    p = await programme()
    other_p = await programme()
    ident = await verified(client, p, "corporates", LATEST)
    acc = await open_account(client, ident, "EUR", LATEST)
    stranger = await verified(client, other_p, "corporates", LATEST)
    foreign = await open_account(client, stranger, "EUR", LATEST)

    async def balances(who: Identity = ident, acc_id: str = acc["id"]) -> dict[str, int]:
        got: dict[str, int] = (await get_account(client, who, acc_id))["balances"]
        return got

    assert await deposit(client, p, acc["id"], 1000) == "COMPLETED"
    assert await balances() == {"availableBalance": 1000, "actualBalance": 1000}
    assert await deposit(client, p, acc["id"], 1) == "COMPLETED"
    assert await balances() == {"availableBalance": 1001, "actualBalance": 1001}

    assert await deposit(client, p, "987654321", 100) == "DENIED_ACCOUNT_NOT_FOUND"
    assert await deposit(client, p, foreign["id"], 100) == "DENIED_ACCOUNT_NOT_FOUND"
    assert await deposit(client, p, acc["id"], 0) == "DENIED_AMOUNT_NOT_POSITIVE"
    assert await deposit(client, p, acc["id"], -5) == "DENIED_AMOUNT_NOT_POSITIVE"
    r = await client.post(
        f"{SIM}/accounts/{acc['id']}/deposit",
        headers=sim(p),
        json={"depositAmount": {"currency": "EUR"}},
    )
    assert r.status_code == 200 and r.json() == {"code": "DENIED_AMOUNT_NOT_POSITIVE"}, r.text
    assert await deposit(client, p, acc["id"], 100, "GBP") == "DENIED_CURRENCY_NOT_ACCOUNT_CURRENCY"
    assert (await act(client, ident, LATEST, acc["id"], "block")).status_code == 204
    assert await deposit(client, p, acc["id"], 100) == "DENIED_ACCOUNT_INACTIVE"
    assert (await act(client, ident, LATEST, acc["id"], "unblock")).status_code == 204
    assert await balances() == {"availableBalance": 1001, "actualBalance": 1001}
    assert await balances(stranger, foreign["id"]) == {"availableBalance": 0, "actualBalance": 0}

    # Malformed requests are refused before any code.
    for body in (
        {"depositAmount": {"currency": "eur", "amount": 5}},
        {"depositAmount": {"amount": 5}},
        {},
    ):
        r = await client.post(f"{SIM}/accounts/{acc['id']}/deposit", headers=sim(p), json=body)
        assert r.status_code == 400, (body, r.text)
    body = {"depositAmount": {"currency": "EUR", "amount": 5}}
    r = await client.post(f"{SIM}/accounts/{acc['id']}/deposit", json=body)
    assert r.status_code == 400, r.text
    r = await client.post(
        f"{SIM}/accounts/{acc['id']}/deposit", headers={"programme-key": "nope"}, json=body
    )
    assert r.status_code == 401, r.text
    assert await balances() == {"availableBalance": 1001, "actualBalance": 1001}
    await ledger_ok(client, admin_headers, p)
    await ledger_ok(client, admin_headers, other_p)


async def test_a_deposit_is_capped_at_the_scheme_limit(client, programme, admin_headers):
    """Issue 32 §2.9, D11b: one deposit of 2^63-1 used to complete, after which every deposit
    of the programme in that currency answered DENIED_OTHER (its settlement account could
    give no more). Over the scheme limit a deposit answers DENIED_OTHER and nothing moves."""
    p = await programme()
    ident = await verified(client, p, "consumers", LATEST)
    eur = await open_account(client, ident, "EUR", LATEST, iban=True)
    second = await open_account(client, ident, "EUR", LATEST, iban=True)
    gbp = await open_account(client, ident, "GBP", LATEST, iban=True)
    usd = await open_account(client, ident, "USD", LATEST, iban=True)
    sepa, fps = 99_999_999_999, 100_000_000  # 999,999,999.99 EUR; 1,000,000.00 GBP

    async def deposit_by_id(
        account: dict[str, Any], currency: str, amount: int, **more: Any
    ) -> str:
        r = await client.post(
            f"{SIM}/accounts/{account['id']}/deposit",
            headers=sim(p),
            json={"depositAmount": {"currency": currency, "amount": amount}, **more},
        )
        assert r.status_code == 200, r.text
        code: str = r.json()["code"]
        return code

    for account, currency, limit in ((eur, "EUR", sepa), (gbp, "GBP", fps), (usd, "USD", sepa)):
        for too_much in (2**63 - 1, limit + 1):
            assert await deposit_by_id(account, currency, too_much, txId=77) == "DENIED_OTHER"
        got = await get_account(client, ident, account["id"])
        assert got["balances"] == {"availableBalance": 0, "actualBalance": 0}, currency
    # By IBAN likewise.
    iban = (await get_iban(client, ident, eur["id"]))["bankAccountDetails"][0]["details"]["iban"]
    r = await client.post(
        f"{SIM}/accounts/deposit",
        headers=sim(p),
        json={
            "depositAmount": {"currency": "EUR", "amount": sepa + 1},
            "destinationIbanDetails": {"iban": iban},
        },
    )
    assert r.json() == {"code": "DENIED_OTHER"}, r.text
    # Nothing was written: the refused txId is still free, and the limit itself arrives, as
    # does every later deposit of the programme in the currency.
    assert await deposit_by_id(eur, "EUR", sepa, txId=77) == "COMPLETED"
    assert await deposit_by_id(gbp, "GBP", fps) == "COMPLETED"
    assert await deposit_by_id(usd, "USD", sepa) == "COMPLETED"
    assert await deposit(client, p, eur["id"], 1) == "COMPLETED"
    assert await deposit(client, p, second["id"], 1) == "COMPLETED"
    got = await get_account(client, ident, eur["id"])
    assert got["balances"] == {"availableBalance": sepa + 1, "actualBalance": sepa + 1}
    await ledger_ok(client, admin_headers, p)


async def test_a_deposits_text_is_bounded(client, programme, admin_headers):
    """Issue 32 §2.9: a 1 MB `senderName` was stored. A deposit's names and references are
    bounded as the interface bounds a payment party's name (200), 400 beyond, nothing moved."""
    p = await programme()
    ident = await verified(client, p, "consumers", LATEST)
    acc = await open_account(client, ident, "EUR", LATEST, iban=True)
    iban = (await get_iban(client, ident, acc["id"]))["bankAccountDetails"][0]["details"]["iban"]
    amount = {"currency": "EUR", "amount": 100}
    by_id = f"{SIM}/accounts/{acc['id']}/deposit"
    by_iban = f"{SIM}/accounts/deposit"
    iban_body = {"destinationIbanDetails": {"iban": iban}}
    cases = [
        (by_id, {}, "senderName"),
        (by_id, {}, "reference"),
        (by_id, {}, "receiverName"),
        (by_iban, iban_body, "senderName"),
        (by_iban, iban_body, "reference"),
        (by_iban, iban_body, "receiverName"),
        (by_iban, iban_body, "paymentReference"),
    ]
    for url, extra, field in cases:
        for text in ("x" * 1_000_000, "é" * 201):
            body = {"depositAmount": amount, **extra, field: text}
            r = await client.post(url, headers=sim(p), json=body)
            assert r.status_code == 400, (field, r.text[:300])
            assert r.json()["syntaxErrors"]["invalidFields"] == [
                {"fieldName": field, "error": "SIZE", "params": ["0", "200"]}
            ]
    for bad in ("x" * 51, "GB33 BUKB"):
        body = {"depositAmount": amount, "senderIban": bad}
        r = await client.post(by_id, headers=sim(p), json=body)
        assert r.status_code == 400, r.text
        assert r.json()["syntaxErrors"]["invalidFields"][0]["fieldName"] == "senderIban"
    got = await get_account(client, ident, acc["id"])
    assert got["balances"] == {"availableBalance": 0, "actualBalance": 0}
    # At the bound: taken, and kept whole.
    name = "Ädä " + "x" * 196
    body = {"depositAmount": amount, "senderName": name, "reference": "r" * 200}
    r = await client.post(by_id, headers=sim(p), json={**body, "senderIban": "GB33BUKB2020"})
    assert r.json() == {"code": "COMPLETED"}, r.text
    r = await client.post(by_iban, headers=sim(p), json={**body, **iban_body})
    assert r.json() == {"code": "COMPLETED"}, r.text
    r = await client.get(f"{LATEST}/managed_accounts/{acc['id']}/statement", headers=ident.headers)
    deposits = [e for e in r.json()["entry"] if e["transactionId"]["type"] == "DEPOSIT"]
    assert [e["additionalFields"]["sender"] for e in deposits] == [name, name]
    await ledger_ok(client, admin_headers, p)


async def test_deposit_beyond_int64_is_refused(client, programme, admin_headers, monkeypatch):
    """At the int64 edge of a balance (≈ 92 million deposits at the scheme limit, reached here
    by lifting the limit) a deposit answers DENIED_OTHER, never a 500: the account cannot hold
    more, nor can the programme's settlement account in that currency give more."""
    from multibank.accounts import service as accounts_service

    p = await programme()
    ident = await verified(client, p, "consumers", LATEST)
    acc = await open_account(client, ident, "EUR", LATEST, iban=True)
    second = await open_account(client, ident, "EUR", LATEST, iban=True)
    gbp = await open_account(client, ident, "GBP", LATEST, iban=True)
    top = 2**63 - 1
    monkeypatch.setattr(accounts_service, "payment_limit", lambda currency: top)
    r = await client.post(
        f"{SIM}/accounts/{acc['id']}/deposit",
        headers=sim(p),
        json={"depositAmount": {"currency": "EUR", "amount": top + 1}},
    )
    assert r.json() == {"code": "DENIED_OTHER"}, r.text
    assert await deposit(client, p, acc["id"], top - 10) == "COMPLETED"
    assert await deposit(client, p, acc["id"], 11) == "DENIED_OTHER"
    assert await deposit(client, p, second["id"], 11) == "DENIED_OTHER"
    assert await deposit(client, p, acc["id"], 10) == "COMPLETED"
    assert await deposit(client, p, second["id"], 1) == "DENIED_OTHER"
    # Other currencies are unaffected.
    assert await deposit(client, p, gbp["id"], 5, "GBP") == "COMPLETED"
    got = await get_account(client, ident, acc["id"])
    assert got["balances"] == {"availableBalance": top, "actualBalance": top}
    got = await get_account(client, ident, second["id"])
    assert got["balances"] == {"availableBalance": 0, "actualBalance": 0}
    await ledger_ok(client, admin_headers, p)


async def test_deposit_by_iban_codes(client, programme, admin_headers):
    p = await programme(ibanAllocationDelaySeconds=0)
    other_p = await programme(ibanAllocationDelaySeconds=0)
    ident = await verified(client, p, "consumers", LATEST)
    eur = await open_account(client, ident, "EUR", LATEST)
    gbp = await open_account(client, ident, "GBP", LATEST)
    ibans = {}
    for acc, currency in ((eur, "EUR"), (gbp, "GBP")):
        r = await act(client, ident, LATEST, acc["id"], "iban")
        assert r.status_code == 200, r.text
        ibans[currency] = check_bank_details(r.json(), currency)
    stranger = await verified(client, other_p, "corporates", LATEST)
    foreign = await open_account(client, stranger, "EUR", LATEST)
    r = await act(client, stranger, LATEST, foreign["id"], "iban")
    foreign_iban = check_bank_details(r.json(), "EUR")

    async def balances(acc_id: str) -> dict[str, int]:
        got: dict[str, int] = (await get_account(client, ident, acc_id))["balances"]
        return got

    assert await deposit_by_iban(client, p, ibans["EUR"], 300, "EUR", False) == "COMPLETED"
    assert await deposit_by_iban(client, p, ibans["GBP"], 400, "GBP", True) == "COMPLETED"
    assert await balances(eur["id"]) == {"availableBalance": 300, "actualBalance": 300}
    assert await balances(gbp["id"]) == {"availableBalance": 400, "actualBalance": 400}

    for iban, amount, currency, deprecated, code in [
        (UNKNOWN_IBAN, 100, "EUR", False, "DENIED_ACCOUNT_NOT_FOUND"),
        (UNKNOWN_IBAN, 100, "EUR", True, "DENIED_ACCOUNT_NOT_FOUND"),
        (foreign_iban, 100, "EUR", False, "DENIED_ACCOUNT_NOT_FOUND"),
        (foreign_iban, 100, "EUR", True, "DENIED_ACCOUNT_NOT_FOUND"),
        (ibans["EUR"], 0, "EUR", False, "DENIED_AMOUNT_NOT_POSITIVE"),
        (ibans["EUR"], -1, "EUR", False, "DENIED_AMOUNT_NOT_POSITIVE"),
        (ibans["EUR"], 100, "GBP", False, "DENIED_CURRENCY_NOT_ACCOUNT_CURRENCY"),
    ]:
        got = await deposit_by_iban(client, p, iban, amount, currency, deprecated)
        assert got == code, (iban, amount, currency, deprecated)
    r = await client.post(
        f"{SIM}/accounts/deposit",
        headers=sim(p),
        json={"depositAmount": {"currency": "EUR", "amount": 100}},
    )
    assert r.status_code == 200 and r.json() == {"code": "DENIED_ACCOUNT_NOT_FOUND"}, r.text
    assert (await act(client, ident, LATEST, eur["id"], "block")).status_code == 204
    got = await deposit_by_iban(client, p, ibans["EUR"], 100, "EUR", False)
    assert got == "DENIED_ACCOUNT_INACTIVE"
    assert await balances(eur["id"]) == {"availableBalance": 300, "actualBalance": 300}
    assert await balances(gbp["id"]) == {"availableBalance": 400, "actualBalance": 400}
    got_foreign = (await get_account(client, stranger, foreign["id"]))["balances"]
    assert got_foreign == {"availableBalance": 0, "actualBalance": 0}
    await ledger_ok(client, admin_headers, p)
    await ledger_ok(client, admin_headers, other_p)


# Refusals


def operations(base: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every managed-account operation of `base` that names an account: method, suffix, body."""
    ops: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", "", None),
        ("PATCH", "", {"friendlyName": "Hijacked", "tag": "hijacked"}),
        ("GET", "/iban", None),
        ("POST", "/iban", None),
        ("POST", "/block", None),
        ("POST", "/unblock", None),
    ]
    if base == LEGACY:
        ops.append(("POST", "/remove", None))
    return ops


@pytest.mark.parametrize("base", BASES)
async def test_refusals_of_every_operation(client, programme, admin_headers, base):
    p = await programme(ibanAllocationDelaySeconds=0)
    other_p = await programme()
    owner = await verified(client, p, "corporates", base)
    intruder = await verified(client, p, "corporates", base)
    outsider = await verified(client, other_p, "corporates", base)
    acc = await open_account(client, owner, "EUR", base, friendlyName="Mine", tag="mine")
    blocked = await open_account(client, owner, "EUR", base, friendlyName="Held")
    assert await deposit(client, p, acc["id"], 1000) == "COMPLETED"
    assert (await act(client, owner, base, blocked["id"], "block")).status_code == 204
    acc = await get_account(client, owner, acc["id"], base)
    blocked = await get_account(client, owner, blocked["id"], base)
    mine = await open_account(client, intruder, "EUR", base)

    every: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", "/managed_accounts", None),
        ("POST", "/managed_accounts", create_body(owner)),
    ] + [(m, f"/managed_accounts/{acc['id']}{s}", b) for m, s, b in operations(base)]
    token = owner.headers["Authorization"]
    refusals = [
        ({}, 400),
        ({"Authorization": token}, 400),
        ({"api-key": "", "Authorization": token}, 400),
        ({"api-key": "not-a-key", "Authorization": token}, 401),
        ({"api-key": p.api_key}, 401),
        ({"api-key": p.api_key, "Authorization": "Bearer "}, 401),
        ({"api-key": p.api_key, "Authorization": "Bearer garbage.token.here"}, 401),
        ({"api-key": p.api_key, "Authorization": "Basic dXNlcjpwYXNz"}, 401),
        ({"api-key": other_p.api_key, "Authorization": token}, 403),
    ]
    wrong: list[str] = []
    for method, path, body in every:
        for headers, status in refusals:
            r = await client.request(method, f"{base}{path}", headers=headers, json=body)
            if r.status_code != status:
                wrong.append(f"{method} {path} {sorted(headers)}: {r.status_code} != {status}")
    assert not wrong, "\n".join(wrong)

    # Another identity's account: 404 for every operation (in this programme or another one).
    for who in (intruder, outsider):
        for method, suffix, body in operations(base):
            for target in (acc, blocked):
                path = f"{base}/managed_accounts/{target['id']}{suffix}"
                r = await client.request(method, path, headers=who.headers, json=body)
                if r.status_code != 404:
                    wrong.append(f"{who.email} {method} {path}: {r.status_code} != 404")
                elif r.headers.get("content-type", "").startswith("application/json"):
                    assert set(r.json()) <= {"code", "message"}, r.text
        assert acc["id"] not in await listed_ids(client, who, base, [])
    assert not wrong, "\n".join(wrong)
    assert await get_account(client, owner, acc["id"], base) == acc
    assert await get_account(client, owner, blocked["id"], base) == blocked
    assert acc["state"] == {"state": "ACTIVE"}
    assert acc["balances"] == {"availableBalance": 1000, "actualBalance": 1000}
    assert blocked["state"] == {"state": "BLOCKED", "blockedReason": "USER"}
    # The funded account got its IBAN before its deposit; the blocked one never had one.
    assert (await get_iban(client, owner, acc["id"], base))["state"] == "ALLOCATED"
    iban = await get_iban(client, owner, blocked["id"], base)
    assert iban == {"state": "UNALLOCATED", "bankAccountDetails": []}
    assert await listed_ids(client, owner, base, []) == {acc["id"], blocked["id"]}
    assert await listed_ids(client, intruder, base, []) == {mine["id"]}

    # An empty id segment (`/managed_accounts//block`) answers 405 with an Error body, as the
    # reference sandbox was seen to (contract section 2); never a 500 or an account.
    for method, suffix, body in operations(base):
        if not suffix:
            continue
        r = await client.request(
            method, f"{base}/managed_accounts/{suffix}", headers=owner.headers, json=body
        )
        assert r.status_code == 405, (method, suffix, r.status_code, r.text)
        assert r.json()["code"] == "METHOD_NOT_ALLOWED", r.text
    assert await get_account(client, owner, acc["id"], base) == acc
    assert await get_account(client, owner, blocked["id"], base) == blocked
    await ledger_ok(client, admin_headers, p)
    await ledger_ok(client, admin_headers, other_p)
