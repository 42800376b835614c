"""Transfers (money-movement.md §1.2, D12): between two instruments of the logged-in identity,
`COMPLETED` at once, the source paying amount + the transfer profile's fee.

Black-box over HTTP on `/multi` and `/3.29.1/multi` (3.1.0 has no transfers): the money, the
statement entries on both sides, the list and its filters, every 409 of the observed mapping
(each leaves balances untouched), the 400s and 404s, step-up, idempotency, and callers who must be
refused. The concurrency proofs are in test_transfer_concurrency.py.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

from tests.api.fees_support import PORTAL, ledger_ok, revenue
from tests.api.payments_support import balances, entries, profile
from tests.conftest import Prog
from tests.factories import (
    Identity,
    deposit,
    invited_user,
    login,
    open_account,
    otp_step_up,
    sign_up,
    verified,
)

LATEST, PINNED = "/multi", "/3.29.1/multi"
BOTH = pytest.mark.parametrize("base", [LATEST, PINNED])


def body(
    p: Prog,
    src: str,
    dst: str,
    amount: int = 100,
    currency: str = "EUR",
    **over: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "profileId": p.profiles["transfers"],
        "source": {"type": "managed_accounts", "id": src},
        "destination": {"type": "managed_accounts", "id": dst},
        "destinationAmount": {"currency": currency, "amount": amount},
    }
    out.update(over)
    return out


async def transfer(
    client: httpx.AsyncClient,
    ident: Identity,
    json: dict[str, Any],
    base: str = LATEST,
    ref: str | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    h = dict(headers or ident.headers)
    if ref is not None:
        h["idempotency-ref"] = ref
    return await client.post(f"{base}/transfers", headers=h, json=json)


async def customer(
    client: httpx.AsyncClient, p: Prog, kind: str = "corporates", funds: int = 1000
) -> tuple[Identity, str, str]:
    """A verified identity with two EUR accounts, the first holding `funds`."""
    ident = await verified(client, p, kind)
    a = (await open_account(client, ident, "EUR", friendlyName="Spending"))["id"]
    b = (await open_account(client, ident, "EUR", friendlyName="Savings"))["id"]
    if funds:
        assert await deposit(client, p, a, funds) == "COMPLETED"
    return ident, a, b


# The money


@BOTH
async def test_transfer_moves_amount_and_the_fee_goes_to_revenue(
    client, programme, container, admin_headers, base
):
    p = await programme()
    await profile(client, admin_headers, p, "transfers", fees={"EUR": 15})
    ident, a, b = await customer(client, p)
    r = await transfer(client, ident, body(p, a, b, 100, tag="rent-1"), base)
    assert r.status_code == 200, r.text
    t = r.json()
    assert t["id"].isdigit()
    assert t == {
        "id": t["id"],
        "profileId": p.profiles["transfers"],
        "tag": "rent-1",
        "source": {"type": "managed_accounts", "id": a},
        "destination": {"type": "managed_accounts", "id": b},
        "destinationAmount": {"currency": "EUR", "amount": 100},
        "state": "COMPLETED",
        "creationTimestamp": t["creationTimestamp"],
    }
    assert isinstance(t["creationTimestamp"], int) and t["creationTimestamp"] > 0
    assert await balances(client, ident, a) == (885, 885)
    assert await balances(client, ident, b) == (100, 100)
    assert await revenue(container.db, p) == 15
    await ledger_ok(client, admin_headers, p)

    r = await client.get(f"{base}/transfers/{t['id']}", headers=ident.headers)
    assert r.status_code == 200 and r.json() == t


async def test_statement_entries_on_both_sides(client, programme, admin_headers):
    p = await programme()
    await profile(client, admin_headers, p, "transfers", fees={"EUR": 15})
    ident, a, b = await customer(client, p)
    t = (await transfer(client, ident, body(p, a, b, 100))).json()

    [src, *_] = await entries(client, ident, a)
    eur = {"currency": "EUR"}
    assert src["transactionId"] == {"type": "TRANSFER", "id": t["id"]}
    assert src["entryState"] == "COMPLETED"
    for field in ("transactionAmount", "availableBalanceAdjustment", "actualBalanceAdjustment"):
        assert src[field] == {**eur, "amount": -115}, field
    assert src["cardholderFee"] == {**eur, "amount": 15}
    assert src["balanceAfter"] == src["actualBalanceAfter"] == {**eur, "amount": 885}
    assert src["availableBalanceAfter"] == {**eur, "amount": 885}
    assert src["processedTimestamp"] == t["creationTimestamp"]
    assert src["additionalFields"] == {
        "destinationInstrumentType": "managed_accounts",
        "destinationInstrumentId": b,
        "destinationInstrumentFriendlyName": "Savings",
    }

    [dst, *_] = await entries(client, ident, b)
    assert dst["transactionId"] == {"type": "TRANSFER", "id": t["id"]}
    assert dst["transactionAmount"] == {**eur, "amount": 100}
    assert dst["cardholderFee"] == {**eur, "amount": 0}
    assert dst["additionalFields"] == {
        "sourceInstrumentType": "managed_accounts",
        "sourceInstrumentId": a,
        "sourceInstrumentFriendlyName": "Spending",
    }

    # 3.1.0's statement shows the same entry in its own shape, fee included.
    r = await client.get(f"/3.1.0/multi/managed_accounts/{a}/statement", headers=ident.headers)
    old = r.json()["entry"][0]
    assert old["transactionAmount"] == {**eur, "amount": -115}
    assert old["cardholderFee"] == {**eur, "amount": 15}

    # The PDF says what happened.
    r = await client.get(
        f"/multi/managed_accounts/{a}/statement",
        headers={**ident.headers, "accept": "application/pdf"},
    )
    assert r.status_code == 200 and r.content.startswith(b"%PDF")


async def test_zero_fee_moves_only_the_amount_and_the_whole_balance_can_go(
    client, programme, container, admin_headers
):
    p = await programme()  # transfers cost 0 by default (D12)
    ident, a, b = await customer(client, p, funds=250)
    r = await transfer(client, ident, body(p, a, b, 250))
    assert r.status_code == 200, r.text
    assert await balances(client, ident, a) == (0, 0)
    assert await balances(client, ident, b) == (250, 250)
    assert await revenue(container.db, p) == 0
    r = await transfer(client, ident, body(p, b, a, 50))  # and back
    assert r.status_code == 200, r.text
    assert await balances(client, ident, a) == (50, 50)
    await ledger_ok(client, admin_headers, p)


async def test_consumers_and_authorised_users_transfer_their_identitys_money(client, programme):
    p = await programme()
    consumer, a, b = await customer(client, p, "consumers")
    r = await transfer(client, consumer, body(p, a, b, 10))
    assert r.status_code == 200, r.text

    corporate, c, d = await customer(client, p)
    _, _, token = await invited_user(client, p, corporate)
    as_user = {**p.headers, "Authorization": f"Bearer {token}"}
    r = await transfer(client, corporate, body(p, c, d, 10), headers=as_user)
    assert r.status_code == 200, r.text
    # The root user sees the transfer its authorised user made: it is the identity's.
    r = await client.get(f"/multi/transfers/{r.json()['id']}", headers=corporate.headers)
    assert r.status_code == 200


# Refusals: each leaves the money where it was and no transfer behind


async def refused(
    client: httpx.AsyncClient,
    ident: Identity,
    json: dict[str, Any],
    code: str,
    watched: list[str],
) -> None:
    before = [await balances(client, ident, acc) for acc in watched]
    r = await transfer(client, ident, json)
    assert (r.status_code, r.json()) == (409, {"errorCode": code}), r.text
    assert [await balances(client, ident, acc) for acc in watched] == before


async def transfer_count(client: httpx.AsyncClient, ident: Identity) -> int:
    r = await client.get("/multi/transfers", headers=ident.headers)
    assert r.status_code == 200, r.text
    count: int = r.json()["count"]
    return count


async def test_each_business_refusal_has_its_error_code(client, programme, admin_headers):
    p = await programme()
    ident, a, b = await customer(client, p)
    _, x, _ = await customer(client, p)
    gbp = (await open_account(client, ident, "GBP"))["id"]
    watched = [a, b, gbp]

    await refused(client, ident, body(p, "999999", b), "SOURCE_NOT_FOUND", watched)
    await refused(client, ident, body(p, x, b), "SOURCE_NOT_FOUND", watched)  # another's
    cards = body(p, a, b, source={"type": "managed_cards", "id": a})
    await refused(client, ident, cards, "SOURCE_NOT_FOUND", watched)
    await refused(client, ident, body(p, a, "999999"), "DESTINATION_NOT_FOUND", watched)
    await refused(client, ident, body(p, a, x), "DESTINATION_NOT_FOUND", watched)
    await refused(client, ident, body(p, a, a), "SOURCE_AND_DESTINATION_MUST_BE_DIFFERENT", watched)
    await refused(client, ident, body(p, a, gbp), "CURRENCY_MISMATCH", watched)
    await refused(client, ident, body(p, a, b, currency="GBP"), "CURRENCY_MISMATCH", watched)
    await refused(client, ident, body(p, a, b, 0), "AMOUNT_INVALID", watched)
    await refused(client, ident, body(p, a, b, -5), "AMOUNT_INVALID", watched)
    await refused(client, ident, body(p, a, b, 1001), "FUNDS_INSUFFICIENT", watched)
    await refused(client, ident, body(p, b, a, 1), "FUNDS_INSUFFICIENT", watched)  # empty
    await refused(client, ident, body(p, a, b, 2**63 - 1), "FUNDS_INSUFFICIENT", watched)
    # Enough for the amount, not for amount + fee.
    await profile(client, admin_headers, p, "transfers", fees={"EUR": 1})
    await refused(client, ident, body(p, a, b, 1000), "FUNDS_INSUFFICIENT", watched)
    assert (await transfer(client, ident, body(p, a, b, 999))).status_code == 200
    await profile(client, admin_headers, p, "transfers", fees={"EUR": 0})

    # A transfer profile that does not serve the currency has no fee for it.
    profile_url = f"{PORTAL}/{p.id}/profiles/{p.profiles['transfers']}"
    r = await client.patch(profile_url, headers=admin_headers, json={"currencies": ["EUR"]})
    assert r.status_code == 200, r.text
    gbp2 = (await open_account(client, ident, "GBP"))["id"]
    await refused(
        client, ident, body(p, gbp, gbp2, 1, currency="GBP"), "FEE_NOT_CONFIGURED_FOR_CURRENCY", []
    )
    r = await client.patch(profile_url, headers=admin_headers, json={"active": False})
    assert r.status_code == 200, r.text
    await refused(client, ident, body(p, b, a, 1), "PROFILE_INACTIVE", watched)
    r = await client.patch(profile_url, headers=admin_headers, json={"active": True})
    assert r.status_code == 200, r.text
    assert await transfer_count(client, ident) == 1  # only the one that went through
    await ledger_ok(client, admin_headers, p)


async def test_blocked_and_removed_instruments(client, programme):
    p = await programme()
    ident, a, b = await customer(client, p, funds=500)
    watched = [a, b]
    block = f"/multi/managed_accounts/{b}/block"
    assert (await client.post(block, headers=ident.headers)).status_code == 204
    await refused(client, ident, body(p, a, b), "DESTINATION_INSTRUMENT_BLOCKED", watched)
    await refused(client, ident, body(p, b, a), "SOURCE_INSTRUMENT_BLOCKED", watched)
    unblock = f"/multi/managed_accounts/{b}/unblock"
    assert (await client.post(unblock, headers=ident.headers)).status_code == 204
    assert (await transfer(client, ident, body(p, a, b, 10))).status_code == 200

    empty = (await open_account(client, ident, "EUR"))["id"]
    remove = f"/3.1.0/multi/managed_accounts/{empty}/remove"
    assert (await client.post(remove, headers=ident.headers)).status_code == 204
    await refused(client, ident, body(p, a, empty), "DESTINATION_INSTRUMENT_DESTROYED", watched)
    await refused(client, ident, body(p, empty, a), "SOURCE_INSTRUMENT_DESTROYED", watched)


async def test_an_identity_no_longer_approved_may_not_move_money(client, programme):
    p = await programme()
    ident, a, b = await customer(client, p, funds=500)
    r = await client.post(
        f"/simulate/api/corporates/{ident.id}/reject", headers={"programme-key": p.api_key}
    )
    assert r.status_code == 204, r.text
    await refused(client, ident, body(p, a, b), "INSTRUMENT_DENIED_TRANSACTION", [a, b])


async def test_malformed_bodies_are_400_and_change_nothing(client, programme):
    p = await programme()
    ident, a, b = await customer(client, p, funds=500)
    bad = [
        body(p, a, b, source={"type": "cards", "id": a}),
        body(p, a, b, destination={"type": "managed_accounts", "id": "12a"}),
        body(p, a, b, destinationAmount={"currency": "eur", "amount": 1}),
        body(p, a, b, destinationAmount={"currency": "EUR", "amount": "1"}),
        body(p, a, b, destinationAmount={"currency": "EUR", "amount": 2**63}),
        body(p, a, b, destinationAmount={"currency": "EUR"}),
        body(p, a, b, profileId="abc"),
        body(p, a, b, tag="no spaces allowed"),
        {k: v for k, v in body(p, a, b).items() if k != "source"},
        {k: v for k, v in body(p, a, b).items() if k != "profileId"},
    ]
    for json in bad:
        r = await transfer(client, ident, json)
        assert r.status_code == 400, (json, r.text)
        assert "message" in r.json()
    assert await balances(client, ident, a) == (500, 500)
    assert await transfer_count(client, ident) == 0


async def test_an_unknown_transfer_profile_is_404(client, programme):
    p = await programme()
    ident, a, b = await customer(client, p, funds=500)
    for profile_id in ("999999", p.profiles["sends"], p.profiles["corporateManagedAccount"]):
        r = await transfer(client, ident, body(p, a, b, profileId=profile_id))
        assert r.status_code == 404, (profile_id, r.text)
    other = await programme()
    r = await transfer(client, ident, body(p, a, b, profileId=other.profiles["transfers"]))
    assert r.status_code == 404
    assert await transfer_count(client, ident) == 0


# Reading transfers


async def test_get_is_scoped_to_the_identity(client, programme):
    p = await programme()
    ident, a, b = await customer(client, p)
    stranger, _, _ = await customer(client, p, funds=0)
    t = (await transfer(client, ident, body(p, a, b, 5))).json()
    for who in (stranger,):
        r = await client.get(f"/multi/transfers/{t['id']}", headers=who.headers)
        assert r.status_code == 404, r.text
    for missing in ("1", "99999999999999999999", "0"):
        r = await client.get(f"/multi/transfers/{missing}", headers=ident.headers)
        assert r.status_code == 404, (missing, r.text)
    r = await client.get("/multi/transfers", headers=stranger.headers)
    assert r.json() == {"transfer": [], "count": 0, "responseCount": 0}


async def test_list_filters_and_pages(client, programme, container):
    p = await programme()
    ident, a, b = await customer(client, p, funds=10_000)
    c = (await open_account(client, ident, "EUR"))["id"]
    made = []
    for i, (src, dst) in enumerate([(a, b), (a, c), (b, a), (a, b), (c, a)]):
        r = await transfer(client, ident, body(p, src, dst, 10 * (5 - i), tag=f"t{i % 2}"))
        assert r.status_code == 200, r.text
        made.append(r.json())
    newest_first = made[::-1]

    async def listed(**params: Any) -> dict[str, Any]:
        r = await client.get("/multi/transfers", headers=ident.headers, params=params)
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        assert out["responseCount"] == len(out["transfer"])
        return out

    everything = await listed()
    assert everything["transfer"] == newest_first and everything["count"] == 5
    page = await listed(limit=2, offset=1)
    assert page["transfer"] == newest_first[1:3] and page["count"] == 5
    assert [t["tag"] for t in (await listed(tag="t1"))["transfer"]] == ["t1", "t1"]
    with_c = await listed(**{"instrumentId.id": c, "instrumentId.type": "managed_accounts"})
    assert {t["id"] for t in with_c["transfer"]} == {
        t["id"] for t in made if c in (t["source"]["id"], t["destination"]["id"])
    }
    assert (await listed(state="COMPLETED"))["count"] == 5
    assert (await listed(state="REJECTED"))["count"] == 0
    assert (await listed(state="NOT_A_STATE"))["count"] == 5  # unknown state: all
    assert (await listed(profileId=p.profiles["transfers"]))["count"] == 5
    assert (await listed(profileId=p.profiles["sends"]))["count"] == 0
    stamps = sorted(t["creationTimestamp"] for t in made)
    assert (await listed(createdFrom=stamps[-1] + 1))["count"] == 0
    assert (await listed(createdTo=stamps[0] - 1))["count"] == 0
    assert (await listed(createdFrom=stamps[0], createdTo=stamps[-1]))["count"] == 5
    assert len((await listed(limit=1000))["transfer"]) == 5  # capped at 100, not refused

    for params in (
        {"instrumentId.id": a},  # an id without its type
        {"instrumentId.id": a, "instrumentId.type": "cards"},
        {"limit": 0},
        {"offset": -1},
        {"createdFrom": "yesterday"},
    ):
        r = await client.get("/multi/transfers", headers=ident.headers, params=params)
        assert r.status_code == 400, (params, r.text)


# Step-up, versions, callers


async def test_step_up_guards_reading_not_creating(client, programme, admin_headers):
    p = await programme()
    ident, a, b = await customer(client, p)
    r = await client.patch(
        f"{PORTAL}/{p.id}/settings", headers=admin_headers, json={"stepUpRequired": True}
    )
    assert r.status_code == 200, r.text
    r = await transfer(client, ident, body(p, a, b, 5))
    assert r.status_code == 200, r.text
    for path in ("/multi/transfers", f"/multi/transfers/{r.json()['id']}"):
        got = await client.get(path, headers=ident.headers)
        assert got.status_code == 403
        assert got.json()["errorCode"] == "STEP_UP_REQUIRED"
    await enrol_and_step_up(client, ident)
    assert (await client.get("/multi/transfers", headers=ident.headers)).status_code == 200


async def enrol_and_step_up(client: httpx.AsyncClient, ident: Identity) -> None:
    enrol = "/multi/authentication_factors/otp/SMS"
    r = await client.post(enrol, headers=ident.headers)
    assert r.status_code == 204, r.text
    r = await client.post(
        f"{enrol}/verify", headers=ident.headers, json={"verificationCode": "123456"}
    )
    assert r.status_code == 204, r.text
    await otp_step_up(client, ident.headers)


async def test_version_3_1_0_has_no_transfers(client, programme):
    p = await programme()
    ident, a, b = await customer(client, p)
    r = await transfer(client, ident, body(p, a, b, 5), "/3.1.0/multi")
    assert r.status_code == 404
    assert (await client.get("/3.1.0/multi/transfers", headers=ident.headers)).status_code == 404
    assert await balances(client, ident, a) == (1000, 1000)


async def test_refused_callers(client, programme):
    p, other = await programme(), await programme()
    ident, a, b = await customer(client, p)
    json = body(p, a, b, 5)
    t = (await transfer(client, ident, json)).json()
    token = {"Authorization": f"Bearer {ident.token}"}
    logged_out = (await login(client, p, ident.email)).json()["token"]
    r = await client.post(
        "/multi/logout", headers={**p.headers, "Authorization": f"Bearer {logged_out}"}
    )
    assert r.status_code == 204
    cases = [
        (token, 400),  # no api-key
        ({"api-key": "nope", **token}, 401),
        ({**other.headers, **token}, 403),  # another programme's key
        (p.headers, 401),  # no token
        ({**p.headers, "Authorization": f"Bearer {logged_out}"}, 401),
    ]
    for headers, status in cases:
        r = await client.post("/multi/transfers", headers=headers, json=json)
        assert r.status_code == status, (headers, r.text)
        for path in ("/multi/transfers", f"/multi/transfers/{t['id']}"):
            r = await client.get(path, headers=headers)
            assert r.status_code == status, (path, headers, r.text)
    assert await balances(client, ident, a) == (995, 995)
    # An unverified identity's session is refused its instruments too: it has none.
    fresh = await sign_up(client, p, "corporates")
    r = await transfer(client, fresh, json)
    assert (r.status_code, r.json()) == (409, {"errorCode": "SOURCE_NOT_FOUND"})


# Idempotency (D6)


async def test_same_ref_same_payload_replays_one_transfer(client, programme):
    p = await programme()
    ident, a, b = await customer(client, p)
    ref = f"t-{os.urandom(4).hex()}"
    first = await transfer(client, ident, body(p, a, b, 40), ref=ref)
    again = await transfer(client, ident, body(p, a, b, 40), ref=ref)
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert await balances(client, ident, a) == (960, 960)
    other = await transfer(client, ident, body(p, a, b, 41), ref=ref)
    assert other.status_code == 400, other.text
    long = await transfer(client, ident, body(p, a, b, 41), ref="x" * 300)
    assert long.status_code == 413
    assert await transfer_count(client, ident) == 1


async def test_a_refused_first_call_does_not_take_the_ref(client, programme):
    p = await programme()
    ident, a, b = await customer(client, p, funds=100)
    ref = f"t-{os.urandom(4).hex()}"
    r = await transfer(client, ident, body(p, a, b, 500), ref=ref)
    assert (r.status_code, r.json()) == (409, {"errorCode": "FUNDS_INSUFFICIENT"})
    r = await transfer(client, ident, body(p, a, b, 50), ref=ref)  # corrected, same ref
    assert r.status_code == 200, r.text
    assert await transfer_count(client, ident) == 1
    assert await balances(client, ident, a) == (50, 50)
