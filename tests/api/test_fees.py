"""Fee charges (`POST /corporates/fees/charge`, `POST /consumers/fees/charge`), black-box: 3.29.1
answers the ChargeFee record, 3.1.0 answers 204; the fee follows the identity's fee group and the
account's currency and lands in the programme's revenue account; every refusal changes nothing;
`idempotency-ref` gives one effect per ref (D4, D5, D6, D11)."""

from __future__ import annotations

import re
import secrets
import time
from typing import Any

import pytest
from sqlalchemy import text

from multibank.kernel.idempotency import PAYLOAD_MISMATCH
from tests.api.fees_support import (
    PORTAL,
    account_postings,
    available,
    charge,
    fee_body,
    fee_count,
    ledger_ok,
    revenue,
)
from tests.factories import deposit, invited_user, login, open_account, verified

V29 = "/multi"
V31 = "/3.1.0/multi"
DIGITS = re.compile(r"^[0-9]+$")
CHARGE_FEE_FIELDS = {
    "transactionId",
    "profileId",
    "feeType",
    "source",
    "availableBalanceAdjustment",
    "state",
    "creationTimestamp",
}


def ref() -> str:
    return f"ref-{secrets.token_hex(8)}"


async def funded(client, p, kind="corporates", base=V29, amount=1000, currency="EUR", **over):
    ident = await verified(client, p, kind, base, **over)
    acc = await open_account(client, ident, currency, base)
    if amount:
        await deposit(client, p, acc["id"], amount, currency)
    return ident, acc


async def create_fee_type(client, admin_headers, p, name, amounts):
    r = await client.post(
        f"{PORTAL}/{p.id}/fee_types", headers=admin_headers, json={"name": name, "amounts": amounts}
    )
    assert r.status_code == 201, r.text


def assert_charge_fee(body, acc, amount, currency="EUR", fee_type="ADMIN_FEE"):
    assert set(body) == CHARGE_FEE_FIELDS, body
    assert body["transactionId"]["type"] == "CHARGE_FEE"
    assert DIGITS.match(body["transactionId"]["id"])
    assert body["profileId"] == acc["profileId"]
    assert body["feeType"] == fee_type
    assert body["source"] == {"type": "managed_accounts", "id": acc["id"]}
    # D11: a debit is negative.
    assert body["availableBalanceAdjustment"] == {"currency": currency, "amount": -amount}
    assert body["state"] == "INITIALISED"
    assert isinstance(body["creationTimestamp"], int)
    assert abs(body["creationTimestamp"] - time.time() * 1000) < 120_000


# The charge itself


@pytest.mark.parametrize(
    "kind, base",
    [
        ("corporates", V29),
        ("consumers", V29),
        ("consumers", "/3.29.1/multi"),
        ("corporates", V31),
        ("consumers", V31),
    ],
)
async def test_charge_moves_the_fee_from_the_account_to_revenue(
    client, programme, container, admin_headers, kind, base
):
    p = await programme()
    ident, acc = await funded(client, p, kind, base)
    profile = "corporateManagedAccount" if kind == "corporates" else "consumerManagedAccount"
    assert acc["profileId"] == p.profiles[profile]

    first = await charge(client, ident, acc["id"], base)
    second = await charge(client, ident, acc["id"], base)

    for r in (first, second):
        if base == V31:
            assert r.status_code == 204, r.text
            assert r.content == b""
        else:
            assert r.status_code == 200, r.text
            assert_charge_fee(r.json(), acc, 100)
    if base != V31:
        # Without an idempotency-ref two charges are two fee transactions.
        assert first.json()["transactionId"] != second.json()["transactionId"]
    assert await available(client, ident, acc["id"]) == 800
    assert await revenue(container.db, p) == 200
    postings = await account_postings(container.db, acc["id"])
    assert sorted(postings) == sorted(
        [
            ("DEPOSIT", 1000, 1000, 1000, 1000),
            ("CHARGE_FEE", -100, -100, 900, 900),
            ("CHARGE_FEE", -100, -100, 800, 800),
        ]
    )
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize("kind, base", [("corporates", V29), ("consumers", V31)])
async def test_amount_follows_the_fee_group_and_the_account_currency(
    client, programme, container, admin_headers, kind, base
):
    p = await programme()
    await create_fee_type(
        client,
        admin_headers,
        p,
        "FX_FEE",
        {"DEFAULT": {"EUR": 111, "USD": 222}, "PREMIUM": {"EUR": 11, "USD": 22}},
    )
    await create_fee_type(client, admin_headers, p, "DEFAULT_ONLY", {"DEFAULT": {"EUR": 7}})
    await create_fee_type(
        client, admin_headers, p, "NOT_PREMIUM", {"DEFAULT": {"EUR": 9}, "PREMIUM": {}}
    )
    ident, eur = await funded(client, p, kind, base)
    usd = await open_account(client, ident, "USD", base)
    await deposit(client, p, usd["id"], 1000, "USD")

    async def charged(acc, fee_type, currency, amount):
        r = await charge(client, ident, acc["id"], base, fee_type=fee_type)
        if base == V31:
            assert r.status_code == 204, r.text
        else:
            assert r.status_code == 200, r.text
            assert_charge_fee(r.json(), acc, amount, currency, fee_type)

    # No fee group at sign-up: DEFAULT.
    await charged(eur, "ADMIN_FEE", "EUR", 100)
    await charged(eur, "FX_FEE", "EUR", 111)
    await charged(usd, "FX_FEE", "USD", 222)
    assert await available(client, ident, eur["id"]) == 1000 - 100 - 111
    assert await available(client, ident, usd["id"]) == 1000 - 222

    # The fee group follows the identity: once PREMIUM, the PREMIUM amounts apply.
    r = await client.patch(f"/multi/{kind}", headers=ident.headers, json={"feeGroup": "PREMIUM"})
    assert r.status_code == 200, r.text
    assert r.json()["feeGroup"] == "PREMIUM"
    await charged(eur, "ADMIN_FEE", "EUR", 50)
    await charged(eur, "FX_FEE", "EUR", 11)
    await charged(usd, "ADMIN_FEE", "USD", 50)
    await charged(usd, "FX_FEE", "USD", 22)
    # A fee type that does not name the group charges its DEFAULT amounts ...
    await charged(eur, "DEFAULT_ONLY", "EUR", 7)
    # ... but one that names the group with no amount in the currency cannot be charged.
    r = await charge(client, ident, eur["id"], base, fee_type="NOT_PREMIUM")
    assert r.status_code == 409, r.text
    assert r.json() == {"errorCode": "UNRESOLVED_CURRENCY"}
    assert await available(client, ident, eur["id"]) == 1000 - 100 - 111 - 50 - 11 - 7
    assert await available(client, ident, usd["id"]) == 1000 - 222 - 50 - 22
    assert await revenue(container.db, p, "EUR") == 100 + 111 + 50 + 11 + 7
    assert await revenue(container.db, p, "USD") == 222 + 50 + 22
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize("kind", ["corporates", "consumers"])
async def test_premium_fee_group_chosen_at_sign_up(client, programme, container, kind):
    p = await programme()
    ident, acc = await funded(client, p, kind, V29, currency="GBP", feeGroup="PREMIUM")
    r = await charge(client, ident, acc["id"])
    assert r.status_code == 200, r.text
    assert_charge_fee(r.json(), acc, 50, "GBP")
    assert await available(client, ident, acc["id"]) == 950
    assert await revenue(container.db, p, "GBP") == 50
    assert await revenue(container.db, p, "EUR") == 0


# 409 refusals


@pytest.mark.parametrize("kind, base", [("corporates", V29), ("consumers", V31)])
async def test_unresolvable_charges_are_409_and_change_nothing(
    client, programme, container, admin_headers, kind, base
):
    p = await programme()
    # A fee type with no amount in EUR, for the identities' (DEFAULT) group.
    await create_fee_type(client, admin_headers, p, "GBP_ONLY", {"DEFAULT": {"GBP": 10}})
    ident, acc = await funded(client, p, kind, base)
    other, other_acc = await funded(client, p, kind, base)
    cases = [
        (fee_body(acc["id"], "NO_SUCH_FEE"), "UNRESOLVED_FEE_TYPE"),
        (fee_body(acc["id"], "GBP_ONLY"), "UNRESOLVED_CURRENCY"),
        (fee_body("9" * 18), "UNRESOLVED_INSTRUMENT"),
        (fee_body("9" * 19), "UNRESOLVED_INSTRUMENT"),  # beyond int64: names no row
        (fee_body("0"), "UNRESOLVED_INSTRUMENT"),
        (fee_body(acc["id"], kind="managed_cards"), "UNRESOLVED_INSTRUMENT"),
        (fee_body(other_acc["id"]), "IDENTITY_NOT_OWNER_OF_INSTRUMENT"),
    ]
    for body, code in cases:
        r = await charge(client, ident, acc["id"], base, body=body, ref=ref())
        assert r.status_code == 409, (body, r.status_code, r.text)
        assert r.json() == {"errorCode": code}, body
    # Nothing moved: neither account, nor revenue.
    assert await available(client, ident, acc["id"]) == 1000
    assert await available(client, other, other_acc["id"]) == 1000
    assert await fee_count(container.db, acc["id"]) == 0
    assert await fee_count(container.db, other_acc["id"]) == 0
    assert await revenue(container.db, p) == 0
    assert await revenue(container.db, p, "GBP") == 0
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize("kind, base", [("corporates", V31), ("consumers", V29)])
async def test_insufficient_funds_is_409_and_changes_nothing(
    client, programme, container, admin_headers, kind, base
):
    p = await programme()
    ident, acc = await funded(client, p, kind, base, amount=0)
    r = await charge(client, ident, acc["id"], base)
    assert r.status_code == 409, r.text
    assert r.json() == {"errorCode": "FUNDS_INSUFFICIENT"}

    await deposit(client, p, acc["id"], 99)
    r = await charge(client, ident, acc["id"], base)
    assert r.status_code == 409, r.text
    assert r.json() == {"errorCode": "FUNDS_INSUFFICIENT"}
    assert await available(client, ident, acc["id"]) == 99
    assert await revenue(container.db, p) == 0
    assert await account_postings(container.db, acc["id"]) == [("DEPOSIT", 99, 99, 99, 99)]
    await ledger_ok(client, admin_headers, p)

    # Exactly the fee is enough, and leaves the account at zero.
    await deposit(client, p, acc["id"], 1)
    r = await charge(client, ident, acc["id"], base)
    assert r.status_code == (204 if base == V31 else 200), r.text
    assert await available(client, ident, acc["id"]) == 0
    r = await charge(client, ident, acc["id"], base)
    assert r.status_code == 409, r.text
    assert r.json() == {"errorCode": "FUNDS_INSUFFICIENT"}
    assert await available(client, ident, acc["id"]) == 0
    assert await revenue(container.db, p) == 100
    await ledger_ok(client, admin_headers, p)


# 400, 401, 403


@pytest.mark.parametrize("base", [V29, V31])
async def test_malformed_charges_are_400(client, programme, container, base):
    p = await programme()
    ident, acc = await funded(client, p, "corporates", base)
    good = fee_body(acc["id"])
    cases = [
        ({"source": good["source"]}, "feeType", "REQUIRED"),
        ({"feeType": "ADMIN_FEE"}, "source", "REQUIRED"),
        ({**good, "source": {"type": "cards", "id": acc["id"]}}, "source.type", "IN"),
        ({**good, "source": {"type": "managed_accounts", "id": "abc"}}, "source.id", "REGEX"),
        ({**good, "source": {"type": "managed_accounts"}}, "source.id", "REQUIRED"),
    ]
    for body, field, error in cases:
        r = await charge(client, ident, acc["id"], base, body=body)
        assert r.status_code == 400, (body, r.status_code, r.text)
        invalid = r.json()["syntaxErrors"]["invalidFields"]
        assert {"fieldName": field, "error": error} in [
            {"fieldName": f["fieldName"], "error": f["error"]} for f in invalid
        ], (body, invalid)
    r = await client.post(
        f"{base}/corporates/fees/charge",
        headers={**ident.headers, "content-type": "application/json"},
        content=b'{"feeType": "ADMIN_FEE", "source": ',
    )
    assert r.status_code == 400, r.text
    assert await available(client, ident, acc["id"]) == 1000
    assert await fee_count(container.db, acc["id"]) == 0


async def test_a_token_of_the_other_identity_type_is_403(client, programme, container):
    p = await programme()
    consumer, c_acc = await funded(client, p, "consumers")
    corporate, k_acc = await funded(client, p, "corporates")
    for base in (V29, V31):
        r = await charge(client, consumer, c_acc["id"], base, kind="corporates")
        assert r.status_code == 403, r.text
        assert r.content == b""
        r = await charge(client, corporate, k_acc["id"], base, kind="consumers")
        assert r.status_code == 403, r.text
        assert r.content == b""
    assert await available(client, consumer, c_acc["id"]) == 1000
    assert await available(client, corporate, k_acc["id"]) == 1000
    assert await revenue(container.db, p) == 0


async def test_refusals_of_the_caller_change_nothing(client, programme, container):
    p = await programme()
    q = await programme()
    ident, acc = await funded(client, p)
    q_ident, q_acc = await funded(client, q)
    body = fee_body(acc["id"])
    bearer = {"Authorization": f"Bearer {ident.token}"}
    cases = [
        (bearer, 400),  # no api-key
        ({"api-key": "", **bearer}, 400),
        ({"api-key": p.api_key + "x", **bearer}, 401),
        (p.headers, 401),  # no token
        ({**p.headers, "Authorization": "Bearer not-a-token"}, 401),
        ({**q.headers, **bearer}, 403),  # another programme's key with this token
    ]
    for base in (V29, V31):
        for headers, status in cases:
            r = await client.post(f"{base}/corporates/fees/charge", headers=headers, json=body)
            assert r.status_code == status, (base, headers, r.status_code, r.text)
            if status != 400:
                assert r.content == b""
        # Another programme's account is not an instrument this caller can resolve.
        r = await charge(client, ident, q_acc["id"], base)
        assert r.status_code == 409, r.text
        assert r.json() == {"errorCode": "UNRESOLVED_INSTRUMENT"}
    assert await available(client, ident, acc["id"]) == 1000
    assert await available(client, q_ident, q_acc["id"]) == 1000
    assert await revenue(container.db, p) == 0
    assert await revenue(container.db, q) == 0


# idempotency-ref (D6)


@pytest.mark.parametrize("base", [V29, V31])
async def test_same_ref_and_payload_replays_with_one_debit(
    client, programme, container, admin_headers, base
):
    p = await programme()
    ident, acc = await funded(client, p, "consumers", base)
    key = ref()
    first = await charge(client, ident, acc["id"], base, ref=key)
    assert first.status_code == (204 if base == V31 else 200), first.text
    again = await charge(client, ident, acc["id"], base, ref=key)
    # The same JSON with its keys in another order is the same payload.
    reordered = {"source": {"id": acc["id"], "type": "managed_accounts"}, "feeType": "ADMIN_FEE"}
    third = await charge(client, ident, acc["id"], base, ref=key, body=reordered)
    # Another session of the same user: refs belong to the user, not the session.
    r = await login(client, p, ident.email, base=base)
    assert r.status_code == 200, r.text
    fourth = await charge(client, ident, acc["id"], base, ref=key, token=r.json()["token"])
    for r in (again, third, fourth):
        assert r.status_code == first.status_code
        assert r.content == first.content
    assert await available(client, ident, acc["id"]) == 900
    assert await fee_count(container.db, acc["id"]) == 1
    assert await revenue(container.db, p) == 100

    # The same ref with another payload is refused, and charges nothing.
    for body in (
        fee_body(acc["id"], "OTHER_FEE"),
        {**fee_body(acc["id"]), "source": {"type": "managed_cards", "id": acc["id"]}},
    ):
        r = await charge(client, ident, acc["id"], base, ref=key, body=body)
        assert r.status_code == 400, r.text
        assert r.json()["message"] == PAYLOAD_MISMATCH
    assert await available(client, ident, acc["id"]) == 900

    # A new ref is a new charge; the old one still replays.
    r = await charge(client, ident, acc["id"], base, ref=ref())
    assert r.status_code == first.status_code
    r = await charge(client, ident, acc["id"], base, ref=key)
    assert (r.status_code, r.content) == (first.status_code, first.content)
    assert await available(client, ident, acc["id"]) == 800
    assert await fee_count(container.db, acc["id"]) == 2
    await ledger_ok(client, admin_headers, p)


async def test_refs_are_scoped_to_the_caller(client, programme, container):
    p = await programme()
    a, a_acc = await funded(client, p, "corporates")
    b, b_acc = await funded(client, p, "consumers")
    key = ref()
    ra = await charge(client, a, a_acc["id"], ref=key)
    rb = await charge(client, b, b_acc["id"], ref=key)
    assert ra.status_code == rb.status_code == 200, (ra.text, rb.text)
    assert ra.json()["transactionId"] != rb.json()["transactionId"]
    assert await available(client, a, a_acc["id"]) == 900
    assert await available(client, b, b_acc["id"]) == 900

    # An authorised user of the corporate charges the corporate's account too, and is a caller
    # of its own: the root user's ref is not its ref.
    _, _, user_token = await invited_user(client, p, a, f"{ref()}@example.com")
    ru = await charge(client, a, a_acc["id"], ref=key, token=user_token)
    assert ru.status_code == 200, ru.text
    assert ru.json()["transactionId"] != ra.json()["transactionId"]
    assert ru.json()["source"] == {"type": "managed_accounts", "id": a_acc["id"]}
    assert await available(client, a, a_acc["id"]) == 800
    assert await fee_count(container.db, a_acc["id"]) == 2


async def test_a_ref_longer_than_255_characters_is_413(client, programme, container):
    p = await programme()
    ident, acc = await funded(client, p)
    for base in (V29, V31):
        r = await charge(client, ident, acc["id"], base, ref="r" * 256)
        assert r.status_code == 413, r.text
    assert await available(client, ident, acc["id"]) == 1000
    assert await fee_count(container.db, acc["id"]) == 0
    longest = "r" * 255
    r = await charge(client, ident, acc["id"], ref=longest)
    assert r.status_code == 200, r.text
    again = await charge(client, ident, acc["id"], ref=longest)
    assert (again.status_code, again.content) == (200, r.content)
    assert await available(client, ident, acc["id"]) == 900


async def test_a_ref_replayed_on_the_other_version_answers_in_that_versions_shape(
    client, programme, container
):
    p = await programme()
    ident, acc = await funded(client, p)
    key = ref()
    first = await charge(client, ident, acc["id"], V29, ref=key)
    assert first.status_code == 200, first.text
    # /3.29.1/multi is the same version as /multi: a plain replay.
    r = await charge(client, ident, acc["id"], "/3.29.1/multi", ref=key)
    assert (r.status_code, r.content) == (200, first.content)
    # One effect either way; the answer is the 3.1.0 one (204, no body) or a refusal.
    r = await charge(client, ident, acc["id"], V31, ref=key)
    assert r.status_code in (204, 400), (r.status_code, r.text)
    if r.status_code == 204:
        assert r.content == b""
    key = ref()
    first = await charge(client, ident, acc["id"], V31, ref=key)
    assert first.status_code == 204, first.text
    r = await charge(client, ident, acc["id"], V29, ref=key)
    assert r.status_code in (200, 400), (r.status_code, r.text)
    if r.status_code == 200:
        assert_charge_fee(r.json(), acc, 100)
    assert await available(client, ident, acc["id"]) == 800
    assert await fee_count(container.db, acc["id"]) == 2


@pytest.mark.parametrize("base", [V29, V31])
async def test_a_refused_charge_does_not_burn_its_ref(
    client, programme, container, admin_headers, base
):
    p = await programme()
    ident, acc = await funded(client, p, "corporates", base, amount=60)
    key = ref()
    # Neither a malformed request nor a refused charge is stored as the ref's answer.
    r = await charge(client, ident, acc["id"], base, ref=key, body={"feeType": "ADMIN_FEE"})
    assert r.status_code == 400, r.text
    for _ in range(2):
        r = await charge(client, ident, acc["id"], base, ref=key)
        assert r.status_code == 409, r.text
        assert r.json() == {"errorCode": "FUNDS_INSUFFICIENT"}
    assert await available(client, ident, acc["id"]) == 60

    await deposit(client, p, acc["id"], 40)
    first = await charge(client, ident, acc["id"], base, ref=key)
    assert first.status_code == (204 if base == V31 else 200), first.text
    if base == V29:
        assert_charge_fee(first.json(), acc, 100)
    again = await charge(client, ident, acc["id"], base, ref=key)
    assert (again.status_code, again.content) == (first.status_code, first.content)
    assert await available(client, ident, acc["id"]) == 0
    assert await fee_count(container.db, acc["id"]) == 1
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize("base", [V29, V31])
async def test_a_blocked_account_is_not_an_instrument_to_charge(client, programme, container, base):
    """A charge needs an ACTIVE source: a blocked account is UNRESOLVED_INSTRUMENT and keeps
    its money; unblocked, it is charged again."""
    p = await programme()
    ident, acc = await funded(client, p, base=base)
    r = await client.post(f"{base}/managed_accounts/{acc['id']}/block", headers=ident.headers)
    assert r.status_code == 204, r.text
    r = await charge(client, ident, acc["id"], base)
    assert r.status_code == 409, r.text
    assert r.json() == {"errorCode": "UNRESOLVED_INSTRUMENT"}
    assert await available(client, ident, acc["id"]) == 1000
    assert await revenue(container.db, p) == 0
    r = await client.post(f"{base}/managed_accounts/{acc['id']}/unblock", headers=ident.headers)
    assert r.status_code == 204, r.text
    r = await charge(client, ident, acc["id"], base)
    assert r.status_code in (200, 204), r.text
    assert await available(client, ident, acc["id"]) < 1000


# Decision 0024: on PostgreSQL a charge with a ref sends its session renewal and claim with its
# commit, after its reads; decision 0033: on SQLite the INSERT of its answer checks its session
# and its ref. What a client sees must not depend on that.


@pytest.mark.parametrize("base", [V29, V31])
async def test_a_replay_answers_the_first_charge_even_where_a_new_one_would_be_refused(
    client, programme, container, admin_headers, base
):
    p = await programme()
    ident, acc = await funded(client, p, "corporates", base, amount=100)
    first_ref, second_ref = ref(), ref()
    first = await charge(client, ident, acc["id"], base, ref=first_ref)
    assert first.status_code == (204 if base == V31 else 200), first.text
    # The account is empty: a new charge is refused at its movement (sent with the commit).
    again = await charge(client, ident, acc["id"], base, ref=first_ref)
    assert (again.status_code, again.content) == (first.status_code, first.content)
    second = await charge(client, ident, acc["id"], base, ref=second_ref)
    assert (second.status_code, second.json()) == (409, {"errorCode": "FUNDS_INSUFFICIENT"})
    # The account is gone: a new charge is refused by its reads, before anything is sent.
    r = await client.post(
        f"/3.1.0/multi/managed_accounts/{acc['id']}/remove", headers=ident.headers
    )
    assert r.status_code == 204, r.text
    again = await charge(client, ident, acc["id"], base, ref=first_ref)
    assert (again.status_code, again.content) == (first.status_code, first.content)
    r = await charge(client, ident, acc["id"], base, ref=second_ref)  # not burnt by its refusal
    assert (r.status_code, r.json()) == (409, {"errorCode": "UNRESOLVED_INSTRUMENT"})
    # Another payload under the first ref, even one that fails validation, is the mismatch.
    r = await charge(client, ident, acc["id"], base, ref=first_ref, body={"feeType": "ADMIN_FEE"})
    assert (r.status_code, r.json()["message"]) == (400, PAYLOAD_MISMATCH)
    assert await fee_count(container.db, acc["id"]) == 1
    await ledger_ok(client, admin_headers, p)


async def end_sessions_behind_its_back(
    client: Any, container: Any, ident: Any, p: Any, base: str
) -> None:
    """The programme's sessions ended as another process would end them, while this process
    still remembers the caller's as live (it has just read with it)."""
    me = await client.get(f"{base}/corporates", headers=ident.headers)
    assert me.status_code == 200
    async with container.db.engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE auth_sessions SET ended_at = 1 WHERE programme_id = :p AND ended_at IS NULL"
            ),
            {"p": int(p.id)},
        )


async def test_a_session_ended_elsewhere_is_refused_with_nothing_charged(
    client, programme, container, admin_headers
):
    """Ended by another process (here: behind this process's back, while it still remembers
    the session as live): the renewal that goes with the charge's commit refuses it."""
    p = await programme()
    ident, acc = await funded(client, p, "corporates", V29, amount=1000)
    await end_sessions_behind_its_back(client, container, ident, p, V29)
    r = await charge(client, ident, acc["id"], V29, ref=ref())
    assert r.status_code == 401, r.text
    r = await client.get(f"{V29}/corporates", headers=ident.headers)
    assert r.status_code == 401  # and forgotten here
    assert await fee_count(container.db, acc["id"]) == 0
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize("base", [V29, V31])
async def test_a_session_ended_elsewhere_is_the_answer_before_a_refusal(
    client, programme, container, admin_headers, base
):
    """A charge that would be refused (too little money) by a session ended behind this
    process's back is a 401, not the refusal: the session is checked before a refusal is
    answered, where it was not checked before the charge ran (decisions 0024, 0033)."""
    p = await programme()
    ident, acc = await funded(client, p, "corporates", base, amount=50)
    await end_sessions_behind_its_back(client, container, ident, p, base)
    r = await charge(client, ident, acc["id"], base, ref=ref())
    assert r.status_code == 401, r.text
    assert await fee_count(container.db, acc["id"]) == 0
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize("base", [V29, V31])
async def test_a_charge_follows_changes_made_since_the_last_one(
    client, programme, container, admin_headers, base
):
    """A process remembers what a charge looked up, and the next charge of the same kind checks
    it in its movement (decisions 0024, 0033): a change since (the account blocked, the fee
    type's amounts replaced) is what the next charge follows."""
    p = await programme()
    await create_fee_type(client, admin_headers, p, "MONTHLY", {"DEFAULT": {"EUR": 10}})
    ident, acc = await funded(client, p, base=base)
    for _ in range(2):
        r = await charge(client, ident, acc["id"], base, fee_type="MONTHLY")
        assert r.status_code in (200, 204), r.text
    assert await available(client, ident, acc["id"]) == 980
    r = await client.post(f"{base}/managed_accounts/{acc['id']}/block", headers=ident.headers)
    assert r.status_code == 204, r.text
    r = await charge(client, ident, acc["id"], base, fee_type="MONTHLY", ref=ref())
    assert (r.status_code, r.json()) == (409, {"errorCode": "UNRESOLVED_INSTRUMENT"})
    assert await available(client, ident, acc["id"]) == 980
    r = await client.post(f"{base}/managed_accounts/{acc['id']}/unblock", headers=ident.headers)
    assert r.status_code == 204, r.text
    r = await charge(client, ident, acc["id"], base, fee_type="MONTHLY")
    assert r.status_code in (200, 204), r.text
    assert await available(client, ident, acc["id"]) == 970
    r = await client.put(
        f"{PORTAL}/{p.id}/fee_types/MONTHLY",
        headers=admin_headers,
        json={"amounts": {"DEFAULT": {"EUR": 25}}},
    )
    assert r.status_code == 200, r.text
    key = ref()
    r = await charge(client, ident, acc["id"], base, fee_type="MONTHLY", ref=key)
    assert r.status_code in (200, 204), r.text
    if base == V29:
        assert r.json()["availableBalanceAdjustment"] == {"currency": "EUR", "amount": -25}
    again = await charge(client, ident, acc["id"], base, fee_type="MONTHLY", ref=key)
    assert (again.status_code, again.content) == (r.status_code, r.content)
    assert await available(client, ident, acc["id"]) == 945
    assert await fee_count(container.db, acc["id"]) == 4
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize("with_ref", [False, True])
async def test_a_session_ended_elsewhere_is_the_answer_before_a_malformed_body_or_a_card(
    client, programme, container, admin_headers, with_ref
):
    """On PostgreSQL the charge's session check waits for its one statement (decision 0064);
    where no such statement is sent (a body refused before the charge runs, a card's charge,
    which checks first), the check still answers first: 401, nothing charged, no ref kept."""
    p = await programme()
    ident, acc = await funded(client, p, "corporates", V29, amount=1000)
    await end_sessions_behind_its_back(client, container, ident, p, V29)
    malformed = {"feeType": "ADMIN_FEE", "source": {"type": "managed_accounts", "id": "abc"}}
    card = {"feeType": "ADMIN_FEE", "source": {"type": "managed_cards", "id": "123"}}
    for body in (malformed, card):
        r = await charge(client, ident, acc["id"], V29, body=body, ref=ref() if with_ref else None)
        assert r.status_code == 401, (body, r.text)
    assert await fee_count(container.db, acc["id"]) == 0
    async with container.db.engine.connect() as conn:
        refs = (
            await conn.execute(
                text("SELECT count(*) FROM idempotency_records WHERE programme_id = :p"),
                {"p": int(p.id)},
            )
        ).scalar_one()
    assert refs == 0
    await ledger_ok(client, admin_headers, p)


async def test_a_ref_taken_is_replayed_before_a_malformed_body_is_refused(
    client, programme, container
):
    """A ref's first answer is replayed for the same payload; a different payload under it is
    the 400 of a mismatch, as when the claim went before everything (decision 0064)."""
    p = await programme()
    ident, acc = await funded(client, p, "corporates", V29, amount=1000)
    key = ref()
    first = await charge(client, ident, acc["id"], V29, ref=key)
    assert first.status_code == 200, first.text
    again = await charge(client, ident, acc["id"], V29, ref=key)
    assert (again.status_code, again.content) == (first.status_code, first.content)
    other = await charge(client, ident, acc["id"], V29, ref=key, fee_type="NO_SUCH_FEE")
    assert other.status_code == 400, other.text
    assert await available(client, ident, acc["id"]) == 900
