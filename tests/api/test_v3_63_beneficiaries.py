"""Trusted beneficiaries on the 3.63 line (issue 43 §3, v3.63.md §2, D38, decision 0088),
black-box over HTTP: batches validated at create (each beneficiary's validation failure), the
batch's challenge by SMS and push (the simulator's beneficiary_management paths), remove
batches, the lists and their filters, paying a beneficiary without SCA (sends to an instrument,
wire transfers to bank details) and each refusal, the events, the 400s, the refused callers."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.fees_support import ledger_ok
from tests.api.payments_support import balances, customer, enrol_push, settings
from tests.api.test_card_funding import events
from tests.api.test_outgoing_wire_transfers import body as owt_body
from tests.api.webhook_support import receiving
from tests.conftest import Prog
from tests.factories import CODE, Identity, sign_up

LINE = "/3.63.4/multi"
IBAN = "DE89370400440532013000"
FUNDS = 100_000
AMOUNT = 5_000


def instrument(account: str, name: str, **over: Any) -> dict[str, Any]:
    return {
        "trustLevel": "TRUSTED",
        "beneficiaryInformation": {"businessName": name},
        "beneficiaryDetails": {"instrument": {"type": "managed_accounts", "id": account}},
        **over,
    }


def sepa(iban: str = IBAN, **over: Any) -> dict[str, Any]:
    return {
        "trustLevel": "TRUSTED",
        "beneficiaryInformation": {"fullName": "Ada Lovelace"},
        "beneficiaryDetails": {
            "bankCountry": "DE",
            "bankAccountDetails": {"iban": iban, "bankIdentifierCode": "COBADEFFXXX"},
        },
        **over,
    }


def company(ident: Identity) -> str:
    return str(ident.body["company"]["name"])


async def add(
    client: httpx.AsyncClient, ident: Identity, *items: dict[str, Any], tag: str | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"beneficiaries": list(items)}
    if tag:
        body["tag"] = tag
    r = await client.post(f"{LINE}/beneficiaries", headers=ident.headers, json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def batch(client: httpx.AsyncClient, ident: Identity, batch_id: str) -> dict[str, Any]:
    r = await client.get(f"{LINE}/beneficiaries/batch/{batch_id}", headers=ident.headers)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def members(client: httpx.AsyncClient, ident: Identity, batch_id: str) -> list[dict]:
    r = await client.get(
        f"{LINE}/beneficiaries", headers=ident.headers, params={"batchId": batch_id}
    )
    assert r.status_code == 200, r.text
    return list(reversed(r.json()["beneficiaries"]))  # newest first: as added


async def confirm(client: httpx.AsyncClient, ident: Identity, batch_id: str) -> None:
    otp = f"{LINE}/beneficiaries/batch/{batch_id}/challenges/otp/SMS"
    assert (await client.post(otp, headers=ident.headers)).status_code == 204
    r = await client.post(f"{otp}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert r.status_code == 204, r.text


async def two_customers(client: httpx.AsyncClient, p: Prog) -> tuple[Identity, str, Identity, str]:
    me, mine = await customer(client, p, funds=FUNDS)
    payee, theirs = await customer(client, p, sms=False)
    return me, mine, payee, theirs


async def test_a_batch_confirmed_by_sms_makes_its_beneficiaries_active(client, programme):
    p = await programme()
    me, _mine, payee, theirs = await two_customers(client, p)
    made = await add(client, me, instrument(theirs, company(payee), group="suppliers"), tag="t1")
    assert made["state"] == "INITIALISED"  # as observed, whatever comes next
    assert made["operationBatchId"]["operation"] == "CREATE"
    batch_id = made["operationBatchId"]["batchId"]
    assert (await batch(client, me, batch_id))["state"] == "PENDING_CHALLENGE"
    [b] = await members(client, me, batch_id)
    assert (b["state"], b["trustLevel"], b["group"]) == (
        "PENDING_CHALLENGE",
        "TRUSTED",
        "suppliers",
    )
    assert b["relatedOperationBatches"] == [{"batchId": batch_id, "operation": "CREATE"}]
    otp = f"{LINE}/beneficiaries/batch/{batch_id}/challenges/otp/SMS"
    assert (await client.post(otp, headers=me.headers)).status_code == 204
    r = await client.post(otp, headers=me.headers)  # a second start of a started challenge
    assert (r.status_code, r.json()) == (409, {"errorCode": "STATE_INVALID"})
    r = await client.post(f"{otp}/verify", headers=me.headers, json={"verificationCode": CODE})
    assert r.status_code == 204, r.text
    assert (await batch(client, me, batch_id))["state"] == "COMPLETED"
    r = await client.get(f"{LINE}/beneficiaries/{b['id']}", headers=me.headers)
    assert r.json()["state"] == "ACTIVE"
    r = await client.post(f"{otp}/verify", headers=me.headers, json={"verificationCode": CODE})
    assert (r.status_code, r.json()) == (409, {"errorCode": "STATE_INVALID"})


async def test_each_beneficiary_is_validated_at_create(client, programme):
    p = await programme()
    me, mine, payee, theirs = await two_customers(client, p)
    made = await add(
        client,
        me,
        instrument("999999", "Nobody Ltd"),
        instrument(theirs, "Someone Else Ltd"),
        instrument(mine, company(me)),
        instrument(theirs, company(payee).upper() + "  "),  # case and spaces do not matter
        instrument(theirs, company(payee)),  # the same instrument twice in one batch
        sepa(),
    )
    states = [
        (b["state"], b.get("validationFailure"))
        for b in await members(client, me, made["operationBatchId"]["batchId"])
    ]
    assert states == [
        ("INVALID", "INSTRUMENT_DETAILS_NOT_FOUND"),
        ("INVALID", "INSTRUMENT_DETAILS_NOT_FOUND"),
        ("INVALID", "BENEFICIARY_BELONGS_TO_SAME_IDENTITY"),
        ("PENDING_CHALLENGE", None),
        ("INVALID", "BENEFICIARY_DETAILS_ALREADY_EXIST"),
        ("PENDING_CHALLENGE", None),
    ]
    batch_id = made["operationBatchId"]["batchId"]
    assert (await batch(client, me, batch_id))["state"] == "PENDING_CHALLENGE"
    # The same details while the first waits: invalid, so the batch fails.
    again = await add(client, me, sepa())
    assert (await batch(client, me, again["operationBatchId"]["batchId"]))["state"] == "FAILED"
    await confirm(client, me, batch_id)
    assert [b["state"] for b in await members(client, me, batch_id)] == [
        "INVALID",
        "INVALID",
        "INVALID",
        "ACTIVE",
        "INVALID",
        "ACTIVE",
    ]


async def test_malformed_beneficiaries_are_400_and_make_nothing(client, programme):
    p = await programme()
    me, _ = await customer(client, p)
    bad = [
        [],
        [sepa("DE00370400440532013000")],  # check digits
        [sepa("de89370400440532013000")],
        [{**sepa(), "trustLevel": "UNTRUSTED"}],
        [{**sepa(), "beneficiaryInformation": {}}],
        [{**sepa(), "beneficiaryInformation": {"businessName": "A", "fullName": "B"}}],
        [
            {
                **sepa(),
                "beneficiaryDetails": {"bankCountry": "de", "bankAccountDetails": {"iban": IBAN}},
            }
        ],
        [
            {
                **sepa(),
                "beneficiaryDetails": {"address": "x" * 151, "bankAccountDetails": {"iban": IBAN}},
            }
        ],
        [
            {
                **sepa(),
                "beneficiaryDetails": {
                    "bankAccountDetails": {"accountNumber": "1234", "sortCode": "400400"}
                },
            }
        ],
        [{**sepa(), "beneficiaryDetails": {"bankAccountDetails": {"accountNumber": "12345678"}}}],
        [
            {
                **sepa(),
                "beneficiaryDetails": {
                    "instrument": {"type": "managed_accounts", "id": "1"},
                    "bankAccountDetails": {"iban": IBAN},
                },
            }
        ],
        [sepa()] * 101,
    ]
    for items in bad:
        r = await client.post(
            f"{LINE}/beneficiaries", headers=me.headers, json={"beneficiaries": items}
        )
        assert r.status_code == 400, (items[:1], r.text)
    r = await client.get(f"{LINE}/beneficiaries/batch", headers=me.headers)
    assert r.json()["count"] == 0


async def test_remove_batches_take_the_active_ones(client, programme):
    p = await programme()
    me, _mine, payee, theirs = await two_customers(client, p)
    made = await add(client, me, sepa(), sepa("GB82WEST12345698765432"))
    batch_id = made["operationBatchId"]["batchId"]
    active, waiting = [b["id"] for b in await members(client, me, batch_id)]
    await confirm(client, me, batch_id)
    pending = await add(client, me, instrument(theirs, company(payee)))
    [pending_id] = [
        b["id"] for b in await members(client, me, pending["operationBatchId"]["batchId"])
    ]
    r = await client.post(
        f"{LINE}/beneficiaries/remove",
        headers=me.headers,
        json={"beneficiaryIds": [active, pending_id]},
    )
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["operationBatchId"]["operation"]) == (
        "PENDING_CHALLENGE",
        "REMOVE",
    )
    remove_id = r.json()["operationBatchId"]["batchId"]
    # In an open remove batch it cannot be in another; none ACTIVE left to take: 404.
    r = await client.post(
        f"{LINE}/beneficiaries/remove",
        headers=me.headers,
        json={"beneficiaryIds": [active, pending_id, "99999"]},
    )
    assert r.status_code == 404
    await confirm(client, me, remove_id)
    r = await client.get(f"{LINE}/beneficiaries/{active}", headers=me.headers)
    assert r.json()["state"] == "REMOVED"
    assert {"batchId": remove_id, "operation": "REMOVE"} in r.json()["relatedOperationBatches"]
    r = await client.get(f"{LINE}/beneficiaries/{pending_id}", headers=me.headers)
    assert r.json()["state"] == "PENDING_CHALLENGE"
    r = await client.get(f"{LINE}/beneficiaries/{waiting}", headers=me.headers)
    assert r.json()["state"] == "ACTIVE"
    # Removed, its details may be added again at once.
    again = await add(client, me, sepa())
    assert (await batch(client, me, again["operationBatchId"]["batchId"]))[
        "state"
    ] == "PENDING_CHALLENGE"
    for ids in ([], [None], ["abc"], [""]):
        r = await client.post(
            f"{LINE}/beneficiaries/remove", headers=me.headers, json={"beneficiaryIds": ids}
        )
        assert r.status_code == 400, ids


async def test_wrong_codes_fail_the_batch(client, programme):
    p = await programme()
    me, _ = await customer(client, p)
    made = await add(client, me, sepa())
    batch_id = made["operationBatchId"]["batchId"]
    otp = f"{LINE}/beneficiaries/batch/{batch_id}/challenges/otp/SMS"
    assert (await client.post(otp, headers=me.headers)).status_code == 204
    answers = [
        (
            await client.post(
                f"{otp}/verify", headers=me.headers, json={"verificationCode": "000000"}
            )
        ).json()["errorCode"]
        for _ in range(5)
    ]
    assert answers[-2:] == ["ONE_CHALLENGE_LIMIT_REMAINING", "CHALLENGE_LIMIT_EXCEEDED"]
    assert (await batch(client, me, batch_id))["state"] == "CHALLENGE_FAILED"
    assert [b["state"] for b in await members(client, me, batch_id)] == ["CHALLENGE_FAILED"]
    # A failed challenge's details may be added again.
    again = await add(client, me, sepa())
    assert (await batch(client, me, again["operationBatchId"]["batchId"]))[
        "state"
    ] == "PENDING_CHALLENGE"


async def test_a_push_answered_by_the_simulator(client, programme):
    p = await programme()
    me, _ = await customer(client, p)
    sim = {"programme-key": p.api_key}
    first = (await add(client, me, sepa()))["operationBatchId"]["batchId"]
    push = f"{LINE}/beneficiaries/batch/{first}/challenges/push/AUTHY"
    r = await client.post(push, headers=me.headers)
    assert (r.status_code, r.json()) == (409, {"errorCode": "CHANNEL_NOT_REGISTERED"})
    await enrol_push(client, me.headers, "AUTHY")
    assert (await client.post(push, headers=me.headers)).status_code == 204
    r = await client.post(f"/simulate/api/okay/beneficiary_management/{first}/accept", headers=sim)
    assert (r.status_code, r.json()) == (409, {"errorCode": "REQUEST_NOT_FOUND"})
    r = await client.post("/simulate/api/authy/beneficiary_management/123/accept", headers=sim)
    assert (r.status_code, r.json()) == (409, {"errorCode": "NOT_FOUND"})
    r = await client.post(f"/simulate/api/authy/beneficiary_management/{first}/reject", headers=sim)
    assert r.status_code == 204, r.text
    assert (await batch(client, me, first))["state"] == "CHALLENGE_FAILED"
    r = await client.post(f"/simulate/api/authy/beneficiary_management/{first}/accept", headers=sim)
    assert (r.status_code, r.json()) == (409, {"errorCode": "ALREADY_COMPLETED"})
    second = (await add(client, me, sepa()))["operationBatchId"]["batchId"]
    push = f"{LINE}/beneficiaries/batch/{second}/challenges/push/AUTHY"
    assert (await client.post(push, headers=me.headers)).status_code == 204
    r = await client.post(
        f"/simulate/api/authy/beneficiary_management/{second}/accept", headers=sim
    )
    assert r.status_code == 204, r.text
    assert [b["state"] for b in await members(client, me, second)] == ["ACTIVE"]


async def test_lists_filter_and_page(client, programme):
    p = await programme()
    me, _ = await customer(client, p)
    one = (await add(client, me, sepa(group="rent"), tag="a"))["operationBatchId"]["batchId"]
    two = (await add(client, me, sepa("GB82WEST12345698765432", group="travel"), tag="b"))[
        "operationBatchId"
    ]["batchId"]
    await confirm(client, me, one)
    r = await client.get(f"{LINE}/beneficiaries", headers=me.headers, params={"group": "travel"})
    assert [b["group"] for b in r.json()["beneficiaries"]] == ["travel"]
    r = await client.get(f"{LINE}/beneficiaries", headers=me.headers, params={"limit": 1})
    assert (r.json()["count"], r.json()["responseCount"]) == (2, 1)
    r = await client.get(
        f"{LINE}/beneficiaries/batch", headers=me.headers, params={"state": "COMPLETED"}
    )
    assert [b["operationBatchId"]["batchId"] for b in r.json()["batches"]] == [one]
    r = await client.get(f"{LINE}/beneficiaries/batch", headers=me.headers, params={"tag": "b"})
    assert [b["operationBatchId"]["batchId"] for b in r.json()["batches"]] == [two]
    r = await client.get(
        f"{LINE}/beneficiaries/batch", headers=me.headers, params={"operation": "REMOVE"}
    )
    assert r.json()["count"] == 0
    for params in ({"limit": 0}, {"limit": 101}, {"offset": -1}):
        assert (
            await client.get(f"{LINE}/beneficiaries", headers=me.headers, params=params)
        ).status_code == 400


async def test_a_trusted_beneficiary_is_paid_without_sca(client, programme, admin_headers):
    p = await programme()
    me, mine, payee, theirs = await two_customers(client, p)
    made = await add(client, me, instrument(theirs, company(payee)), sepa())
    batch_id = made["operationBatchId"]["batchId"]
    account_b, bank_b = [b["id"] for b in await members(client, me, batch_id)]
    send = {
        "profileId": p.profiles["sends"],
        "source": {"type": "managed_accounts", "id": mine},
        "destination": {"beneficiaryId": account_b},
        "destinationAmount": {"currency": "EUR", "amount": AMOUNT},
    }
    # Not ACTIVE yet: the type is "invalid" (as observed).
    r = await client.post(f"{LINE}/sends", headers=me.headers, json=send)
    assert (r.status_code, r.json()) == (409, {"errorCode": "BENEFICIARY_TYPE_INVALID"})
    await confirm(client, me, batch_id)
    r = await client.post(f"{LINE}/sends", headers=me.headers, json=send)
    assert r.status_code == 200, r.text
    s = r.json()
    assert (s["state"], s["challengeExemptionReason"]) == ("COMPLETED", "TRUSTED_BENEFICIARY")
    assert s["destination"] == {"beneficiaryId": account_b}
    assert await balances(client, payee, theirs) == (AMOUNT, AMOUNT)
    # 3.29.1 shows the instrument it paid.
    old = (await client.get(f"/multi/sends/{s['id']}", headers=me.headers)).json()
    assert old["destination"] == {"type": "managed_accounts", "id": theirs}
    for beneficiary, code in (
        ("999999", "BENEFICIARY_NOT_FOUND"),
        (bank_b, "BENEFICIARY_TYPE_INVALID"),
    ):
        r = await client.post(
            f"{LINE}/sends",
            headers=me.headers,
            json={**send, "destination": {"beneficiaryId": beneficiary}},
        )
        assert r.json() == {"errorCode": code}, beneficiary
    r = await client.post(
        f"{LINE}/sends", headers=me.headers, json={**send, "destination": {"beneficiaryId": ""}}
    )
    assert r.status_code == 400
    # A wire transfer to the bank-details one: submitted at once.
    wire = owt_body(p, mine)
    wire["destinationBeneficiary"] = {"beneficiaryId": bank_b}
    r = await client.post(f"{LINE}/outgoing_wire_transfers", headers=me.headers, json=wire)
    assert r.status_code == 200, r.text
    o = r.json()
    assert (o["state"], o["challengeExemptionReason"]) == ("SUBMITTED", "TRUSTED_BENEFICIARY")
    assert o["destination"] == {"beneficiaryId": bank_b}
    old = (await client.get(f"/multi/outgoing_wire_transfers/{o['id']}", headers=me.headers)).json()
    assert old["destination"]["bankAccountDetails"]["iban"] == IBAN
    wire["destinationBeneficiary"] = {"beneficiaryId": account_b}
    r = await client.post(f"{LINE}/outgoing_wire_transfers", headers=me.headers, json=wire)
    assert r.json() == {"errorCode": "BENEFICIARY_TYPE_INVALID"}
    await ledger_ok(client, admin_headers, p)


async def test_the_events_of_a_batch(client, programme, admin_headers):
    with receiving() as receiver:
        p = await programme()
        await settings(client, admin_headers, p, webhookUrl=receiver.url)
        me, _ = await customer(client, p)
        ok = (await add(client, me, sepa()))["operationBatchId"]["batchId"]
        bad = (await add(client, me, instrument("999999", "Nobody")))["operationBatchId"]["batchId"]
        await confirm(client, me, ok)
        sent = list(reversed(await events(client, admin_headers, p, "beneficiaries/batch")))
    by = [(e["id"], e["eventType"]) for e in sent]
    assert by == [(ok, "PENDING_CHALLENGE"), (bad, "FAILED"), (ok, "CHALLENGE_COMPLETED")]
    first = sent[0]["beneficiaries"][0]
    assert first["validationFailure"] == "BENEFICIARY_VALIDATION_FAILURE_UNKNOWN"
    assert (
        first["beneficiaryDetails"]["bankAccountDetailsBeneficiary"]["sepaBankDetails"]["iban"]
        == IBAN
    )
    assert sent[1]["beneficiaries"][0]["validationFailure"] == "INSTRUMENT_DETAILS_NOT_FOUND"
    assert sent[2]["beneficiaries"][0]["state"] == "ACTIVE"


async def test_every_operation_refuses_every_caller_but_the_owner(client, programme):
    p, other = await programme(), await programme()
    me, _ = await customer(client, p)
    stranger = await sign_up(client, p, base=LINE)
    batch_id = (await add(client, me, sepa()))["operationBatchId"]["batchId"]
    [b] = await members(client, me, batch_id)
    ops = [
        ("POST", "/beneficiaries", {"beneficiaries": [sepa()]}),
        ("GET", "/beneficiaries", None),
        ("GET", f"/beneficiaries/{b['id']}", None),
        ("POST", "/beneficiaries/remove", {"beneficiaryIds": [b["id"]]}),
        ("GET", "/beneficiaries/batch", None),
        ("GET", f"/beneficiaries/batch/{batch_id}", None),
        ("POST", f"/beneficiaries/batch/{batch_id}/challenges/otp/SMS", None),
        (
            "POST",
            f"/beneficiaries/batch/{batch_id}/challenges/otp/SMS/verify",
            {"verificationCode": CODE},
        ),
        ("POST", f"/beneficiaries/batch/{batch_id}/challenges/push/AUTHY", None),
    ]
    for method, path, json in ops:
        url = f"{LINE}{path}"
        r = await client.request(
            method, url, headers={"Authorization": me.headers["Authorization"]}, json=json
        )
        assert r.status_code == 400, (path, r.status_code)
        assert (
            await client.request(
                method, url, headers={**me.headers, "api-key": "mb_sbx_nope"}, json=json
            )
        ).status_code == 401
        assert (
            await client.request(
                method, url, headers={**me.headers, "api-key": other.api_key}, json=json
            )
        ).status_code == 403
        assert (await client.request(method, url, headers=p.headers, json=json)).status_code == 401
        for base in ("/multi", "/3.29.1/multi", "/3.1.0/multi"):
            r = await client.request(method, f"{base}{path}", headers=me.headers, json=json)
            assert r.status_code == 404, (base, path)
    # Another identity of the programme: not found, and nothing changes.
    for method, path, json in ops[2:3] + ops[5:]:
        r = await client.request(method, f"{LINE}{path}", headers=stranger.headers, json=json)
        assert r.status_code == 404, (path, r.status_code)
    r = await client.post(
        f"{LINE}/beneficiaries/remove", headers=stranger.headers, json={"beneficiaryIds": [b["id"]]}
    )
    assert r.status_code == 404
    assert (await batch(client, me, batch_id))["state"] == "PENDING_CHALLENGE"
