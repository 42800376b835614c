"""List filters on an object's fields (issue 32 §3.3, decision 0041): the dotted names the
interface's clients send (`instrumentId.id`) and the deepObject spelling of a generated client
or axios (`instrumentId[id]`, raw or percent-encoded) are the same filter; a query key shaped like
a filter that the list does not have is a 400, never an ignored (widening) filter.

Black-box over HTTP, on each list with such filters: transfers, sends, outgoing wire transfers
and managed accounts.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from tests.api.payments_support import customer, settings
from tests.factories import Identity, open_account

FUNDS = 100_000
MA = "managed_accounts"


async def ids(client: httpx.AsyncClient, ident: Identity, path: str, query: str = "") -> set[str]:
    r = await client.get(f"/multi{path}?{query}", headers=ident.headers)
    assert r.status_code == 200, (query, r.text)
    body = r.json()
    key = {"/transfers": "transfer", "/sends": "send", "/outgoing_wire_transfers": "transfer"}
    items = body[key.get(path, "accounts")]
    assert body["count"] == len(items) == body["responseCount"]
    return {item["id"] for item in items}


async def refused(client: httpx.AsyncClient, ident: Identity, path: str, query: str) -> str:
    """The one field name a 400 names."""
    r = await client.get(f"/multi{path}?{query}", headers=ident.headers)
    assert r.status_code == 400, (query, r.text)
    [field] = r.json()["syntaxErrors"]["invalidFields"]
    name: str = field["fieldName"]
    return name


def spelled(name: str, **fields: str) -> list[str]:
    """The query of an object filter in each spelling: dotted, bracketed, percent-encoded."""
    return [
        "&".join(f"{name}.{k}={v}" for k, v in fields.items()),
        "&".join(f"{name}[{k}]={v}" for k, v in fields.items()),
        "&".join(f"{quote(f'{name}[{k}]')}={v}" for k, v in fields.items()),
    ]


async def refusals(
    client: httpx.AsyncClient, ident: Identity, path: str, name: str, account: str
) -> None:
    """What no list may ignore: an unknown field of a known object, an unknown object in
    either spelling, the object's bare name, an id without its type, two spellings that
    disagree. A plain unknown key (a cache-buster) is still ignored."""
    everything = await ids(client, ident, path)
    assert await refused(client, ident, path, f"{name}[foo]=x") == f"{name}[foo]"
    assert await refused(client, ident, path, f"{quote(name + '[foo]')}=x") == f"{name}[foo]"
    assert await refused(client, ident, path, f"{name}.foo=x") == f"{name}.foo"
    assert await refused(client, ident, path, "foo[bar]=1") == "foo[bar]"
    assert await refused(client, ident, path, "foo.bar=1") == "foo.bar"
    assert await refused(client, ident, path, f"{name}[id][x]=1") == f"{name}[id][x]"
    assert await refused(client, ident, path, f"{name}={account}") == name
    for query in spelled(name, id=account):
        assert await refused(client, ident, path, query) == f"{name}.type"
    both = f"{name}[type]={MA}&{name}[id]={account}&{name}.id=1&{name}.type={MA}"
    assert (await refused(client, ident, path, both)).startswith(f"{name}")
    assert await refused(client, ident, path, f"{name}[id]=x&{name}[type]={MA}") == f"{name}[id]"
    assert await refused(client, ident, path, f"{name}[type]=cards") == f"{name}[type]"
    assert await ids(client, ident, path, "_=1700000000000") == everything


async def test_transfers_by_instrument_in_every_spelling(client, programme):
    p = await programme()
    ident, a = await customer(client, p, funds=FUNDS, sms=False)
    b = (await open_account(client, ident, "EUR"))["id"]
    c = (await open_account(client, ident, "EUR"))["id"]
    made = {}
    for dst in (b, c):
        r = await client.post(
            "/multi/transfers",
            headers=ident.headers,
            json={
                "profileId": p.profiles["transfers"],
                "source": {"type": MA, "id": a},
                "destination": {"type": MA, "id": dst},
                "destinationAmount": {"currency": "EUR", "amount": 100},
            },
        )
        assert r.status_code == 200, r.text
        made[dst] = r.json()["id"]
    for account, want in ((a, set(made.values())), (b, {made[b]}), (c, {made[c]})):
        for query in spelled("instrumentId", id=account, type=MA):
            assert await ids(client, ident, "/transfers", query) == want, query
    # The type alone keeps the transfers of an instrument of that type.
    assert await ids(client, ident, "/transfers", f"instrumentId[type]={MA}") == set(made.values())
    assert await ids(client, ident, "/transfers", "instrumentId[type]=managed_cards") == set()
    # The same filter twice, once in each spelling, is one filter.
    query = f"instrumentId[id]={b}&instrumentId[type]={MA}&instrumentId.id={b}"
    assert await ids(client, ident, "/transfers", query) == {made[b]}
    await refusals(client, ident, "/transfers", "instrumentId", a)


async def test_sends_by_source_in_every_spelling(client, programme, admin_headers):
    p = await programme()
    await settings(client, admin_headers, p, sendsScaRequired=False)
    ident, a = await customer(client, p, funds=FUNDS, sms=False)
    b = (await open_account(client, ident, "EUR"))["id"]
    _, theirs = await customer(client, p, "consumers", sms=False)
    r = await client.post(
        "/multi/transfers",
        headers=ident.headers,
        json={
            "profileId": p.profiles["transfers"],
            "source": {"type": MA, "id": a},
            "destination": {"type": MA, "id": b},
            "destinationAmount": {"currency": "EUR", "amount": 1_000},
        },
    )
    assert r.status_code == 200, r.text
    made = {}
    for src in (a, b):
        r = await client.post(
            "/multi/sends",
            headers=ident.headers,
            json={
                "profileId": p.profiles["sends"],
                "source": {"type": MA, "id": src},
                "destination": {"type": MA, "id": theirs},
                "destinationAmount": {"currency": "EUR", "amount": 100},
            },
        )
        assert r.status_code == 200, r.text
        made[src] = r.json()["id"]
    for account in (a, b):
        for query in spelled("source", id=account, type=MA):
            assert await ids(client, ident, "/sends", query) == {made[account]}, query
    assert await ids(client, ident, "/sends", f"source[type]={MA}") == set(made.values())
    # `instrumentId` is a transfers' filter, not a sends' one: refused, not ignored.
    assert await refused(client, ident, "/sends", f"instrumentId[id]={a}") == "instrumentId[id]"
    await refusals(client, ident, "/sends", "source", a)


async def test_wire_transfers_by_source_and_instrument(client, programme, admin_headers):
    p = await programme()
    await settings(client, admin_headers, p, owtScaRequired=False)
    ident, a = await customer(client, p, funds=FUNDS, sms=False)
    _, b = await customer(client, p, funds=FUNDS, sms=False)
    r = await client.post(
        "/multi/outgoing_wire_transfers",
        headers=ident.headers,
        json={
            "profileId": p.profiles["outgoingWireTransfers"],
            "sourceInstrument": {"type": MA, "id": a},
            "transferAmount": {"currency": "EUR", "amount": 100},
            "description": "Invoice 42",
            "destinationBeneficiary": {
                "name": "Ada Lovelace",
                "bankAccountDetails": {
                    "iban": "DE89370400440532013000",
                    "bankIdentifierCode": "COBADEFFXXX",
                },
            },
        },
    )
    assert r.status_code == 200, r.text
    wire = r.json()["id"]
    path = "/outgoing_wire_transfers"
    for name in ("sourceInstrument", "instrument"):
        for query in spelled(name, id=a, type=MA):
            assert await ids(client, ident, path, query) == {wire}, query
        for query in spelled(name, id=b, type=MA):  # another identity's account
            assert await ids(client, ident, path, query) == set(), query
    assert await ids(client, ident, path, "instrument[type]=managed_cards") == set()
    await refusals(client, ident, path, "sourceInstrument", a)
    await refusals(client, ident, path, "instrument", a)


async def test_account_reason_filters_in_both_spellings(client, programme):
    p = await programme()
    ident, a = await customer(client, p, sms=False)
    b = (await open_account(client, ident, "EUR"))["id"]
    r = await client.post(f"/multi/managed_accounts/{b}/block", headers=ident.headers)
    assert r.status_code == 204, r.text
    for query in (
        "state.blockedReason=USER",
        "state[blockedReason]=USER",
        "state%5BblockedReason%5D=USER",
        "state[blockedReason]=USER&state.blockedReason=USER",
        "state[blockedReason]=USER&state[blockedReason]=SYSTEM",
    ):
        assert await ids(client, ident, "/managed_accounts", query) == {b}, query
    assert await ids(client, ident, "/managed_accounts", "state[blockedReason]=LOST") == set()
    assert await ids(client, ident, "/managed_accounts", "state[destroyedReason]=USER") == set()
    path = "/managed_accounts"
    assert await refused(client, ident, path, "state[blockedReason]=FOO") == (
        "state[blockedReason][0]"
    )
    assert await refused(client, ident, path, "state[foo]=x") == "state[foo]"
    assert await refused(client, ident, path, "state.foo=x") == "state.foo"
    assert await refused(client, ident, path, "foo[bar]=1") == "foo[bar]"
    assert await refused(client, ident, path, "currency.x=EUR") == "currency.x"
    # Values with dots or escapes are values: only keys are filters.
    assert await ids(client, ident, path, "friendlyName=My.Main%20one") == set()
    assert await ids(client, ident, path, "state=ACTIVE&_=1700000000000") == {a}


async def test_each_description_declares_the_deep_objects(client):
    """A client generated from our description sends the deepObject spelling; the dotted one
    is named in the parameter's description."""
    spec = (await client.get("/multi/openapi.json")).json()
    for path, names in (
        ("/transfers", ["instrumentId"]),
        ("/sends", ["source"]),
        ("/outgoing_wire_transfers", ["sourceInstrument", "instrument"]),
    ):
        params = {p["name"]: p for p in spec["paths"][path]["get"]["parameters"]}
        assert not [n for n in params if "." in n], path  # no dotted parameter of these
        for name in names:
            declared: dict[str, Any] = params[name]
            assert (declared["in"], declared["style"], declared["explode"]) == (
                "query",
                "deepObject",
                True,
            )
            schema = declared["schema"]
            assert set(schema["properties"]) == {"id", "type"}
            assert schema["additionalProperties"] is False
            assert schema["dependentRequired"] == {"id": ["type"]}
            assert f"`{name}.id`" in declared["description"]
    accounts = {p["name"] for p in spec["paths"]["/managed_accounts"]["get"]["parameters"]}
    assert {"state.blockedReason", "state.destroyedReason"} <= accounts
