"""Step-up (contract §5.1 stepup*, §8 challenge simulation; D7; docs/decisions/0007): OTP and push
challenges, how long a step-up lasts, the simulator's verify_success / verify_invalid /
verify_expired, and the refusals of every step-up operation. 3.1.0 has none of them (404)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.test_factors import (
    LATEST,
    advance,
    advance_keeping,
    assert_409,
    assert_step_up_required,
    bearer,
    check_refusals,
    code_in,
    enrol_push,
    enrol_sms,
    factors,
    invalid_fields,
    sms_messages,
)
from tests.conftest import Prog
from tests.factories import CODE, Identity, login, otp_step_up, sign_up

OTP = f"{LATEST}/stepup/challenges/otp/SMS"
PUSH = f"{LATEST}/stepup/challenges/push"
SIM = "/simulate/api/factors"


async def probe(
    client: httpx.AsyncClient, headers: dict[str, str], unused: str = "BIOMETRIC"
) -> bool:
    """Whether the session passes the step-up guard. Unlinking a device the user never enrolled
    (`unused`) changes nothing: 403 STEP_UP_REQUIRED before the step-up, 409 after."""
    r = await client.delete(f"{LATEST}/authentication_factors/push/{unused}", headers=headers)
    if r.status_code == 403:
        assert_step_up_required(r)
        return False
    assert_409(r, "CHANNEL_NOT_REGISTERED")
    return True


async def stepped_up_programme(
    client: httpx.AsyncClient, programme: Any, factor: str = "SMS", kind: str = "corporates"
) -> tuple[Prog, Identity]:
    p = await programme(stepUpRequired=True)
    ident = await sign_up(client, p, kind)
    await enrol_sms(client, ident.headers)
    if factor != "SMS":
        # D11a: push enrolment needs step-up, so the user steps up by SMS OTP first, enrols
        # the device, and logs in again for a session that has not stepped up yet.
        await otp_step_up(client, ident.headers)
        await enrol_push(client, ident.headers, factor)
        ident.token = (await login(client, p, ident.email)).json()["token"]
    assert await probe(client, ident.headers, other_push(factor)) is False
    return p, ident


def other_push(channel: str) -> str:
    return "AUTHY" if channel == "BIOMETRIC" else "BIOMETRIC"


async def challenge(client: httpx.AsyncClient, headers: dict[str, str], channel: str) -> str:
    r = await client.post(f"{PUSH}/{channel}", headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"id"}
    assert body["id"].isdigit()
    cid: str = body["id"]
    return cid


async def settle(
    client: httpx.AsyncClient, p: Prog, user_id: str, cid: str, how: str
) -> httpx.Response:
    return await client.post(
        f"{SIM}/{user_id}/challenges/{cid}/{how}", headers={"programme-key": p.api_key}
    )


# OTP


@pytest.mark.parametrize("kind", ["corporates", "consumers"])
async def test_otp_step_up_lasts_for_the_session_but_not_a_new_login(
    client, programme, container, kind
):
    p, ident = await stepped_up_programme(client, programme, "SMS", kind)
    r = await client.post(OTP, headers=ident.headers)
    assert (r.status_code, r.content) == (204, b"")
    sms = (await sms_messages(container, p))[-1]
    assert sms.recipient == ("+447700900123" if kind == "corporates" else "+35679000000")
    assert code_in(sms) == CODE
    assert await probe(client, ident.headers) is False  # issuing is not enough

    r = await client.post(f"{OTP}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert (r.status_code, r.content) == (204, b"")
    assert await probe(client, ident.headers) is True
    # For the rest of the session, however long it lives.
    await advance_keeping(client, p, 900, ident.headers)
    assert await probe(client, ident.headers) is True
    # A new login starts without it, and the old session keeps it.
    fresh = bearer(p, (await login(client, p, ident.email)).json()["token"])
    assert await probe(client, fresh) is False
    assert await probe(client, ident.headers) is True
    # Logout ends the session and its step-up.
    assert (await client.post(f"{LATEST}/logout", headers=ident.headers)).status_code == 204
    r = await client.delete(
        f"{LATEST}/authentication_factors/push/BIOMETRIC", headers=ident.headers
    )
    assert r.status_code == 401


async def test_otp_step_up_conflicts(client, programme):
    p, ident = await stepped_up_programme(client, programme, "SMS")
    # Verify before any code was issued in this session.
    r = await client.post(f"{OTP}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert_409(r, "STATE_INVALID")
    assert (await client.post(OTP, headers=ident.headers)).status_code == 204
    assert_409(await client.post(OTP, headers=ident.headers), "RETRY_IN_15SEC")
    await advance(client, p, 15)
    assert (await client.post(OTP, headers=ident.headers)).status_code == 204
    # Wrong codes do not use up the sandbox code (D11) and step nothing up.
    for wrong in ("654321", "12345", "1234567"):
        r = await client.post(
            f"{OTP}/verify", headers=ident.headers, json={"verificationCode": wrong}
        )
        assert_409(r, "VERIFICATION_CODE_INVALID")
    assert await probe(client, ident.headers) is False
    r = await client.post(f"{OTP}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert r.status_code == 204, r.text
    # The code is used up.
    r = await client.post(f"{OTP}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert_409(r, "VERIFICATION_CODE_INVALID")
    assert await probe(client, ident.headers) is True


async def test_otp_code_is_bound_to_its_session(client, programme):
    p, ident = await stepped_up_programme(client, programme, "SMS")
    other = bearer(p, (await login(client, p, ident.email)).json()["token"])
    assert (await client.post(OTP, headers=ident.headers)).status_code == 204
    # Another session may ask for its own code at once, but cannot use the first session's.
    r = await client.post(f"{OTP}/verify", headers=other, json={"verificationCode": CODE})
    assert_409(r, "STATE_INVALID")
    assert (await client.post(OTP, headers=other)).status_code == 204
    r = await client.post(f"{OTP}/verify", headers=other, json={"verificationCode": CODE})
    assert r.status_code == 204, r.text
    assert await probe(client, other) is True
    assert await probe(client, ident.headers) is False


async def test_otp_code_expires_after_ten_minutes(client, programme):
    p, ident = await stepped_up_programme(client, programme, "SMS")
    assert (await client.post(OTP, headers=ident.headers)).status_code == 204
    await advance_keeping(client, p, 600, ident.headers)
    r = await client.post(f"{OTP}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert_409(r, "VERIFICATION_CODE_EXPIRED")
    assert await probe(client, ident.headers) is False
    await otp_step_up(client, ident.headers)
    assert await probe(client, ident.headers) is True


async def test_otp_step_up_needs_an_active_sms_factor(client, programme):
    p = await programme(stepUpRequired=True)
    ident = await sign_up(client, p)
    body = {"verificationCode": CODE}
    assert_409(await client.post(OTP, headers=ident.headers), "CHANNEL_NOT_REGISTERED")
    r = await client.post(f"{OTP}/verify", headers=ident.headers, json=body)
    assert_409(r, "CHANNEL_NOT_REGISTERED")
    # A pending SMS enrolment is not active.
    r = await client.post(f"{LATEST}/authentication_factors/otp/SMS", headers=ident.headers)
    assert r.status_code == 204
    assert_409(await client.post(OTP, headers=ident.headers), "CHANNEL_NOT_REGISTERED")
    r = await client.post(f"{OTP}/verify", headers=ident.headers, json=body)
    assert_409(r, "CHANNEL_NOT_REGISTERED")
    assert await probe(client, ident.headers) is False


async def test_live_otp_step_up(client, programme, container):
    p = await programme(mode="live", stepUpRequired=True)
    ident = await sign_up(client, p, verify_email=False)
    enrol = f"{LATEST}/authentication_factors/otp/SMS"
    assert (await client.post(enrol, headers=ident.headers)).status_code == 204
    code = code_in((await sms_messages(container, p))[-1])
    r = await client.post(f"{enrol}/verify", headers=ident.headers, json={"verificationCode": code})
    assert r.status_code == 204, r.text

    assert (await client.post(OTP, headers=ident.headers)).status_code == 204
    sms = (await sms_messages(container, p))[-1]
    assert sms.deliver is True
    code = code_in(sms)
    for wrong in {"000000", "111111", CODE} - {code}:  # the sandbox code is just wrong here
        r = await client.post(
            f"{OTP}/verify", headers=ident.headers, json={"verificationCode": wrong}
        )
        assert_409(r, "VERIFICATION_CODE_INVALID")
    assert await probe(client, ident.headers) is False
    r = await client.post(f"{OTP}/verify", headers=ident.headers, json={"verificationCode": code})
    assert r.status_code == 204, r.text
    assert await probe(client, ident.headers) is True


async def test_otp_step_up_refuses_malformed_requests(client, programme):
    _, ident = await stepped_up_programme(client, programme, "SMS")
    h = ident.headers
    for path in ("/stepup/challenges/otp/EMAIL", "/stepup/challenges/otp/AUTHY"):
        assert invalid_fields(await client.post(f"{LATEST}{path}", headers=h)) == {"channel": "IN"}
    r = await client.post(
        f"{LATEST}/stepup/challenges/otp/PUSH/verify", headers=h, json={"verificationCode": CODE}
    )
    assert invalid_fields(r) == {"channel": "IN"}
    for path in ("/stepup/challenges/push/SMS", "/stepup/challenges/push/AUTHENTICATOR_APP"):
        assert invalid_fields(await client.post(f"{LATEST}{path}", headers=h)) == {"channel": "IN"}
    url = f"{OTP}/verify"
    assert invalid_fields(await client.post(url, headers=h, json={})) == {
        "verificationCode": "REQUIRED"
    }
    r = await client.post(url, headers=h, json={"verificationCode": "9" * 51})
    assert invalid_fields(r) == {"verificationCode": "SIZE"}
    r = await client.post(url, headers=h, json={"verificationCode": "12 34"})
    assert invalid_fields(r) == {"verificationCode": "REGEX"}
    assert await probe(client, h) is False


async def test_a_rate_limited_step_up_keeps_its_idempotency_ref(client, programme):
    """Rate-limited operations authenticate before their ref is claimed (the per-user limit
    needs the caller), so the claim goes on its own there: the same ref replays the first
    answer, without a second challenge, and another ref runs the operation again."""
    _, ident = await stepped_up_programme(client, programme, "AUTHY")
    once = {**ident.headers, "idempotency-ref": "push-once"}
    first = await client.post(f"{PUSH}/AUTHY", headers=once)
    assert first.status_code == 200, first.text
    again = await client.post(f"{PUSH}/AUTHY", headers=once)
    assert (again.status_code, again.json()) == (200, first.json())
    # Not a replay: one challenge in flight per session.
    other = {**ident.headers, "idempotency-ref": "push-twice"}
    assert_409(await client.post(f"{PUSH}/AUTHY", headers=other), "CHALLENGE_LIMIT_EXCEEDED")


# Push


@pytest.mark.parametrize("channel", ["AUTHY", "BIOMETRIC"])
async def test_push_step_up_with_verify_success(client, programme, channel):
    p, ident = await stepped_up_programme(client, programme, channel)
    unused = other_push(channel)
    cid = await challenge(client, ident.headers, channel)
    # One challenge in flight per session.
    r = await client.post(f"{PUSH}/{channel}", headers=ident.headers)
    assert_409(r, "CHALLENGE_LIMIT_EXCEEDED")
    assert await probe(client, ident.headers, unused) is False
    r = await settle(client, p, ident.root_id, cid, "verify_success")
    assert r.status_code == 200, r.text
    assert r.json() == {"code": "COMPLETED"}
    assert await probe(client, ident.headers, unused) is True
    # Settling again is refused; a new challenge can be issued.
    for how in ("verify_success", "verify_invalid", "verify_expired"):
        assert_409(await settle(client, p, ident.root_id, cid, how), "CHALLENGE_ALREADY_SETTLED")
    assert await challenge(client, ident.headers, channel) != cid
    # For the rest of the session; a new login is not stepped up.
    await advance_keeping(client, p, 400, ident.headers)
    assert await probe(client, ident.headers, unused) is True
    fresh = bearer(p, (await login(client, p, ident.email)).json()["token"])
    assert await probe(client, fresh, unused) is False


async def test_push_verify_invalid_and_expired_leave_step_up_required(client, programme):
    p, ident = await stepped_up_programme(client, programme, "AUTHY")
    assert_409(
        await client.post(f"{PUSH}/BIOMETRIC", headers=ident.headers), "CHANNEL_NOT_REGISTERED"
    )
    cid = await challenge(client, ident.headers, "AUTHY")
    r = await settle(client, p, ident.root_id, cid, "verify_invalid")
    assert (r.status_code, r.json()) == (200, {"code": "DENIED"})
    assert await probe(client, ident.headers) is False
    assert_409(
        await settle(client, p, ident.root_id, cid, "verify_success"), "CHALLENGE_ALREADY_SETTLED"
    )
    assert await probe(client, ident.headers) is False

    cid = await challenge(client, ident.headers, "AUTHY")
    r = await settle(client, p, ident.root_id, cid, "verify_expired")
    assert (r.status_code, r.json()) == (200, {"code": "EXPIRED"})
    assert await probe(client, ident.headers) is False
    assert_409(
        await settle(client, p, ident.root_id, cid, "verify_expired"), "CHALLENGE_ALREADY_SETTLED"
    )

    # A later challenge can still succeed.
    cid = await challenge(client, ident.headers, "AUTHY")
    r = await settle(client, p, ident.root_id, cid, "verify_success")
    assert r.json() == {"code": "COMPLETED"}
    assert await probe(client, ident.headers) is True


async def test_push_challenge_times_out_after_five_minutes(client, programme):
    p, ident = await stepped_up_programme(client, programme, "AUTHY")
    cid = await challenge(client, ident.headers, "AUTHY")
    # (The programme clock also runs in real time: leave slack for a slow machine.)
    await advance_keeping(client, p, 290, ident.headers)
    assert_409(
        await client.post(f"{PUSH}/AUTHY", headers=ident.headers), "CHALLENGE_LIMIT_EXCEEDED"
    )
    await advance_keeping(client, p, 10, ident.headers)
    # Time is up: it can no longer be settled, and a new one may be issued.
    assert_409(await settle(client, p, ident.root_id, cid, "verify_success"), "CHALLENGE_EXPIRED")
    assert await probe(client, ident.headers) is False
    cid2 = await challenge(client, ident.headers, "AUTHY")
    assert_409(
        await settle(client, p, ident.root_id, cid, "verify_success"), "CHALLENGE_ALREADY_SETTLED"
    )
    r = await settle(client, p, ident.root_id, cid2, "verify_success")
    assert r.json() == {"code": "COMPLETED"}
    assert await probe(client, ident.headers) is True


async def test_unlinking_a_device_expires_its_pending_challenge(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    await enrol_push(client, ident.headers, "AUTHY")
    cid = await challenge(client, ident.headers, "AUTHY")
    r = await client.delete(f"{LATEST}/authentication_factors/push/AUTHY", headers=ident.headers)
    assert r.status_code == 204
    assert_409(
        await settle(client, p, ident.root_id, cid, "verify_success"), "CHALLENGE_ALREADY_SETTLED"
    )
    assert_409(await client.post(f"{PUSH}/AUTHY", headers=ident.headers), "CHANNEL_NOT_REGISTERED")
    assert await factors(client, ident.headers) == [
        {"type": "PUSH", "status": "INACTIVE", "channel": "AUTHY"}
    ]


async def test_simulator_challenge_refusals(client, programme):
    p, ident = await stepped_up_programme(client, programme, "AUTHY")
    cid = await challenge(client, ident.headers, "AUTHY")
    other = await sign_up(client, p, "consumers")
    p2 = await programme()
    live = await programme(mode="live")
    for how in ("verify_success", "verify_invalid", "verify_expired"):
        url = f"{SIM}/{ident.root_id}/challenges/{cid}/{how}"
        assert (await client.post(url)).status_code == 400, how
        r = await client.post(url, headers={"programme-key": "unknown"})
        assert (r.status_code, r.content) == (401, b""), how
        for key in (p2.api_key, live.api_key):
            r = await client.post(url, headers={"programme-key": key})
            assert r.status_code == 404, how
        for user_id, challenge_id in (
            (other.root_id, cid),  # another user's
            (ident.root_id, "1"),
            (ident.root_id, "99999999999999999999"),
        ):
            r = await settle(client, p, user_id, challenge_id, how)
            assert r.status_code == 404, (how, user_id, challenge_id)
            assert set(r.json()) == {"code", "message"}
        r = await settle(client, p, ident.root_id, "abc", how)
        assert invalid_fields(r) == {"challenge_id": "REGEX"}
    # Still pending, and the session still needs its step-up.
    assert await probe(client, ident.headers) is False
    r = await settle(client, p, ident.root_id, cid, "verify_success")
    assert r.json() == {"code": "COMPLETED"}


async def test_step_up_is_not_demanded_when_the_programme_does_not_require_it(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    await enrol_push(client, ident.headers, "AUTHY")
    assert await probe(client, ident.headers) is True


# Refusals every step-up operation shares (D7) and 3.1.0


STEPUP_OPERATIONS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/stepup/challenges/otp/SMS", None),
    ("POST", "/stepup/challenges/otp/SMS/verify", {"verificationCode": CODE}),
    ("POST", "/stepup/challenges/push/AUTHY", None),
    ("POST", "/stepup/challenges/push/BIOMETRIC", None),
]


async def test_every_stepup_operation_checks_api_key_and_token(client, programme, container):
    ident = await check_refusals(client, programme, STEPUP_OPERATIONS)
    assert await sms_messages(container, ident.p) == []
    assert await factors(client, ident.headers) == []
