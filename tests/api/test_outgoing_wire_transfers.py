"""Outgoing wire transfers (money-movement.md §1.4, D12 to D14): from an account with an IBAN to
an external beneficiary, by SEPA (EUR) or Faster Payments (GBP).

Black-box over HTTP: the hold, SCA, `SUBMITTED` → `APPROVED` → `COMPLETED` on the programme clock,
the statement entry, the 400s of the beneficiary and the scheme, the 409s (and those kept as
`INVALID`, out of sight), the sandbox's canned IBANs, the simulator's accept, reject and return,
the list.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from multibank.payments.models import Payment
from tests.api.fees_support import ledger_ok, revenue
from tests.api.payments_support import (
    advance,
    balances,
    customer,
    enrol_push,
    entries,
    profile,
    settings,
    simulate,
)
from tests.conftest import Prog
from tests.factories import CODE, Identity, open_account

FUNDS = 100_000
AMOUNT = 5_000
FEE = 100  # the default wire transfer fee (D12)
IBAN = "DE89370400440532013000"
BIC = "COBADEFFXXX"
CANNED = "WV38WEAV50201555"
OWT = "/multi/outgoing_wire_transfers"


def sepa(iban: str = IBAN, bic: str = BIC) -> dict[str, Any]:
    return {"iban": iban, "bankIdentifierCode": bic}


FPS = {"accountNumber": "12345678", "sortCode": "400400"}


def body(
    p: Prog,
    source: str,
    amount: int = AMOUNT,
    currency: str = "EUR",
    details: dict[str, Any] | None = None,
    **over: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "profileId": p.profiles["outgoingWireTransfers"],
        "sourceInstrument": {"type": "managed_accounts", "id": source},
        "transferAmount": {"currency": currency, "amount": amount},
        "description": "Invoice 42",
        "destinationBeneficiary": {
            "name": "Ada Lovelace",
            "address": "1 Analytical Row, London",
            "bankName": "Example Bank",
            "bankCountry": "DE",
            "bankAccountDetails": details or sepa(),
        },
    }
    out.update(over)
    return out


async def create(
    client: httpx.AsyncClient, ident: Identity, json: dict[str, Any], ref: str | None = None
) -> httpx.Response:
    headers = dict(ident.headers)
    if ref:
        headers["idempotency-ref"] = ref
    return await client.post(OWT, headers=headers, json=json)


async def created(client: httpx.AsyncClient, ident: Identity, json: dict[str, Any]) -> str:
    r = await create(client, ident, json)
    assert r.status_code == 200, r.text
    owt_id: str = r.json()["id"]
    return owt_id


async def get(client: httpx.AsyncClient, ident: Identity, owt_id: str) -> dict[str, Any]:
    r = await client.get(f"{OWT}/{owt_id}", headers=ident.headers)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def state(client: httpx.AsyncClient, ident: Identity, owt_id: str) -> str:
    value: str = (await get(client, ident, owt_id))["state"]
    return value


async def confirm(client: httpx.AsyncClient, ident: Identity, owt_id: str) -> None:
    otp = f"{OWT}/{owt_id}/challenges/otp/SMS"
    assert (await client.post(otp, headers=ident.headers)).status_code == 204
    r = await client.post(f"{otp}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert r.status_code == 204, r.text


async def test_a_sepa_transfer_from_challenge_to_completion(
    client, programme, container, admin_headers
):
    p = await programme()
    ident, acc = await customer(client, p, funds=FUNDS)
    r = await create(client, ident, body(p, acc, tag="supplier-7"))
    assert r.status_code == 200, r.text
    owt = r.json()
    assert owt == {
        "id": owt["id"],
        "profileId": p.profiles["outgoingWireTransfers"],
        "tag": "supplier-7",
        "sourceInstrument": {"type": "managed_accounts", "id": acc},
        "transferAmount": {"currency": "EUR", "amount": AMOUNT},
        "description": "Invoice 42",
        "type": "SEPA",
        "destination": body(p, acc)["destinationBeneficiary"],
        "state": "PENDING_CHALLENGE",
        "creationTimestamp": owt["creationTimestamp"],
    }
    assert await balances(client, ident, acc) == (FUNDS - AMOUNT - FEE, FUNDS)
    await ledger_ok(client, admin_headers, p)

    await confirm(client, ident, owt["id"])
    assert await state(client, ident, owt["id"]) == "SUBMITTED"
    await advance(client, p, 1)
    assert await state(client, ident, owt["id"]) == "APPROVED"
    await advance(client, p, 2)  # the programme's processing delay (D14)
    assert await state(client, ident, owt["id"]) == "COMPLETED"
    assert await balances(client, ident, acc) == (FUNDS - AMOUNT - FEE,) * 2
    assert await revenue(container.db, p) == FEE

    [entry] = [
        e for e in await entries(client, ident, acc) if e["transactionId"]["type"] != "DEPOSIT"
    ]
    assert entry["transactionId"] == {"type": "OUTGOING_WIRE_TRANSFER", "id": owt["id"]}
    assert entry["entryState"] == "COMPLETED"
    assert entry["transactionAmount"] == {"currency": "EUR", "amount": -AMOUNT}
    assert entry["availableBalanceAdjustment"]["amount"] == -(AMOUNT + FEE)
    assert entry["actualBalanceAdjustment"]["amount"] == -(AMOUNT + FEE)
    assert entry["cardholderFee"] == {"currency": "EUR", "amount": FEE}
    # The interface's names (contract.md, StatementEntry): the account is the IBAN, the bank
    # code the BIC, the reference the description.
    assert entry["additionalFields"] == {
        "beneficiaryName": "Ada Lovelace",
        "beneficiaryAccount": IBAN,
        "beneficiaryBankCode": BIC,
        "description": "Invoice 42",
    }
    await ledger_ok(client, admin_headers, p)
    # A wire transfer past its challenge cannot be challenged again.
    otp = f"{OWT}/{owt['id']}/challenges/otp/SMS"
    r = await client.post(otp, headers=ident.headers)
    assert r.json() == {"errorCode": "STATE_INVALID"}


async def test_faster_payments_from_a_gbp_account_without_sca(client, programme, admin_headers):
    p = await programme()
    await settings(client, admin_headers, p, owtScaRequired=False)
    ident, acc = await customer(client, p, funds=FUNDS, currency="GBP")
    json = body(p, acc, currency="GBP", details=FPS, description="Rent May")
    json["destinationBeneficiary"]["name"] = "Ada Lovelace & Co."
    owt = (await create(client, ident, json)).json()
    assert (owt["type"], owt["state"]) == ("FASTER_PAYMENTS", "SUBMITTED")
    assert owt["destination"]["bankAccountDetails"] == FPS
    await advance(client, p, 1)
    await advance(client, p, 2)
    assert await state(client, ident, owt["id"]) == "COMPLETED"
    assert await balances(client, ident, acc) == (FUNDS - AMOUNT - FEE,) * 2
    # The statement names the beneficiary's account number and sort code in the interface's
    # `beneficiaryAccount` and `beneficiaryBankCode`.
    [entry] = [
        e for e in await entries(client, ident, acc) if e["transactionId"]["id"] == owt["id"]
    ]
    assert entry["additionalFields"] == {
        "beneficiaryName": "Ada Lovelace & Co.",
        "beneficiaryAccount": FPS["accountNumber"],
        "beneficiaryBankCode": FPS["sortCode"],
        "description": "Rent May",
    }
    # The reference is optional for Faster Payments.
    del json["description"]
    assert (await create(client, ident, json)).status_code == 200
    await ledger_ok(client, admin_headers, p)


async def test_a_bad_beneficiary_or_reference_is_400_and_stores_nothing(client, programme):
    p = await programme()
    ident, acc = await customer(client, p, funds=FUNDS)

    def without(json: dict[str, Any], *path: str) -> dict[str, Any]:
        target = json
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
        return json

    def beneficiary(**over: Any) -> dict[str, Any]:
        json = body(p, acc)
        json["destinationBeneficiary"].update(over)
        return json

    fps = body(p, acc, currency="GBP", details=FPS, description="ok")
    emoji_name = body(p, acc, currency="GBP", details=FPS)
    emoji_name["destinationBeneficiary"]["name"] = "Ada \U0001f600"
    bad = {
        "no beneficiary": without(body(p, acc), "destinationBeneficiary"),
        "no bank details": without(body(p, acc), "destinationBeneficiary", "bankAccountDetails"),
        "no name": without(body(p, acc), "destinationBeneficiary", "name"),
        "no source": without(body(p, acc), "sourceInstrument"),
        "no amount": without(body(p, acc), "transferAmount"),
        "blank name": beneficiary(name="   "),
        "long name": beneficiary(name="x" * 201),
        "long address": beneficiary(address="x" * 151),
        "FPS name": emoji_name,
        "SEPA without reference": without(body(p, acc), "description"),
        "SEPA long reference": body(p, acc, description="x" * 36),
        "FPS long reference": {**fps, "description": "x" * 19},
        "check digits": body(p, acc, details=sepa("DE00370400440532013000")),
        "IBAN shape": body(p, acc, details=sepa("DE89")),
        "short BIC": body(p, acc, details=sepa(bic="COBADEF")),
        "sort code": body(p, acc, details={"accountNumber": "12345678", "sortCode": "4004"}),
        "details": body(p, acc, details={"accountNumber": "12345678"}),
        "instrument type": body(p, acc, sourceInstrument={"type": "cards", "id": acc}),
    }
    for what, json in bad.items():
        r = await create(client, ident, json)
        assert r.status_code == 400, (what, r.text)
        assert "message" in r.json(), what
    r = await client.get(OWT, headers=ident.headers)
    assert r.json()["count"] == 0
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)
    # Emoji are welcome in a SEPA reference.
    assert (
        await create(client, ident, body(p, acc, description="Thanks \U0001f600"))
    ).status_code == 200


async def test_bank_details_of_both_schemes_are_a_400(client, programme):
    """Issue 32 §2.10: bank details with a SEPA and a Faster Payments part were read as SEPA
    (the sort code ignored). They are a 400 naming the field, whichever currency, and nothing
    is stored or held."""
    p = await programme()
    ident, acc = await customer(client, p, funds=FUNDS)
    gbp_ident, gbp = await customer(client, p, funds=FUNDS, currency="GBP")
    mixed = [
        {**sepa(), **FPS},
        {**sepa(), "sortCode": "400400"},
        {"iban": IBAN, **FPS},
        {"accountNumber": "12345678", **sepa()},
    ]
    for details in mixed:
        for who, source, currency in ((ident, acc, "EUR"), (gbp_ident, gbp, "GBP")):
            r = await create(client, who, body(p, source, currency=currency, details=details))
            assert r.status_code == 400, (details, r.text)
            assert r.json()["syntaxErrors"]["invalidFields"] == [
                {
                    "fieldName": "destinationBeneficiary.bankAccountDetails",
                    "error": "EXACTLY",
                    "params": ["1"],
                }
            ], r.text
            assert "exactly one scheme" in r.json()["message"]
    for who, source in ((ident, acc), (gbp_ident, gbp)):
        assert (await client.get(OWT, headers=who.headers)).json()["count"] == 0
        assert await balances(client, who, source) == (FUNDS, FUNDS)
    # Either scheme alone still goes (unknown fields are still ignored).
    assert (
        await create(client, ident, body(p, acc, details={**sepa(), "x": 1}))
    ).status_code == 200
    fps = body(p, gbp, currency="GBP", details=FPS, description="ok")
    assert (await create(client, gbp_ident, fps)).status_code == 200


async def test_refusals_before_anything_is_stored(client, programme, admin_headers):
    p = await programme()
    ident, acc = await customer(client, p, funds=FUNDS)
    _, theirs = await customer(client, p, funds=FUNDS, sms=False)
    no_iban = (await open_account(client, ident, "EUR"))["id"]
    cases = [
        (body(p, acc, profileId="999999"), "PROFILE_NOT_FOUND"),
        (body(p, acc, profileId=p.profiles["sends"]), "PROFILE_NOT_FOUND"),
        (body(p, acc, sourceInstrument={"type": "managed_cards", "id": acc}), "SOURCE_NOT_FOUND"),
        (body(p, theirs), "SOURCE_NOT_FOUND"),
        (body(p, no_iban), "IBAN_UPGRADE_REQUIRED"),
        (body(p, acc, currency="GBP", details=FPS, description="x"), "CURRENCY_MISMATCH"),
        (body(p, acc, currency="GBP"), "CURRENCY_MISMATCH"),  # SEPA is EUR
    ]
    for json, code in cases:
        r = await create(client, ident, json)
        assert (r.status_code, r.json()) == (409, {"errorCode": code}), (code, r.text)
    assert (await client.get(OWT, headers=ident.headers)).json()["count"] == 0
    await profile(client, admin_headers, p, "outgoingWireTransfers", active=False)
    r = await create(client, ident, body(p, acc))
    assert r.json() == {"errorCode": "PROFILE_INACTIVE"}


async def invalid_ids(container: Any, p: Prog) -> list[str]:
    """The programme's wire transfers kept `INVALID`: no client answer names them (D12a), so
    the test reads their ids where the server keeps them."""
    async with container.db.transaction() as s:
        rows = await s.execute(
            select(Payment.id).where(Payment.programme_id == int(p.id), Payment.state == "INVALID")
        )
        return [str(i) for i in rows.scalars()]


async def test_refusals_are_kept_out_of_sight(client, programme, container, admin_headers):
    """A create refused for funds, the amount, or a blocked source keeps its record (D12) for its
    idempotency-ref; `INVALID` is no 3.29.1 state, so lists, counts, pages and gets leave it out
    (D12a): a generated client would refuse the whole page over one unknown state."""
    p = await programme()
    ident, acc = await customer(client, p, funds=1_000)
    first = await created(client, ident, body(p, acc, 100, tag="kept"))  # holds 100 + fee 100
    cases = [
        (body(p, acc, 800, tag="funds"), "FUNDS_INSUFFICIENT"),  # 800 + fee 100 > 800 left
        (body(p, acc, 0, tag="zero"), "AMOUNT_INVALID"),
        (body(p, acc, 99_999_999_999 + 1, tag="limit"), "AMOUNT_INVALID"),
    ]
    for json, code in cases:
        r = await create(client, ident, json)
        assert (r.status_code, r.json()) == (409, {"errorCode": code}), r.text
    second = await created(client, ident, body(p, acc, 100, tag="kept"))
    block = f"/multi/managed_accounts/{acc}/block"
    assert (await client.post(block, headers=ident.headers)).status_code == 204
    r = await create(client, ident, body(p, acc, 10, tag="blocked"))
    assert r.json() == {"errorCode": "SOURCE_INSTRUMENT_BLOCKED"}
    hidden = await invalid_ids(container, p)
    assert len(hidden) == 4

    listed = (await client.get(OWT, headers=ident.headers)).json()
    assert [t["id"] for t in listed["transfer"]] == [second, first]
    assert (listed["count"], listed["responseCount"]) == (2, 2)
    for offset, want in ((0, second), (1, first)):
        params = {"limit": 1, "offset": offset}
        page = (await client.get(OWT, headers=ident.headers, params=params)).json()
        assert [t["id"] for t in page["transfer"]] == [want]
        assert (page["count"], page["responseCount"]) == (2, 1)
    page = (await client.get(OWT, headers=ident.headers, params={"offset": 2})).json()
    assert (page["transfer"], page["count"]) == ([], 2)
    # Filters that would have matched them match nothing hidden.
    for params in ({"tag": "funds"}, {"tag": "blocked"}):
        assert (await client.get(OWT, headers=ident.headers, params=params)).json()["count"] == 0
    # `INVALID` is no state of this version: as any unknown state, it filters nothing.
    by_state = (await client.get(OWT, headers=ident.headers, params={"state": "INVALID"})).json()
    assert [t["id"] for t in by_state["transfer"]] == [second, first]
    for owt_id in hidden:
        r = await client.get(f"{OWT}/{owt_id}", headers=ident.headers)
        assert r.status_code == 404, r.text
        otp = f"{OWT}/{owt_id}/challenges/otp/SMS"
        assert (await client.post(otp, headers=ident.headers)).status_code == 404
    assert (await balances(client, ident, acc))[0] == 1_000 - 2 * (100 + FEE)
    await ledger_ok(client, admin_headers, p)


async def test_a_refused_create_keeps_its_idempotency_ref(client, programme):
    p = await programme()
    ident, acc = await customer(client, p, funds=1_000)
    ref = f"w-{os.urandom(4).hex()}"
    first = await create(client, ident, body(p, acc, 5_000), ref=ref)
    assert (first.status_code, first.json()) == (409, {"errorCode": "FUNDS_INSUFFICIENT"})
    replay = await create(client, ident, body(p, acc, 5_000), ref=ref)
    assert (replay.status_code, replay.json()) == (409, {"errorCode": "FUNDS_INSUFFICIENT"})
    other = await create(client, ident, body(p, acc, 500), ref=ref)
    assert other.status_code == 400  # the ref is taken by the INVALID one
    # ... which no list shows (D12a), however often the refusal is replayed.
    assert (await client.get(OWT, headers=ident.headers)).json()["count"] == 0
    ok = await create(client, ident, body(p, acc, 500), ref=f"{ref}-2")
    again = await create(client, ident, body(p, acc, 500), ref=f"{ref}-2")
    assert ok.status_code == 200 and ok.json() == again.json()


async def test_wrong_codes_and_expiry_end_it_failed(client, programme, admin_headers):
    p = await programme()
    ident, acc = await customer(client, p, funds=FUNDS)
    owt_id = await created(client, ident, body(p, acc))
    otp = f"{OWT}/{owt_id}/challenges/otp/SMS"
    assert (await client.post(otp, headers=ident.headers)).status_code == 204
    codes = []
    for _ in range(5):
        r = await client.post(
            f"{otp}/verify", headers=ident.headers, json={"verificationCode": "999999"}
        )
        codes.append(r.json()["errorCode"])
    assert codes[-2:] == ["ONE_CHALLENGE_LIMIT_REMAINING", "CHALLENGE_LIMIT_EXCEEDED"]
    assert await state(client, ident, owt_id) == "FAILED"

    expiring = await created(client, ident, body(p, acc))
    await advance(client, p, 200)
    assert await state(client, ident, expiring) == "PENDING_CHALLENGE"
    await advance(client, p, 101)
    assert await state(client, ident, expiring) == "FAILED"
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize(
    ("last", "ending", "money_left"),
    [
        ("5552", "FAILED", 0),
        ("5553", "REJECTED", 0),
        ("5561", "REJECTED", 0),
        ("5560", "RETURNED", 0),  # returned before it completed: all of it back
        ("5554", "COMPLETED", AMOUNT + FEE),
        ("5557", "COMPLETED", AMOUNT + FEE),
        ("5558", "COMPLETED", FEE),  # came back to the sender as a deposit
        ("5559", "RETURNED", FEE),  # completed, then returned; the fee is kept
    ],
)
async def test_canned_destination_ibans_force_their_ending(
    client, programme, admin_headers, last, ending, money_left
):
    p = await programme()
    await settings(client, admin_headers, p, owtScaRequired=False)
    ident, acc = await customer(client, p, funds=FUNDS, sms=False)
    owt = (await create(client, ident, body(p, acc, details=sepa(CANNED + last)))).json()
    assert owt["state"] == "SUBMITTED"
    for _ in range(3):  # approval, completion, a return's delay
        await advance(client, p, 2)
    got = await get(client, ident, owt["id"])
    assert got["state"] == ending
    if ending == "REJECTED":
        assert got["rejectedInfo"] == "SYSTEM"
    assert await balances(client, ident, acc) == (FUNDS - money_left,) * 2
    await ledger_ok(client, admin_headers, p)


async def test_a_return_gives_the_fee_back_when_the_profile_says_so(
    client, programme, admin_headers
):
    p = await programme()
    await settings(client, admin_headers, p, owtScaRequired=False)
    await profile(client, admin_headers, p, "outgoingWireTransfers", returnFeeRefunded=True)
    ident, acc = await customer(client, p, funds=FUNDS, sms=False)
    owt_id = await created(client, ident, body(p, acc, details=sepa(CANNED + "5559")))
    for _ in range(3):
        await advance(client, p, 2)
    assert await state(client, ident, owt_id) == "RETURNED"
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)
    # The return's own entry names the wire transfer it returns (contract.md's
    # relatedTransactionId and relatedTransactionIdType).
    [back] = [
        e
        for e in await entries(client, ident, acc)
        if e["transactionId"]["type"] == "OUTGOING_WIRE_TRANSFER"
        and e["transactionId"]["id"] != owt_id
    ]
    assert back["transactionAmount"]["amount"] == AMOUNT + FEE
    assert back["additionalFields"] == {
        "relatedTransactionId": owt_id,
        "relatedTransactionIdType": "OUTGOING_WIRE_TRANSFER",
    }
    await ledger_ok(client, admin_headers, p)


async def test_the_simulator_accepts_rejects_and_returns(client, programme, admin_headers):
    p = await programme()
    await settings(client, admin_headers, p, owtScaRequired=False)
    ident, acc = await customer(client, p, funds=FUNDS, sms=False)
    waiting = await created(client, ident, body(p, acc, details=sepa(CANNED + "5551")))
    await advance(client, p, 10)
    assert await state(client, ident, waiting) == "SUBMITTED"  # until the simulator says
    wire = "/wiretransfers/outgoing"
    assert (await simulate(client, p, f"{wire}/{waiting}/accept")).json() == {"code": "COMPLETED"}
    assert await state(client, ident, waiting) == "COMPLETED"
    assert (await simulate(client, p, f"{wire}/{waiting}/accept")).json() == {
        "code": "DENIED_WIRE_TRANSFER_ALREADY_COMPLETED"
    }
    assert (await simulate(client, p, f"{wire}/{waiting}/return")).json() == {"code": "COMPLETED"}
    assert await state(client, ident, waiting) == "RETURNED"
    assert await balances(client, ident, acc) == (FUNDS - FEE,) * 2

    rejected = await created(client, ident, body(p, acc))
    assert (await simulate(client, p, f"{wire}/{rejected}/reject")).json() == {"code": "COMPLETED"}
    got = await get(client, ident, rejected)
    assert (got["state"], got["rejectedInfo"]) == ("REJECTED", "SYSTEM")
    assert (await simulate(client, p, f"{wire}/{rejected}/return")).json() == {"code": "DENIED"}
    assert (await simulate(client, p, f"{wire}/1/accept")).json() == {
        "code": "DENIED_WIRE_TRANSFER_NOT_FOUND"
    }
    assert await balances(client, ident, acc) == (FUNDS - FEE,) * 2
    await ledger_ok(client, admin_headers, p)


async def test_list_filters_step_up_and_scoping(client, programme, admin_headers):
    p = await programme()
    ident, acc = await customer(client, p, funds=FUNDS)
    stranger, _ = await customer(client, p, sms=False)
    ids = [await created(client, ident, body(p, acc, 4000 + i, tag=f"t{i % 2}")) for i in range(3)]

    async def listed(**params: Any) -> dict[str, Any]:
        r = await client.get(OWT, headers=ident.headers, params=params)
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    assert [t["id"] for t in (await listed())["transfer"]] == ids[::-1]
    assert (await listed(tag="t1"))["count"] == 1
    assert (await listed(state="PENDING_CHALLENGE"))["count"] == 3
    assert (await listed(state="COMPLETED"))["count"] == 0
    src = {"sourceInstrument.id": acc, "sourceInstrument.type": "managed_accounts"}
    assert (await listed(**src))["count"] == 3
    r = await client.get(OWT, headers=ident.headers, params={"sourceInstrument.id": acc})
    assert r.status_code == 400
    assert (await client.get(f"{OWT}/{ids[0]}", headers=stranger.headers)).status_code == 404
    assert (await client.get(OWT, headers=stranger.headers)).json()["count"] == 0
    await settings(client, admin_headers, p, stepUpRequired=True)
    for path in (OWT, f"{OWT}/{ids[0]}"):
        r = await client.get(path, headers=ident.headers)
        assert (r.status_code, r.json()["errorCode"]) == (403, "STEP_UP_REQUIRED")


async def test_a_push_challenge_submits_it(client, programme, admin_headers):
    p = await programme()
    ident, acc = await customer(client, p, funds=FUNDS, sms=False)
    await enrol_push(client, ident.headers, "BIOMETRIC")
    owt_id = await created(client, ident, body(p, acc))
    push = f"{OWT}/{owt_id}/challenges/push/BIOMETRIC"
    assert (await client.post(push, headers=ident.headers)).status_code == 204
    again = await client.post(push, headers=ident.headers)
    assert again.json() == {"errorCode": "STATE_INVALID"}  # one challenge at a time
    res = await simulate(client, p, f"/factors/{ident.root_id}/challenges/{owt_id}/verify_success")
    assert res.json() == {"code": "COMPLETED"}
    assert await state(client, ident, owt_id) == "SUBMITTED"
    # The device's answer counts once.
    res = await simulate(client, p, f"/factors/{ident.root_id}/challenges/{owt_id}/verify_success")
    assert res.json() == {"errorCode": "CHALLENGE_ALREADY_SETTLED"}
    await ledger_ok(client, admin_headers, p)


async def test_another_programmes_simulator_key_cannot_settle_it(client, programme, admin_headers):
    p, other = await programme(), await programme()
    await settings(client, admin_headers, p, owtScaRequired=False)
    ident, acc = await customer(client, p, funds=FUNDS, sms=False)
    owt_id = await created(client, ident, body(p, acc))
    for action in ("accept", "reject", "return"):
        r = await simulate(client, other, f"/wiretransfers/outgoing/{owt_id}/{action}")
        assert r.json() == {"code": "DENIED_WIRE_TRANSFER_NOT_FOUND"}, action
    r = await simulate(client, other, f"/challenges/{owt_id}/expire")
    assert r.status_code == 404
    assert await state(client, ident, owt_id) == "SUBMITTED"
    assert await balances(client, ident, acc) == (FUNDS - AMOUNT - FEE, FUNDS)
