"""Additional factors (contract §5.3; D11; docs/decisions/0007) on 3.29.1: list, SMS OTP enrolment
(steps 1 and 2), push enrolment and unlink, the step-up guard on the push operations, sandbox and
live codes, and the refusals every factor operation shares. 3.1.0 has none of them (404)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from multibank.container import Container
from multibank.kernel.notify import OutboxMessage
from tests.conftest import Prog
from tests.factories import CODE, PASSWORD, Identity, email, login, otp_step_up, sign_up

LATEST = "/multi"
LEGACY = "/3.1.0/multi"
DIGITS = re.compile(r"^[0-9]+$")
CORPORATE_MOBILE = "+447700900123"  # tests/factories.py corporate root user
CONSUMER_MOBILE = "+35679000000"
OTP = "/authentication_factors/otp/SMS"
FACTORS = "/authentication_factors"


def bearer(p: Prog, token: str) -> dict[str, str]:
    return {**p.headers, "Authorization": f"Bearer {token}"}


def assert_409(r: httpx.Response, code: str) -> None:
    assert r.status_code == 409, r.text
    assert r.json() == {"errorCode": code}


def assert_step_up_required(r: httpx.Response) -> None:
    assert r.status_code == 403, r.text
    body = r.json()
    assert set(body) == {"errorCode", "message"}
    assert body["errorCode"] == "STEP_UP_REQUIRED"
    assert "step" in body["message"].lower()


def invalid_fields(r: httpx.Response) -> dict[str, str]:
    assert r.status_code == 400, r.text
    body = r.json()
    assert isinstance(body["message"], str)
    return {f["fieldName"]: f["error"] for f in body["syntaxErrors"]["invalidFields"]}


async def advance(client: httpx.AsyncClient, p: Prog, seconds: int) -> None:
    r = await client.post(
        "/simulate/api/clock/advance",
        headers={"programme-key": p.api_key},
        json={"seconds": seconds},
    )
    assert r.status_code == 200, r.text


async def advance_keeping(
    client: httpx.AsyncClient, p: Prog, seconds: int, *sessions: dict[str, str]
) -> None:
    """Moves the clock in steps shorter than the 5-minute idle limit, touching each session."""
    while seconds > 0:
        step = min(seconds, 240)
        await advance(client, p, step)
        seconds -= step
        for headers in sessions:
            r = await client.get(f"{LATEST}{FACTORS}", headers=headers)
            assert r.status_code == 200, r.text


async def factors(client: httpx.AsyncClient, headers: dict[str, str]) -> list[dict[str, str]]:
    r = await client.get(f"{LATEST}{FACTORS}", headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    if not body:
        return []  # D11: no factor is `{}`, `factors` absent, as on the reference
    assert set(body) == {"factors"} and body["factors"], body
    result: list[dict[str, str]] = body["factors"]
    return result


async def sms_messages(container: Container, p: Prog) -> list[OutboxMessage]:
    """The programme's SMS outbox, oldest first."""
    async with container.db.transaction() as session:
        stmt = (
            select(OutboxMessage)
            .where(OutboxMessage.programme_id == int(p.id), OutboxMessage.channel == "SMS")
            .order_by(OutboxMessage.created_at, OutboxMessage.id)
        )
        return list((await session.execute(stmt)).scalars().all())


def code_in(message: OutboxMessage) -> str:
    found = re.search(r"\b([0-9]{6})\b", message.body)
    assert found is not None, message.body
    return found.group(1)


async def root_mobile_verified(client: httpx.AsyncClient, ident: Identity) -> bool:
    r = await client.get(f"{LATEST}/{ident.kind}", headers=ident.headers)
    assert r.status_code == 200, r.text
    verified: bool = r.json()["rootUser"]["mobileNumberVerified"]
    return verified


async def enrol_sms(client: httpx.AsyncClient, headers: dict[str, str], code: str = CODE) -> None:
    r = await client.post(f"{LATEST}{OTP}", headers=headers)
    assert r.status_code == 204, r.text
    r = await client.post(f"{LATEST}{OTP}/verify", headers=headers, json={"verificationCode": code})
    assert r.status_code == 204, r.text


async def enrol_push(
    client: httpx.AsyncClient, headers: dict[str, str], channel: str = "AUTHY"
) -> str:
    r = await client.post(f"{LATEST}/authentication_factors/push/{channel}", headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"linkingCode"}
    code: str = body["linkingCode"]
    return code


async def invited_user(client: httpx.AsyncClient, ident: Identity, **over: Any) -> dict[str, str]:
    """An authorised user of `ident` who set a password: their bearer headers."""
    user = {"name": "Bob", "surname": "Builder", "email": email(), **over}
    r = await client.post(f"{LATEST}/users", headers=ident.headers, json=user)
    assert r.status_code == 200, r.text
    uid = r.json()["id"]
    r = await client.post(f"{LATEST}/users/{uid}/invite", headers=ident.headers)
    assert r.status_code == 204, r.text
    r = await client.post(
        f"{LATEST}/users/{uid}/invite/consume",
        headers=ident.p.headers,
        json={"inviteCode": CODE, "password": {"value": PASSWORD}},
    )
    assert r.status_code == 200, r.text
    return bearer(ident.p, r.json()["token"])


# List


@pytest.mark.parametrize("base", [LATEST, "/3.29.1/multi"])
@pytest.mark.parametrize("kind", ["corporates", "consumers"])
async def test_a_user_without_factors_gets_an_empty_object(client, programme, kind, base):
    """D11: `{}`, `factors` absent, as on the reference; the official demo app reads
    `factors[0].status` whenever `factors` is there, and crashed on `[]`."""
    p = await programme()
    ident = await sign_up(client, p, kind)
    r = await client.get(f"{base}{FACTORS}", headers=ident.headers)
    assert r.status_code == 200, r.text
    assert r.json() == {}


# SMS OTP enrolment


@pytest.mark.parametrize(
    ("kind", "mobile"), [("corporates", CORPORATE_MOBILE), ("consumers", CONSUMER_MOBILE)]
)
async def test_sms_enrolment_activates_the_factor_and_verifies_the_mobile(
    client, programme, container, kind, mobile
):
    p = await programme()
    ident = await sign_up(client, p, kind)
    assert await root_mobile_verified(client, ident) is False

    r = await client.post(f"{LATEST}{OTP}", headers=ident.headers)
    assert (r.status_code, r.content) == (204, b"")
    assert await factors(client, ident.headers) == [
        {"type": "OTP", "status": "PENDING_VERIFICATION", "channel": "SMS"}
    ]
    [sms] = await sms_messages(container, p)
    assert sms.recipient == mobile
    assert code_in(sms) == CODE
    assert sms.deliver is False  # sandbox never delivers (D1)
    assert await root_mobile_verified(client, ident) is False

    r = await client.post(
        f"{LATEST}{OTP}/verify", headers=ident.headers, json={"verificationCode": CODE}
    )
    assert (r.status_code, r.content) == (204, b"")
    assert await factors(client, ident.headers) == [
        {"type": "OTP", "status": "ACTIVE", "channel": "SMS"}
    ]
    assert await root_mobile_verified(client, ident) is True


async def test_sms_enrolment_conflicts(client, programme, container):
    p = await programme()
    ident = await sign_up(client, p)
    url = f"{LATEST}{OTP}"
    # Step 2 before step 1: no code was sent.
    r = await client.post(f"{url}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert_409(r, "VERIFICATION_CODE_INVALID")
    assert await factors(client, ident.headers) == []

    assert (await client.post(url, headers=ident.headers)).status_code == 204
    # A new code only after 15 seconds (D11).
    assert_409(await client.post(url, headers=ident.headers), "RETRY_IN_15SEC")
    # (The programme clock also runs in real time: leave slack for a slow machine.)
    await advance(client, p, 10)
    assert_409(await client.post(url, headers=ident.headers), "RETRY_IN_15SEC")
    await advance(client, p, 5)
    assert (await client.post(url, headers=ident.headers)).status_code == 204
    assert len(await sms_messages(container, p)) == 2

    # A wrong code is refused and does not use up the sandbox code (D11).
    for wrong in ("000000", "1234567", "abc"):
        r = await client.post(
            f"{url}/verify", headers=ident.headers, json={"verificationCode": wrong}
        )
        assert_409(r, "VERIFICATION_CODE_INVALID")
    assert (await factors(client, ident.headers))[0]["status"] == "PENDING_VERIFICATION"
    r = await client.post(f"{url}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert r.status_code == 204, r.text

    # Once active: both steps refuse.
    await advance(client, p, 15)
    assert_409(await client.post(url, headers=ident.headers), "CHANNEL_ALREADY_REGISTERED")
    r = await client.post(f"{url}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert_409(r, "CHANNEL_ALREADY_REGISTERED")
    assert len(await sms_messages(container, p)) == 2  # no code sent by a refusal
    assert await factors(client, ident.headers) == [
        {"type": "OTP", "status": "ACTIVE", "channel": "SMS"}
    ]


async def test_sms_enrolment_code_expires_after_ten_minutes(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    assert (await client.post(f"{LATEST}{OTP}", headers=ident.headers)).status_code == 204
    await advance_keeping(client, p, 600, ident.headers)
    r = await client.post(
        f"{LATEST}{OTP}/verify", headers=ident.headers, json={"verificationCode": CODE}
    )
    assert_409(r, "VERIFICATION_CODE_EXPIRED")
    assert (await factors(client, ident.headers))[0]["status"] == "PENDING_VERIFICATION"
    # A new code works.
    await enrol_sms(client, ident.headers)
    assert (await factors(client, ident.headers))[0]["status"] == "ACTIVE"


async def test_sms_enrolment_needs_a_mobile(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    user = await invited_user(client, ident)  # no mobile
    assert_409(await client.post(f"{LATEST}{OTP}", headers=user), "MOBILE_NUMBER_NOT_AVAILABLE")
    assert await factors(client, user) == []
    # An authorised user with a mobile enrols for themself only.
    other = await invited_user(client, ident, mobile={"countryCode": "+44", "number": "7700900555"})
    await enrol_sms(client, other)
    assert await factors(client, other) == [{"type": "OTP", "status": "ACTIVE", "channel": "SMS"}]
    assert await factors(client, ident.headers) == []
    assert await root_mobile_verified(client, ident) is False


async def test_changing_the_mobile_retires_the_sms_factor(client, programme, container):
    """The factor is bound to the mobile it verified; a new number must be enrolled again."""
    p = await programme()
    ident = await sign_up(client, p)
    assert (await client.post(f"{LATEST}{OTP}", headers=ident.headers)).status_code == 204
    # A code sent to the old number cannot verify a new one.
    new = {"countryCode": "+44", "number": "7700900999"}
    r = await client.patch(f"{LATEST}/corporates", headers=ident.headers, json={"mobile": new})
    assert r.status_code == 200, r.text
    r = await client.post(
        f"{LATEST}{OTP}/verify", headers=ident.headers, json={"verificationCode": CODE}
    )
    assert_409(r, "VERIFICATION_CODE_INVALID")

    await enrol_sms(client, ident.headers)  # to the new number, at once
    assert (await sms_messages(container, p))[-1].recipient == "+447700900999"
    r = await client.patch(
        f"{LATEST}/corporates",
        headers=ident.headers,
        json={"mobile": {"countryCode": "+44", "number": "7700900111"}},
    )
    assert r.status_code == 200, r.text
    assert await root_mobile_verified(client, ident) is False
    assert await factors(client, ident.headers) == [
        {"type": "OTP", "status": "INACTIVE", "channel": "SMS"}
    ]
    r = await client.post(f"{LATEST}/stepup/challenges/otp/SMS", headers=ident.headers)
    assert_409(r, "CHANNEL_NOT_REGISTERED")
    await enrol_sms(client, ident.headers)
    assert (await sms_messages(container, p))[-1].recipient == "+447700900111"
    assert (await factors(client, ident.headers))[0]["status"] == "ACTIVE"
    assert await root_mobile_verified(client, ident) is True


async def test_live_sms_enrolment_uses_a_random_code_that_dies_after_five_tries(
    client, programme, container
):
    p = await programme(mode="live")
    ident = await sign_up(client, p, verify_email=False)
    assert (await client.post(f"{LATEST}{OTP}", headers=ident.headers)).status_code == 204
    [sms] = await sms_messages(container, p)
    assert sms.recipient == CORPORATE_MOBILE
    assert sms.deliver is True
    code = code_in(sms)
    wrong = "000000" if code != "000000" else "111111"
    for _ in range(4):
        r = await client.post(
            f"{LATEST}{OTP}/verify", headers=ident.headers, json={"verificationCode": wrong}
        )
        assert_409(r, "VERIFICATION_CODE_INVALID")
    r = await client.post(
        f"{LATEST}{OTP}/verify", headers=ident.headers, json={"verificationCode": code}
    )
    assert r.status_code == 204, r.text
    assert (await factors(client, ident.headers))[0]["status"] == "ACTIVE"

    # Another user: five wrong tries kill the code, the right one no longer works.
    other = await sign_up(client, p, "consumers", verify_email=False)
    assert (await client.post(f"{LATEST}{OTP}", headers=other.headers)).status_code == 204
    code = code_in((await sms_messages(container, p))[-1])
    wrong = "000000" if code != "000000" else "111111"
    for _ in range(5):
        r = await client.post(
            f"{LATEST}{OTP}/verify", headers=other.headers, json={"verificationCode": wrong}
        )
        assert_409(r, "VERIFICATION_CODE_INVALID")
    r = await client.post(
        f"{LATEST}{OTP}/verify", headers=other.headers, json={"verificationCode": code}
    )
    assert_409(r, "VERIFICATION_CODE_INVALID")
    assert (await factors(client, other.headers))[0]["status"] == "PENDING_VERIFICATION"


async def test_factor_operations_refuse_malformed_requests(client, programme):
    """Channels outside the operation's enum are malformed requests (400 `IN`), as are codes
    that are not a Nonce; nothing changes."""
    p = await programme()
    ident = await sign_up(client, p)
    h = ident.headers
    for method, path in (
        ("POST", "/authentication_factors/otp/EMAIL"),
        ("POST", "/authentication_factors/otp/sms"),
        ("POST", "/authentication_factors/otp/AUTHY"),
        ("POST", "/authentication_factors/otp/EMAIL/verify"),
        ("POST", "/authentication_factors/push/SMS"),
        ("POST", "/authentication_factors/push/AUTHENTICATOR_APP"),
        ("DELETE", "/authentication_factors/push/SMS"),
        ("DELETE", "/authentication_factors/push/authy"),
    ):
        kwargs: dict[str, Any] = {"json": {"verificationCode": CODE}} if "verify" in path else {}
        r = await client.request(method, f"{LATEST}{path}", headers=h, **kwargs)
        assert invalid_fields(r) == {"channel": "IN"}, path
    url = f"{LATEST}{OTP}/verify"
    assert invalid_fields(await client.post(url, headers=h, json={})) == {
        "verificationCode": "REQUIRED"
    }
    assert invalid_fields(await client.post(url, headers=h)) == {"body": "REQUIRED"}
    r = await client.post(url, headers=h, json={"verificationCode": "1" * 51})
    assert invalid_fields(r) == {"verificationCode": "SIZE"}
    r = await client.post(url, headers=h, json={"verificationCode": "12 34 56"})
    assert invalid_fields(r) == {"verificationCode": "REGEX"}
    r = await client.post(
        url, headers={**h, "content-type": "application/json"}, content=b"{not json"
    )
    assert r.status_code == 400
    assert await factors(client, h) == []


# Push enrolment


async def test_push_enrolment_in_sandbox_is_active_at_once(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    assert await enrol_push(client, ident.headers, "AUTHY") == CODE
    assert await factors(client, ident.headers) == [
        {"type": "PUSH", "status": "ACTIVE", "channel": "AUTHY"}
    ]
    assert await enrol_push(client, ident.headers, "BIOMETRIC") == CODE
    await enrol_sms(client, ident.headers)
    assert await factors(client, ident.headers) == [
        {"type": "PUSH", "status": "ACTIVE", "channel": "AUTHY"},
        {"type": "BIOMETRIC", "status": "ACTIVE", "channel": "BIOMETRIC"},
        {"type": "OTP", "status": "ACTIVE", "channel": "SMS"},
    ]
    for channel in ("AUTHY", "BIOMETRIC"):
        r = await client.post(
            f"{LATEST}/authentication_factors/push/{channel}", headers=ident.headers
        )
        assert_409(r, "CHANNEL_ALREADY_REGISTERED")


async def test_push_unlink_and_enrol_again(client, programme):
    p = await programme()
    ident = await sign_up(client, p)
    url = f"{LATEST}/authentication_factors/push"
    assert_409(await client.delete(f"{url}/AUTHY", headers=ident.headers), "CHANNEL_NOT_REGISTERED")
    await enrol_push(client, ident.headers, "AUTHY")
    await enrol_push(client, ident.headers, "BIOMETRIC")
    r = await client.delete(f"{url}/AUTHY", headers=ident.headers)
    assert (r.status_code, r.content) == (204, b"")
    assert await factors(client, ident.headers) == [
        {"type": "PUSH", "status": "INACTIVE", "channel": "AUTHY"},
        {"type": "BIOMETRIC", "status": "ACTIVE", "channel": "BIOMETRIC"},
    ]
    assert_409(await client.delete(f"{url}/AUTHY", headers=ident.headers), "CHANNEL_NOT_REGISTERED")
    await enrol_push(client, ident.headers, "AUTHY")
    assert (await factors(client, ident.headers))[0] == {
        "type": "PUSH",
        "status": "ACTIVE",
        "channel": "AUTHY",
    }
    # A user's factors are their own: another user of the identity has none to unlink.
    user = await invited_user(client, ident)
    assert_409(await client.delete(f"{url}/AUTHY", headers=user), "CHANNEL_NOT_REGISTERED")
    assert (await factors(client, ident.headers))[0]["status"] == "ACTIVE"


async def test_live_push_enrolment_waits_for_the_device(client, programme):
    p = await programme(mode="live")
    ident = await sign_up(client, p, verify_email=False)
    first = await enrol_push(client, ident.headers, "AUTHY")
    assert DIGITS.match(first) and len(first) == 6
    assert await factors(client, ident.headers) == [
        {"type": "PUSH", "status": "PENDING_VERIFICATION", "channel": "AUTHY"}
    ]
    # Still pending: asking again gives a new linking code; a pending device cannot be challenged.
    await enrol_push(client, ident.headers, "AUTHY")
    r = await client.post(f"{LATEST}/stepup/challenges/push/AUTHY", headers=ident.headers)
    assert_409(r, "CHANNEL_NOT_REGISTERED")
    r = await client.delete(f"{LATEST}/authentication_factors/push/AUTHY", headers=ident.headers)
    assert r.status_code == 204, r.text
    assert (await factors(client, ident.headers))[0]["status"] == "INACTIVE"


# The step-up guard on push enrol and unlink (contract §2)


async def test_push_operations_demand_step_up(client, programme):
    """D11a: push enrolment and unlink need step-up like every operation contract section 2
    lists, even before the user has any factor (else whoever enrols first owns the second
    factor). A user without a factor enrols SMS OTP (never guarded) and steps up with it."""
    p = await programme(stepUpRequired=True)
    ident = await sign_up(client, p)
    url = f"{LATEST}/authentication_factors/push"
    assert_step_up_required(await client.post(f"{url}/AUTHY", headers=ident.headers))
    assert_step_up_required(await client.delete(f"{url}/AUTHY", headers=ident.headers))
    assert await factors(client, ident.headers) == []
    await enrol_sms(client, ident.headers)
    await otp_step_up(client, ident.headers)
    await enrol_push(client, ident.headers, "AUTHY")
    # A new login: step-up first again.
    ident.token = (await login(client, p, ident.email)).json()["token"]
    assert_step_up_required(await client.post(f"{url}/BIOMETRIC", headers=ident.headers))
    assert_step_up_required(await client.delete(f"{url}/AUTHY", headers=ident.headers))
    assert_step_up_required(await client.delete(f"{url}/BIOMETRIC", headers=ident.headers))
    assert {f["channel"]: f["status"] for f in await factors(client, ident.headers)} == {
        "SMS": "ACTIVE",
        "AUTHY": "ACTIVE",
    }
    # Step up with the push factor; then both operations work for the rest of the session.
    r = await client.post(f"{LATEST}/stepup/challenges/push/AUTHY", headers=ident.headers)
    assert r.status_code == 200, r.text
    r = await client.post(
        f"/simulate/api/factors/{ident.root_id}/challenges/{r.json()['id']}/verify_success",
        headers={"programme-key": p.api_key},
    )
    assert r.json() == {"code": "COMPLETED"}
    await enrol_push(client, ident.headers, "BIOMETRIC")
    assert (await client.delete(f"{url}/AUTHY", headers=ident.headers)).status_code == 204
    # A new login is not stepped up.
    r = await login(client, p, ident.email)
    fresh = bearer(p, r.json()["token"])
    assert_step_up_required(await client.delete(f"{url}/BIOMETRIC", headers=fresh))
    assert_step_up_required(await client.post(f"{url}/AUTHY", headers=fresh))


async def test_an_active_sms_factor_alone_makes_push_enrolment_demand_step_up(client, programme):
    p = await programme(stepUpRequired=True)
    ident = await sign_up(client, p)
    await enrol_sms(client, ident.headers)  # OTP enrolment itself is never guarded
    url = f"{LATEST}/authentication_factors/push/AUTHY"
    assert_step_up_required(await client.post(url, headers=ident.headers))
    await otp_step_up(client, ident.headers)
    await enrol_push(client, ident.headers, "AUTHY")


async def test_step_up_setting_changes_take_effect_at_once(client, programme, admin_headers):
    p = await programme()
    ident = await sign_up(client, p)
    await enrol_push(client, ident.headers, "AUTHY")
    url = f"{LATEST}/authentication_factors/push/BIOMETRIC"
    await enrol_push(client, ident.headers, "BIOMETRIC")  # not demanded by this programme
    r = await client.patch(
        f"/portal/api/programmes/{p.id}/settings",
        headers=admin_headers,
        json={"stepUpRequired": True},
    )
    assert r.status_code == 200, r.text
    assert_step_up_required(await client.delete(url, headers=ident.headers))
    r = await client.patch(
        f"/portal/api/programmes/{p.id}/settings",
        headers=admin_headers,
        json={"stepUpRequired": False},
    )
    assert r.status_code == 200, r.text
    assert (await client.delete(url, headers=ident.headers)).status_code == 204


# Refusals every factor operation shares (D7) and 3.1.0


FACTOR_OPERATIONS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", FACTORS, None),
    ("POST", OTP, None),
    ("POST", f"{OTP}/verify", {"verificationCode": CODE}),
    ("POST", "/authentication_factors/push/AUTHY", None),
    ("DELETE", "/authentication_factors/push/AUTHY", None),
]


async def check_refusals(
    client: httpx.AsyncClient,
    programme: Any,
    ops: list[tuple[str, str, dict[str, Any] | None]],
) -> Identity:
    """No api-key 400, unknown key 401, no or garbage token 401, another programme's key with
    this token 403, and 404 on 3.1.0; none of it changes anything."""
    p = await programme()
    ident = await sign_up(client, p)
    p2 = await programme()
    token = {"Authorization": f"Bearer {ident.token}"}
    for method, path, body in ops:
        what = f"{method} {path}"
        kwargs: dict[str, Any] = {} if body is None else {"json": body}
        url = f"{LATEST}{path}"
        r = await client.request(method, url, headers=token, **kwargs)
        assert r.status_code == 400, what
        r = await client.request(method, url, headers={**token, "api-key": "unknown"}, **kwargs)
        assert (r.status_code, r.content) == (401, b""), what
        r = await client.request(method, url, headers=p.headers, **kwargs)
        assert (r.status_code, r.content) == (401, b""), what
        r = await client.request(method, url, headers=bearer(p, "garbage.token.x"), **kwargs)
        assert (r.status_code, r.content) == (401, b""), what
        r = await client.request(method, url, headers={**token, **p2.headers}, **kwargs)
        assert (r.status_code, r.content) == (403, b""), what
        r = await client.request(method, f"{LEGACY}{path}", headers=ident.headers, **kwargs)
        assert r.status_code == 404, what
    return ident


async def test_every_factor_operation_checks_api_key_and_token(client, programme, container):
    ident = await check_refusals(client, programme, FACTOR_OPERATIONS)
    assert await factors(client, ident.headers) == []
    assert await sms_messages(container, ident.p) == []
