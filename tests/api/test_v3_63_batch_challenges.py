"""Batch SCA challenges `/challenges` on the 3.63 line (issue 43 §2, v3.63.md §3, D36, D37,
decision 0086), black-box over HTTP: one SMS code or one push confirms several sends or wire
transfers; all or nothing at start (404 for any id not the caller's of the type, 409
`STATE_INVALID` for any not awaiting its challenge); one challenge model with the deprecated
per-resource challenges; wrong codes, expiry, push accepted and rejected through the simulator;
the 400s; the refused callers; idempotency."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.api.fees_support import ledger_ok
from tests.api.payments_support import advance, balances, customer, enrol_push
from tests.api.test_outgoing_wire_transfers import body as owt_body
from tests.conftest import Prog
from tests.factories import CODE, Identity, invited_user, sign_up

LINE = "/3.63.4/multi"
FUNDS = 100_000
AMOUNT = 5_000  # over the low-value exemption: every payment waits for SCA
FEE = 0  # a new programme's sends have no fee


async def payer(client: httpx.AsyncClient, p: Prog) -> tuple[Identity, str, str]:
    """A funded customer with an SMS factor, and another identity's account to pay."""
    ident, acc = await customer(client, p, funds=FUNDS)
    _, theirs = await customer(client, p, sms=False)
    return ident, acc, theirs


async def sends(
    client: httpx.AsyncClient, p: Prog, ident: Identity, acc: str, theirs: str, n: int = 2
) -> list[str]:
    out = []
    for _ in range(n):
        r = await client.post(
            f"{LINE}/sends",
            headers=ident.headers,
            json={
                "profileId": p.profiles["sends"],
                "source": {"type": "managed_accounts", "id": acc},
                "destination": {"type": "managed_accounts", "id": theirs},
                "destinationAmount": {"currency": "EUR", "amount": AMOUNT},
            },
        )
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "PENDING"
        out.append(r.json()["id"])
    return out


async def start(
    client: httpx.AsyncClient,
    ident: Identity,
    ids: list[str],
    kind: str = "sends",
    how: str = "otp/SMS",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return await client.post(
        f"{LINE}/challenges/{how}",
        headers=headers or ident.headers,
        json={"resourceType": kind, "resourceIds": ids},
    )


async def verify(
    client: httpx.AsyncClient,
    ident: Identity,
    challenge: str,
    code: str = CODE,
    kind: str = "sends",
) -> httpx.Response:
    return await client.post(
        f"{LINE}/challenges/{challenge}/otp/SMS/verify",
        headers=ident.headers,
        json={"verificationCode": code, "resourceType": kind},
    )


async def state(client: httpx.AsyncClient, ident: Identity, path: str) -> str:
    r = await client.get(f"{LINE}{path}", headers=ident.headers)
    assert r.status_code == 200, r.text
    value: str = r.json()["state"]
    return value


async def test_one_code_confirms_several_sends(client, programme, admin_headers):
    p = await programme()
    ident, acc, theirs = await payer(client, p)
    ids = await sends(client, p, ident, acc, theirs, 3)
    r = await start(client, ident, ids[:2])
    assert r.status_code == 200, r.text
    challenge = r.json()["scaChallengeId"]
    assert challenge.isdigit()
    assert [await state(client, ident, f"/sends/{i}") for i in ids] == [
        "PENDING_CHALLENGE",
        "PENDING_CHALLENGE",
        "PENDING",
    ]
    # One challenge model: the deprecated per-resource operations refuse what a batch holds.
    per = f"{LINE}/sends/{ids[0]}/challenges/otp/SMS"
    r = await client.post(per, headers=ident.headers)
    assert (r.status_code, r.json()) == (409, {"errorCode": "STATE_INVALID"})
    r = await client.post(f"{per}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert (r.status_code, r.json()) == (409, {"errorCode": "STATE_INVALID"})
    # And a batch refuses what another challenge holds.
    r = await start(client, ident, ids[1:])
    assert (r.status_code, r.json()) == (409, {"errorCode": "STATE_INVALID"})

    r = await verify(client, ident, challenge)
    assert r.status_code == 204, r.text
    assert [await state(client, ident, f"/sends/{i}") for i in ids] == [
        "COMPLETED",
        "COMPLETED",
        "PENDING",
    ]
    held = AMOUNT + FEE  # the third still waits, held
    assert await balances(client, ident, acc) == (FUNDS - 3 * held, FUNDS - 2 * held)
    r = await verify(client, ident, challenge)
    assert (r.status_code, r.json()) == (409, {"errorCode": "STATE_INVALID"})
    await ledger_ok(client, admin_headers, p)


async def test_one_code_submits_several_wire_transfers(client, programme):
    p = await programme()
    ident, acc = await customer(client, p, funds=FUNDS)
    ids = []
    for _ in range(2):
        r = await client.post(
            f"{LINE}/outgoing_wire_transfers", headers=ident.headers, json=owt_body(p, acc)
        )
        assert r.json()["state"] == "PENDING_CHALLENGE", r.text
        ids.append(r.json()["id"])
    # Their ids are no sends: 404, and nothing is made.
    r = await start(client, ident, ids, kind="sends")
    assert r.status_code == 404
    r = await start(client, ident, ids, kind="outgoing_wire_transfers")
    assert r.status_code == 200, r.text
    challenge = r.json()["scaChallengeId"]
    r = await verify(client, ident, challenge, kind="sends")
    assert r.status_code == 404  # the challenge's type is the wire transfers'
    r = await verify(client, ident, challenge, kind="outgoing_wire_transfers")
    assert r.status_code == 204, r.text
    assert {await state(client, ident, f"/outgoing_wire_transfers/{i}") for i in ids} == {
        "SUBMITTED"
    }


async def test_all_or_nothing_at_start(client, programme):
    p = await programme()
    ident, acc, theirs = await payer(client, p)
    ids = await sends(client, p, ident, acc, theirs, 2)
    stranger, sacc, _ = await payer(client, p)
    theirs_send = (await sends(client, p, stranger, sacc, theirs, 1))[0]
    for bad in ([*ids, "999999"], [*ids, theirs_send]):
        r = await start(client, ident, bad)
        assert r.status_code == 404, (bad, r.text)
    # A send that needed no SCA has nothing to confirm: STATE_INVALID, and nothing is made.
    r = await client.post(
        f"{LINE}/sends",
        headers=ident.headers,
        json={
            "profileId": p.profiles["sends"],
            "source": {"type": "managed_accounts", "id": acc},
            "destination": {"type": "managed_accounts", "id": theirs},
            "destinationAmount": {"currency": "EUR", "amount": 20},
        },
    )
    exempt = r.json()["id"]
    assert r.json()["state"] == "COMPLETED"
    r = await start(client, ident, [*ids, exempt])
    assert (r.status_code, r.json()) == (409, {"errorCode": "STATE_INVALID"})
    # None of the failed starts took any of them: a full one still can.
    assert [await state(client, ident, f"/sends/{i}") for i in ids] == ["PENDING", "PENDING"]
    assert (await start(client, ident, ids)).status_code == 200
    # Someone else's challenge id, or an unknown one, is 404 to its verify.
    mine = (await start(client, stranger, [theirs_send])).json()["scaChallengeId"]
    assert (await verify(client, ident, mine)).status_code == 404
    assert (await verify(client, ident, "123456789")).status_code == 404


async def test_wrong_codes_count_down_then_end_the_payments(client, programme, admin_headers):
    p = await programme()
    ident, acc, theirs = await payer(client, p)
    ids = await sends(client, p, ident, acc, theirs, 2)
    challenge = (await start(client, ident, ids)).json()["scaChallengeId"]
    answers = []
    for _ in range(5):  # the programme's default limit is 5
        r = await verify(client, ident, challenge, "000000")
        answers.append(r.json()["errorCode"])
    assert answers == [
        "VERIFICATION_CODE_INVALID",
        "VERIFICATION_CODE_INVALID",
        "VERIFICATION_CODE_INVALID",
        "ONE_CHALLENGE_LIMIT_REMAINING",
        "CHALLENGE_LIMIT_EXCEEDED",
    ]
    assert [await state(client, ident, f"/sends/{i}") for i in ids] == ["REJECTED", "REJECTED"]
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)
    r = await verify(client, ident, challenge)
    assert (r.status_code, r.json()) == (409, {"errorCode": "STATE_INVALID"})
    await ledger_ok(client, admin_headers, p)


async def test_an_unanswered_challenge_expires_with_its_payments(client, programme):
    p = await programme()
    ident, acc, theirs = await payer(client, p)
    ids = await sends(client, p, ident, acc, theirs, 2)
    challenge = (await start(client, ident, ids)).json()["scaChallengeId"]
    await advance(client, p, 299)
    assert await state(client, ident, f"/sends/{ids[0]}") == "PENDING_CHALLENGE"
    await advance(client, p, 1)
    r = await verify(client, ident, challenge)
    assert (r.status_code, r.json()) == (409, {"errorCode": "VERIFICATION_CODE_EXPIRED"})
    assert [await state(client, ident, f"/sends/{i}") for i in ids] == ["REJECTED", "REJECTED"]
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)


async def test_a_push_accepted_or_rejected_through_the_simulator(client, programme):
    p = await programme()
    ident, acc, theirs = await payer(client, p)
    await enrol_push(client, ident.headers, "AUTHY")
    ids = await sends(client, p, ident, acc, theirs, 2)
    sim = {"programme-key": p.api_key}
    r = await start(client, ident, ids, how="push/BIOMETRIC")
    assert (r.status_code, r.json()) == (409, {"errorCode": "CHANNEL_NOT_REGISTERED"})
    challenge = (await start(client, ident, ids, how="push/AUTHY")).json()["scaChallengeId"]
    # The other vendor's path does not know it; an unknown id neither.
    r = await client.post(f"/simulate/api/okay/challenge/{challenge}/accept", headers=sim)
    assert (r.status_code, r.json()) == (409, {"errorCode": "REQUEST_NOT_FOUND"})
    r = await client.post("/simulate/api/authy/challenge/123/accept", headers=sim)
    assert (r.status_code, r.json()) == (409, {"errorCode": "NOT_FOUND"})
    # Rejected: the payments may be challenged again.
    r = await client.post(f"/simulate/api/authy/challenge/{challenge}/reject", headers=sim)
    assert r.status_code == 204, r.text
    r = await client.post(f"/simulate/api/authy/challenge/{challenge}/accept", headers=sim)
    assert (r.status_code, r.json()) == (409, {"errorCode": "ALREADY_COMPLETED"})
    assert [await state(client, ident, f"/sends/{i}") for i in ids] == ["PENDING_CHALLENGE"] * 2
    again = (await start(client, ident, ids, how="push/AUTHY")).json()["scaChallengeId"]
    r = await client.post(f"/simulate/api/authy/challenge/{again}/accept", headers=sim)
    assert r.status_code == 204, r.text
    assert [await state(client, ident, f"/sends/{i}") for i in ids] == ["COMPLETED"] * 2
    # The factors' simulator operation answers a batch's push too.
    more = await sends(client, p, ident, acc, theirs, 1)
    third = (await start(client, ident, more, how="push/AUTHY")).json()["scaChallengeId"]
    r = await client.post(
        f"/simulate/api/factors/{ident.root_id}/challenges/{third}/verify_success", headers=sim
    )
    assert r.status_code == 200, r.text
    assert await state(client, ident, f"/sends/{more[0]}") == "COMPLETED"


async def test_a_scheduled_send_confirmed_by_a_batch_is_scheduled(client, programme):
    p = await programme()
    ident, acc, theirs = await payer(client, p)
    r = await client.post(
        "/simulate/api/clock/advance", headers={"programme-key": p.api_key}, json={"seconds": 1}
    )
    at = r.json()["now"] + 60_000
    r = await client.post(
        f"{LINE}/sends",
        headers=ident.headers,
        json={
            "profileId": p.profiles["sends"],
            "source": {"type": "managed_accounts", "id": acc},
            "destination": {"type": "managed_accounts", "id": theirs},
            "destinationAmount": {"currency": "EUR", "amount": AMOUNT},
            "scheduledTimestamp": str(at),
        },
    )
    send = r.json()["id"]
    challenge = (await start(client, ident, [send])).json()["scaChallengeId"]
    assert (await verify(client, ident, challenge)).status_code == 204
    assert await state(client, ident, f"/sends/{send}") == "SCHEDULED"


async def test_bad_bodies_are_400_and_make_nothing(client, programme):
    p = await programme()
    ident, acc, theirs = await payer(client, p)
    ids = await sends(client, p, ident, acc, theirs, 1)
    bad: list[Any] = [
        {"resourceType": "sends", "resourceIds": []},
        {"resourceType": "sends", "resourceIds": [ids[0], ids[0]]},
        {"resourceType": "sends", "resourceIds": ["abc"]},
        {"resourceType": "sends", "resourceIds": [str(i) for i in range(1, 102)]},
        {"resourceType": "cards", "resourceIds": ids},
        {"resourceIds": ids},
        {"resourceType": "sends"},
    ]
    for body in bad:
        r = await client.post(f"{LINE}/challenges/otp/SMS", headers=ident.headers, json=body)
        assert r.status_code == 400, (body, r.text)
    r = await client.post(
        f"{LINE}/challenges/otp/EMAIL",
        headers=ident.headers,
        json={"resourceType": "sends", "resourceIds": ids},
    )
    assert r.status_code == 400
    challenge = (await start(client, ident, ids)).json()["scaChallengeId"]
    for body in (
        {"verificationCode": "12345", "resourceType": "sends"},
        {"verificationCode": CODE},
    ):
        r = await client.post(
            f"{LINE}/challenges/{challenge}/otp/SMS/verify", headers=ident.headers, json=body
        )
        assert r.status_code == 400, (body, r.text)
    assert await state(client, ident, f"/sends/{ids[0]}") == "PENDING_CHALLENGE"


async def test_a_linked_accounts_declaration_is_the_root_users(client, programme):
    p = await programme()
    ident, _, _ = await payer(client, p)
    _, _, token = await invited_user(client, p, ident)
    body = {"resourceType": "linked_account_declaration", "resourceIds": ["1"]}
    user = {**p.headers, "Authorization": f"Bearer {token}"}
    r = await client.post(f"{LINE}/challenges/otp/SMS", headers=user, json=body)
    assert (r.status_code, r.json()) == (403, {"errorCode": "INSUFFICIENT_PERMISSIONS"})
    # The root user's: no linked account awaits its declaration (not served yet), so 404.
    r = await client.post(f"{LINE}/challenges/otp/SMS", headers=ident.headers, json=body)
    assert r.status_code == 404


async def test_the_same_idempotency_ref_is_the_same_challenge(client, programme):
    p = await programme()
    ident, acc, theirs = await payer(client, p)
    ids = await sends(client, p, ident, acc, theirs, 1)
    headers = {**ident.headers, "idempotency-ref": "batch-1"}
    first = await start(client, ident, ids, headers=headers)
    second = await start(client, ident, ids, headers=headers)
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()


async def test_the_challenges_refuse_every_caller_but_the_owner(client, programme):
    p, other = await programme(), await programme()
    ident = await sign_up(client, p, base=LINE)
    body = {"resourceType": "sends", "resourceIds": ["1"]}
    verify_body = {"verificationCode": CODE, "resourceType": "sends"}
    for path, json in (
        ("/challenges/otp/SMS", body),
        ("/challenges/push/AUTHY", body),
        ("/challenges/1/otp/SMS/verify", verify_body),
    ):
        url = f"{LINE}{path}"
        r = await client.post(
            url, headers={"Authorization": ident.headers["Authorization"]}, json=json
        )
        assert r.status_code == 400
        assert r.json()["syntaxErrors"]["invalidFields"][0]["fieldName"] == "api-key"
        r = await client.post(url, headers={**ident.headers, "api-key": "mb_sbx_nope"}, json=json)
        assert r.status_code == 401
        r = await client.post(url, headers={**ident.headers, "api-key": other.api_key}, json=json)
        assert r.status_code == 403
        assert (await client.post(url, headers=p.headers, json=json)).status_code == 401
        for base in ("/multi", "/3.29.1/multi", "/3.1.0/multi"):
            r = await client.post(f"{base}{path}", headers=ident.headers, json=json)
            assert r.status_code == 404, (base, path)


async def test_without_an_sms_factor_the_code_has_nowhere_to_go(client, programme):
    p = await programme()
    ident, acc = await customer(client, p, funds=FUNDS, sms=False)
    _, theirs = await customer(client, p, sms=False)
    ids = await sends(client, p, ident, acc, theirs, 1)
    r = await start(client, ident, ids)
    assert (r.status_code, r.json()) == (409, {"errorCode": "CHANNEL_NOT_REGISTERED"})
    assert await state(client, ident, f"/sends/{ids[0]}") == "PENDING"


async def test_a_challenge_verified_twice_at_once_completes_once(client, programme, admin_headers):
    """Issue 43: two verifies of one batch challenge racing each other: one passes it, the
    other finds it passed (STATE_INVALID), and each send moves its money once."""
    p = await programme()
    ident, acc, theirs = await payer(client, p)
    ids = await sends(client, p, ident, acc, theirs, 3)
    challenge = (await start(client, ident, ids)).json()["scaChallengeId"]
    answers = await asyncio.gather(*(verify(client, ident, challenge) for _ in range(2)))
    assert sorted(r.status_code for r in answers) == [204, 409], [r.text for r in answers]
    [refused] = [r for r in answers if r.status_code == 409]
    assert refused.json() == {"errorCode": "STATE_INVALID"}
    assert [await state(client, ident, f"/sends/{i}") for i in ids] == ["COMPLETED"] * 3
    assert await balances(client, ident, acc) == (FUNDS - 3 * AMOUNT,) * 2
    await ledger_ok(client, admin_headers, p)
