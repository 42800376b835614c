"""Sends (money-movement.md §1.3, D12, D13): money to another identity's account in the same
programme, confirmed by SCA.

Black-box over HTTP: the hold while the send waits (available down, actual unchanged, one
statement entry that goes from PENDING to COMPLETED), SMS and push challenges, the attempt limit,
the 5-minute expiry on the programme clock, the low-value exemption, `sendsScaRequired` off,
every 409 of the create, the list and its filters, the simulator's reject, and who is refused.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

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
from tests.api.test_statements import pdf_text
from tests.conftest import Prog
from tests.factories import CODE, Identity, invited_user, open_account

FUNDS = 100_000
AMOUNT = 5_000  # above the low-value exemption's 3000: SCA applies


def body(p: Prog, src: str, dst: str, amount: int = AMOUNT, **over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "profileId": p.profiles["sends"],
        "source": {"type": "managed_accounts", "id": src},
        "destination": {"type": "managed_accounts", "id": dst},
        "destinationAmount": {"currency": "EUR", "amount": amount},
    }
    out.update(over)
    return out


async def send(
    client: httpx.AsyncClient,
    ident: Identity,
    json: dict[str, Any],
    ref: str | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    h = dict(headers or ident.headers)
    if ref:
        h["idempotency-ref"] = ref
    return await client.post("/multi/sends", headers=h, json=json)


async def created(client: httpx.AsyncClient, ident: Identity, json: dict[str, Any]) -> str:
    r = await send(client, ident, json)
    assert r.status_code == 200, r.text
    send_id: str = r.json()["id"]
    return send_id


async def state(client: httpx.AsyncClient, ident: Identity, send_id: str) -> str:
    r = await client.get(f"/multi/sends/{send_id}", headers=ident.headers)
    assert r.status_code == 200, r.text
    value: str = r.json()["state"]
    return value


def otp(send_id: str) -> str:
    return f"/multi/sends/{send_id}/challenges/otp/SMS"


async def verify(
    client: httpx.AsyncClient, ident: Identity, send_id: str, code: str = CODE
) -> httpx.Response:
    return await client.post(
        f"{otp(send_id)}/verify", headers=ident.headers, json={"verificationCode": code}
    )


async def start_and_verify(client: httpx.AsyncClient, ident: Identity, send_id: str) -> None:
    assert (await client.post(otp(send_id), headers=ident.headers)).status_code == 204
    r = await verify(client, ident, send_id)
    assert r.status_code == 204, r.text


async def parties(
    client: httpx.AsyncClient, p: Prog, funds: int = FUNDS
) -> tuple[Identity, str, Identity, str]:
    """A corporate sender with a funded account and an SMS factor; a consumer receiver."""
    sender, a = await customer(client, p, "corporates", funds)
    receiver, r = await customer(client, p, "consumers", sms=False)
    return sender, a, receiver, r


# The money and the challenge


async def test_a_send_waits_for_its_challenge_then_moves(
    client, programme, container, admin_headers
):
    p = await programme()
    await profile(client, admin_headers, p, "sends", fees={"EUR": 20})
    sender, a, receiver, r = await parties(client, p)

    res = await send(client, sender, body(p, a, r, tag="lunch"))
    assert res.status_code == 200, res.text
    s = res.json()
    assert s == {
        "id": s["id"],
        "profileId": p.profiles["sends"],
        "tag": "lunch",
        "source": {"type": "managed_accounts", "id": a},
        "destination": {"type": "managed_accounts", "id": r},
        "destinationAmount": {"currency": "EUR", "amount": AMOUNT},
        "state": "PENDING",
        "creationTimestamp": s["creationTimestamp"],
    }
    # Held: available down by amount + fee, actual unchanged; nothing arrived yet.
    assert await balances(client, sender, a) == (FUNDS - AMOUNT - 20, FUNDS)
    assert await balances(client, receiver, r) == (0, 0)
    [held] = [e for e in await entries(client, sender, a) if e["transactionId"]["type"] == "SEND"]
    assert held["transactionId"]["id"] == s["id"]
    assert held["entryState"] == "PENDING"
    assert held["availableBalanceAdjustment"]["amount"] == -(AMOUNT + 20)
    assert held["actualBalanceAdjustment"]["amount"] == 0
    assert held["cardholderFee"]["amount"] == 20
    await ledger_ok(client, admin_headers, p)  # the hold equals the open reservation

    assert (await client.post(otp(s["id"]), headers=sender.headers)).status_code == 204
    assert await state(client, sender, s["id"]) == "PENDING_CHALLENGE"
    again = await client.post(otp(s["id"]), headers=sender.headers)
    assert (again.status_code, again.json()) == (409, {"errorCode": "STATE_INVALID"})
    r2 = await verify(client, sender, s["id"])
    assert r2.status_code == 204, r2.text
    assert await state(client, sender, s["id"]) == "COMPLETED"

    assert await balances(client, sender, a) == (FUNDS - AMOUNT - 20, FUNDS - AMOUNT - 20)
    assert await balances(client, receiver, r) == (AMOUNT, AMOUNT)
    assert await revenue(container.db, p) == 20
    # Still one entry on the source, now COMPLETED with the money moved.
    sends = [e for e in await entries(client, sender, a) if e["transactionId"]["type"] == "SEND"]
    assert len(sends) == 1
    done = sends[0]
    assert done["entryState"] == "COMPLETED"
    for field in ("transactionAmount", "availableBalanceAdjustment", "actualBalanceAdjustment"):
        assert done[field] == {"currency": "EUR", "amount": -(AMOUNT + 20)}, field
    # Each side's entry names the other identity, in the interface's `additionalFields` names
    # (contract.md, StatementEntry), not the other side's account name.
    root = receiver.body["rootUser"]
    assert done["additionalFields"] == {
        "destinationInstrumentType": "managed_accounts",
        "destinationInstrumentId": r,
        "destinationIdentityType": "CONSUMER",
        "destinationIdentityId": receiver.id,
        "destinationIdentityName": f"{root['name']} {root['surname']}",
    }
    [got] = await entries(client, receiver, r)
    assert got["transactionId"] == {"type": "SEND", "id": s["id"]}
    assert got["transactionAmount"] == {"currency": "EUR", "amount": AMOUNT}
    assert got["cardholderFee"]["amount"] == 0
    assert got["additionalFields"] == {
        "sourceInstrumentType": "managed_accounts",
        "sourceInstrumentId": a,
        "sourceIdentityType": "CORPORATE",
        "sourceIdentityId": sender.id,
        "sourceIdentityName": sender.body["company"]["name"],
    }
    # The PDF's rows name them too.
    for ident, acc, line in (
        (sender, a, f"Send to {root['name']} {root['surname']}, fee "),
        (receiver, r, f"Send from {sender.body['company']['name']}"),
    ):
        pdf = await client.get(
            f"/multi/managed_accounts/{acc}/statement",
            headers={**ident.headers, "accept": "application/pdf"},
        )
        assert line in pdf_text(pdf.content), line
    await ledger_ok(client, admin_headers, p)
    # A verified send cannot be verified or challenged again.
    assert (await verify(client, sender, s["id"])).json() == {"errorCode": "STATE_INVALID"}
    assert (await client.post(otp(s["id"]), headers=sender.headers)).status_code == 409


async def test_sends_complete_at_once_when_the_programme_needs_no_sca(
    client, programme, admin_headers
):
    p = await programme()
    await settings(client, admin_headers, p, sendsScaRequired=False)
    sender, a, receiver, r = await parties(client, p)
    res = await send(client, sender, body(p, a, r))
    assert res.json()["state"] == "COMPLETED"
    assert await balances(client, receiver, r) == (AMOUNT, AMOUNT)
    assert await balances(client, sender, a) == (FUNDS - AMOUNT, FUNDS - AMOUNT)
    await ledger_ok(client, admin_headers, p)


async def test_a_wrong_code_counts_down_and_the_last_ends_the_send(
    client, programme, admin_headers
):
    p = await programme()
    sender, a, _, r = await parties(client, p)
    send_id = await created(client, sender, body(p, a, r))
    assert (await client.post(otp(send_id), headers=sender.headers)).status_code == 204
    answers = [
        (await verify(client, sender, send_id, "000000")).json()["errorCode"] for _ in range(5)
    ]
    assert answers == [
        "VERIFICATION_CODE_INVALID",
        "VERIFICATION_CODE_INVALID",
        "VERIFICATION_CODE_INVALID",
        "ONE_CHALLENGE_LIMIT_REMAINING",
        "CHALLENGE_LIMIT_EXCEEDED",
    ]
    assert await state(client, sender, send_id) == "REJECTED"
    assert (await verify(client, sender, send_id)).json() == {"errorCode": "STATE_INVALID"}
    assert await balances(client, sender, a) == (FUNDS, FUNDS)  # the hold was released
    await ledger_ok(client, admin_headers, p)

    # A right code on the last allowed attempt still passes; the limit is a setting.
    await settings(client, admin_headers, p, scaChallengeLimit=3)
    send_id = await created(client, sender, body(p, a, r))
    assert (await client.post(otp(send_id), headers=sender.headers)).status_code == 204
    assert (await verify(client, sender, send_id, "000000")).json()["errorCode"] == (
        "VERIFICATION_CODE_INVALID"
    )
    assert (await verify(client, sender, send_id, "000000")).json()["errorCode"] == (
        "ONE_CHALLENGE_LIMIT_REMAINING"
    )
    assert (await verify(client, sender, send_id)).status_code == 204
    assert await state(client, sender, send_id) == "COMPLETED"


async def test_malformed_codes_are_400(client, programme):
    p = await programme()
    sender, a, _, r = await parties(client, p)
    send_id = await created(client, sender, body(p, a, r))
    assert (await client.post(otp(send_id), headers=sender.headers)).status_code == 204
    for code in ("12345", "abcdef", "1234567", ""):
        assert (await verify(client, sender, send_id, code)).status_code == 400, code
    r2 = await client.post(f"{otp(send_id)}/verify", headers=sender.headers, json={})
    assert r2.status_code == 400
    assert await state(client, sender, send_id) == "PENDING_CHALLENGE"  # nothing counted


async def test_the_challenge_expires_after_five_minutes_of_the_programme_clock(
    client, programme, admin_headers
):
    p = await programme()
    sender, a, _, r = await parties(client, p)
    send_id = await created(client, sender, body(p, a, r))
    assert (await client.post(otp(send_id), headers=sender.headers)).status_code == 204
    await advance(client, p, 299)
    assert await state(client, sender, send_id) == "PENDING_CHALLENGE"
    await advance(client, p, 2)
    assert await state(client, sender, send_id) == "REJECTED"
    assert await balances(client, sender, a) == (FUNDS, FUNDS)
    assert (await verify(client, sender, send_id)).json() == {
        "errorCode": "VERIFICATION_CODE_EXPIRED"
    }
    # A send whose challenge never started expires 5 minutes after it was made.
    # (In two steps: the session itself ends after 300 s idle.)
    idle = await created(client, sender, body(p, a, r))
    await advance(client, p, 200)
    assert await state(client, sender, idle) == "PENDING"
    await advance(client, p, 101)
    assert await state(client, sender, idle) == "REJECTED"
    # The simulator expires one at once.
    third = await created(client, sender, body(p, a, r))
    res = await simulate(client, p, f"/challenges/{third}/expire")
    assert res.json() == {"code": "COMPLETED"}
    assert await state(client, sender, third) == "REJECTED"
    assert (await simulate(client, p, f"/challenges/{third}/expire")).json() == {"code": "DENIED"}
    assert await balances(client, sender, a) == (FUNDS, FUNDS)
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize("channel", ["AUTHY", "BIOMETRIC"])
async def test_push_challenges_through_the_simulator(client, programme, admin_headers, channel):
    p = await programme()
    sender, a, receiver, r = await parties(client, p)
    await enrol_push(client, sender.headers, channel)
    push = "/multi/sends/{}/challenges/push/" + channel
    factor = f"/factors/{sender.root_id}/challenges"

    approved = await created(client, sender, body(p, a, r))
    assert (await client.post(push.format(approved), headers=sender.headers)).status_code == 204
    assert await state(client, sender, approved) == "PENDING_CHALLENGE"
    res = await simulate(client, p, f"{factor}/{approved}/verify_success")
    assert res.json() == {"code": "COMPLETED"}, res.text
    assert await state(client, sender, approved) == "COMPLETED"
    assert await balances(client, receiver, r) == (AMOUNT, AMOUNT)

    denied = await created(client, sender, body(p, a, r))
    assert (await client.post(push.format(denied), headers=sender.headers)).status_code == 204
    res = await simulate(client, p, f"{factor}/{denied}/verify_invalid")
    assert res.json() == {"code": "DENIED"}
    # A denial counts as a wrong answer; a new challenge may be started.
    assert (await client.post(push.format(denied), headers=sender.headers)).status_code == 204
    res = await simulate(client, p, f"{factor}/{denied}/verify_expired")
    assert res.json() == {"code": "EXPIRED"}
    assert await state(client, sender, denied) == "REJECTED"
    await ledger_ok(client, admin_headers, p)


async def test_who_may_answer_a_challenge(client, programme):
    p = await programme()
    sender, a, _, r = await parties(client, p)
    # No enrolled factor: the channel is not registered.
    lonely, acc = await customer(client, p, funds=FUNDS, sms=False)
    lonely_send = await created(client, lonely, body(p, acc, r))
    res = await client.post(otp(lonely_send), headers=lonely.headers)
    assert (res.status_code, res.json()) == (409, {"errorCode": "CHANNEL_NOT_REGISTERED"})
    push = f"/multi/sends/{lonely_send}/challenges/push/AUTHY"
    res = await client.post(push, headers=lonely.headers)
    assert (res.status_code, res.json()) == (409, {"errorCode": "CHANNEL_NOT_REGISTERED"})

    # The root user started the challenge: its authorised user cannot answer it.
    _, _, token = await invited_user(client, p, sender)
    as_user = {**p.headers, "Authorization": f"Bearer {token}"}
    send_id = await created(client, sender, body(p, a, r))
    assert (await client.post(otp(send_id), headers=sender.headers)).status_code == 204
    res = await client.post(
        f"{otp(send_id)}/verify", headers=as_user, json={"verificationCode": CODE}
    )
    assert (res.status_code, res.json()) == (409, {"errorCode": "CHANNEL_NOT_REGISTERED"})
    # But the send is the identity's: the authorised user sees it.
    assert (await client.get(f"/multi/sends/{send_id}", headers=as_user)).status_code == 200
    assert (await verify(client, sender, send_id)).status_code == 204

    # Unknown or another identity's send: 404 on every challenge operation.
    stranger, _ = await customer(client, p)
    for who, sid in ((sender, "1"), (stranger, send_id)):
        for path in (otp(sid), f"/multi/sends/{sid}/challenges/push/AUTHY"):
            assert (await client.post(path, headers=who.headers)).status_code == 404
        res = await client.post(
            f"{otp(sid)}/verify", headers=who.headers, json={"verificationCode": CODE}
        )
        assert res.status_code == 404
    # A channel the interface does not have.
    res = await client.post(f"/multi/sends/{send_id}/challenges/otp/EMAIL", headers=sender.headers)
    assert res.status_code == 400


# The low-value exemption (PSD2 RTS Art. 16, D13)


async def test_low_value_sends_need_no_challenge_within_the_count(client, programme, admin_headers):
    p = await programme()
    sender, a, receiver, r = await parties(client, p)
    for _ in range(5):
        res = await send(client, sender, body(p, a, r, 30))
        assert res.json()["state"] == "COMPLETED", res.text
    exempt = res.json()["id"]
    res = await client.post(otp(exempt), headers=sender.headers)
    assert (res.status_code, res.json()) == (409, {"errorCode": "SCA_EXEMPTION_APPLIED"})
    sixth = await send(client, sender, body(p, a, r, 30))
    assert sixth.json()["state"] == "PENDING"  # the count is used up
    await start_and_verify(client, sender, sixth.json()["id"])
    # SCA done: the count starts again.
    assert (await send(client, sender, body(p, a, r, 30))).json()["state"] == "COMPLETED"
    assert await balances(client, receiver, r) == (30 * 7, 30 * 7)
    await ledger_ok(client, admin_headers, p)


async def test_low_value_sends_need_no_challenge_within_the_total(client, programme, admin_headers):
    p = await programme()
    await settings(client, admin_headers, p, lowValueExemptionMaxTotal=100)
    sender, a, _, r = await parties(client, p)
    states = [(await send(client, sender, body(p, a, r, 30))).json()["state"] for _ in range(4)]
    assert states == ["COMPLETED", "COMPLETED", "COMPLETED", "PENDING"]  # 120 > 100
    assert (await send(client, sender, body(p, a, r, 3001))).json()["state"] == "PENDING"


# Refusals


async def test_each_business_refusal_has_its_error_code(client, programme, admin_headers):
    p, other = await programme(), await programme()
    sender, a, receiver, r = await parties(client, p, funds=10_000)
    own = (await open_account(client, sender, "EUR"))["id"]
    gbp = (await open_account(client, receiver, "GBP"))["id"]
    _, elsewhere = await customer(client, other, sms=False)

    async def refused(json: dict[str, Any], code: str) -> None:
        before = await balances(client, sender, a)
        res = await send(client, sender, json)
        assert (res.status_code, res.json()) == (409, {"errorCode": code}), res.text
        assert await balances(client, sender, a) == before

    await refused(body(p, a, r, profileId="999999"), "PROFILE_NOT_FOUND")
    await refused(body(p, a, r, profileId=p.profiles["transfers"]), "PROFILE_NOT_FOUND")
    await refused(body(p, r, a), "SOURCE_NOT_FOUND")  # the receiver's account
    await refused(body(p, "999999", r), "SOURCE_NOT_FOUND")
    await refused(body(p, a, "999999"), "DESTINATION_NOT_FOUND")
    await refused(body(p, a, own), "DESTINATION_BELONGS_TO_SAME_IDENTITY")
    await refused(body(p, a, elsewhere), "SOURCE_AND_DESTINATION_MUST_BE_IN_SAME_PROGRAMME")
    await refused(body(p, a, gbp), "CURRENCY_MISMATCH")
    await refused(body(p, a, r, 0), "AMOUNT_INVALID")
    await refused(body(p, a, r, 10_001), "FUNDS_INSUFFICIENT")
    await profile(client, admin_headers, p, "sends", fees={"EUR": 1})
    await refused(body(p, a, r, 10_000), "FUNDS_INSUFFICIENT")  # amount + fee
    block = f"/multi/managed_accounts/{r}/block"
    assert (await client.post(block, headers=receiver.headers)).status_code == 204
    await refused(body(p, a, r), "DESTINATION_INSTRUMENT_BLOCKED")
    await profile(client, admin_headers, p, "sends", active=False)
    await refused(body(p, a, r), "PROFILE_INACTIVE")
    r2 = await client.get("/multi/sends", headers=sender.headers)
    assert r2.json()["count"] == 0


async def test_the_simulator_rejects_a_waiting_send(client, programme, admin_headers):
    p = await programme()
    sender, a, _, r = await parties(client, p)
    send_id = await created(client, sender, body(p, a, r))
    res = await simulate(client, p, f"/sends/{send_id}/reject")
    assert res.json() == {"code": "COMPLETED"}
    assert await state(client, sender, send_id) == "REJECTED"
    assert await balances(client, sender, a) == (FUNDS, FUNDS)
    assert (await simulate(client, p, f"/sends/{send_id}/reject")).json() == {"code": "DENIED"}
    assert (await simulate(client, p, "/sends/1/reject")).status_code == 404
    res = await client.post(otp(send_id), headers=sender.headers)
    assert res.json() == {"errorCode": "STATE_INVALID"}
    await ledger_ok(client, admin_headers, p)


# Reading


async def test_list_filters_and_scoping(client, programme, admin_headers):
    p = await programme()
    await settings(client, admin_headers, p, sendsScaRequired=False)
    sender, a, receiver, r = await parties(client, p)
    second = (await open_account(client, sender, "EUR"))["id"]
    ids = [await created(client, sender, body(p, a, r, 10 + i, tag=f"t{i % 2}")) for i in range(3)]
    await settings(client, admin_headers, p, sendsScaRequired=True)
    waiting = await created(client, sender, body(p, a, r))

    async def listed(who: Identity = sender, **params: Any) -> dict[str, Any]:
        res = await client.get("/multi/sends", headers=who.headers, params=params)
        assert res.status_code == 200, res.text
        out: dict[str, Any] = res.json()
        assert out["responseCount"] == len(out["send"])
        return out

    everything = await listed()
    assert [s["id"] for s in everything["send"]] == [waiting, *ids[::-1]]
    assert everything["count"] == 4
    assert [s["id"] for s in (await listed(state="PENDING"))["send"]] == [waiting]
    assert (await listed(state="NOPE"))["count"] == 4
    assert (await listed(tag="t0"))["count"] == 2
    assert (await listed(**{"source.id": a, "source.type": "managed_accounts"}))["count"] == 4
    assert (await listed(**{"source.id": second, "source.type": "managed_accounts"}))["count"] == 0
    assert (await listed(limit=2, offset=1))["send"] == everything["send"][1:3]
    # The receiver's list holds the sends it made, not the ones it received.
    assert (await listed(receiver))["count"] == 0
    res = await client.get(f"/multi/sends/{waiting}", headers=receiver.headers)
    assert res.status_code == 404
    res = await client.get("/multi/sends", headers=sender.headers, params={"source.id": a})
    assert res.status_code == 400


async def test_step_up_guards_reading(client, programme, admin_headers):
    p = await programme()
    sender, a, _, r = await parties(client, p)
    send_id = await created(client, sender, body(p, a, r))
    await settings(client, admin_headers, p, stepUpRequired=True)
    for path in ("/multi/sends", f"/multi/sends/{send_id}"):
        res = await client.get(path, headers=sender.headers)
        assert (res.status_code, res.json()["errorCode"]) == (403, "STEP_UP_REQUIRED")
    # Creating and confirming a send are SCA of their own, not guarded by the session's step-up.
    await start_and_verify(client, sender, send_id)


async def test_idempotent_create(client, programme):
    p = await programme()
    sender, a, _, r = await parties(client, p)
    ref = f"s-{os.urandom(4).hex()}"
    first = await send(client, sender, body(p, a, r), ref=ref)
    again = await send(client, sender, body(p, a, r), ref=ref)
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert (await send(client, sender, body(p, a, r, 6000), ref=ref)).status_code == 400
    assert await balances(client, sender, a) == (FUNDS - AMOUNT, FUNDS)


async def test_version_3_1_0_has_no_sends_or_wire_transfers(client, programme):
    p = await programme()
    sender, a, _, r = await parties(client, p)
    res = await client.post("/3.1.0/multi/sends", headers=sender.headers, json=body(p, a, r))
    assert res.status_code == 404
    for path in ("/3.1.0/multi/sends", "/3.1.0/multi/outgoing_wire_transfers"):
        assert (await client.get(path, headers=sender.headers)).status_code == 404
    assert await balances(client, sender, a) == (FUNDS, FUNDS)


async def test_another_programmes_simulator_key_cannot_reject_it(client, programme):
    p, other = await programme(), await programme()
    sender, a, _, r = await parties(client, p)
    send_id = await created(client, sender, body(p, a, r))
    assert (await simulate(client, other, f"/sends/{send_id}/reject")).status_code == 404
    assert (await simulate(client, other, f"/challenges/{send_id}/expire")).status_code == 404
    assert await state(client, sender, send_id) == "PENDING"
