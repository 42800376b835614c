"""Auth tokens: the signing keyring (JWTs) and the server-side sessions they name."""

from __future__ import annotations

import base64
import json
import secrets

import jwt
import pytest
from sqlalchemy import select

from multibank.container import Container
from multibank.kernel.ids import new_id
from multibank.kernel.tokens import (
    AuthSession,
    SessionLimits,
    TokenKeyring,
    end_session,
    end_user_sessions,
    open_session,
    touch_session,
)
from multibank.programmes.schemas import ProgrammeCreate
from multibank.programmes.service import create_programme

SECRET_A = "a" * 32
SECRET_B = "b" * 40
LIMITS = SessionLimits(idle_ms=10_000, absolute_ms=25_000)


def ring(*pairs: tuple[str, str]) -> TokenKeyring:
    return TokenKeyring.parse(",".join(f"{kid}:{secret}" for kid, secret in pairs))


def _b64(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


# --- keyring -------------------------------------------------------------------------------------


def test_parse_reads_kid_secret_pairs() -> None:
    kr = TokenKeyring.parse(f"k1:{SECRET_A}, k2:{SECRET_B}")
    assert kr.keys == (("k1", SECRET_A), ("k2", SECRET_B))


def test_secret_may_contain_colons() -> None:
    secret = "x:" * 20
    assert TokenKeyring.parse(f"k1:{secret}").keys == (("k1", secret),)


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "k1",
        "k1:",
        f":{SECRET_A}",
        "k1:" + "s" * 31,
        f"k1:{SECRET_A},k2:short",
        f"k1:{SECRET_A},",
    ],
)
def test_parse_refuses_missing_kids_and_short_secrets(spec: str) -> None:
    with pytest.raises(ValueError):
        TokenKeyring.parse(spec)


def test_generated_spec_parses_and_differs_each_time() -> None:
    a, b = TokenKeyring.generate_spec(), TokenKeyring.generate_spec()
    assert a != b
    kr = TokenKeyring.parse(a)
    assert len(kr.keys) == 1
    assert len(kr.keys[0][1]) >= 32


def test_sign_verify_round_trip() -> None:
    kr = ring(("k1", SECRET_A))
    big = 2**62 + 12_345  # ids are 64-bit: they travel as strings, not JS-unsafe numbers
    token = kr.sign(big, 42)
    assert kr.verify(token) == (big, 42)
    header = jwt.get_unverified_header(token)
    assert header["kid"] == "k1" and header["alg"] == "HS256"
    claims = jwt.decode(token, SECRET_A, algorithms=["HS256"], issuer="multibank")
    assert claims["sid"] == str(big) and claims["pid"] == "42"


def test_first_key_signs() -> None:
    kr = ring(("new", SECRET_B), ("old", SECRET_A))
    token = kr.sign(1, 2)
    assert jwt.get_unverified_header(token)["kid"] == "new"
    assert ring(("new", SECRET_B)).verify(token) == (1, 2)
    assert ring(("old", SECRET_A)).verify(token) is None


def test_key_rotation() -> None:
    old_ring = ring(("k1", SECRET_A))
    old_token = old_ring.sign(11, 22)
    rotated = ring(("k2", SECRET_B), ("k1", SECRET_A))  # new key signs, old one still verifies
    assert rotated.verify(old_token) == (11, 22)
    new_token = rotated.sign(33, 44)
    assert rotated.verify(new_token) == (33, 44)
    retired = ring(("k2", SECRET_B))  # the old key is dropped
    assert retired.verify(old_token) is None
    assert retired.verify(new_token) == (33, 44)


def test_unknown_kid_is_refused_even_with_the_right_secret() -> None:
    token = ring(("k1", SECRET_A)).sign(1, 2)
    assert ring(("k9", SECRET_A)).verify(token) is None


def test_known_kid_with_another_secret_is_refused() -> None:
    token = ring(("k1", SECRET_A)).sign(1, 2)
    assert ring(("k1", SECRET_B)).verify(token) is None


def test_tampered_tokens_are_refused() -> None:
    kr = ring(("k1", SECRET_A))
    token = kr.sign(100, 200)
    header, payload, signature = token.split(".")
    forged_payload = _b64({"iss": "multibank", "sid": "101", "pid": "200"})
    assert kr.verify(f"{header}.{forged_payload}.{signature}") is None
    mid = len(signature) // 2
    flipped = signature[:mid] + ("A" if signature[mid] != "A" else "B") + signature[mid + 1 :]
    assert kr.verify(f"{header}.{payload}.{flipped}") is None
    assert kr.verify(f"{header}.{payload}.") is None
    assert kr.verify(f"{header}.{payload}") is None
    assert kr.verify(token) == (100, 200)  # the untouched token still passes


@pytest.mark.parametrize(
    "token",
    ["", "garbage", "a.b.c", "Bearer x.y.z", "...", "\x00", "eyJhbGciOiJIUzI1NiJ9.e30.sig"],
)
def test_garbage_tokens_are_refused(token: str) -> None:
    assert ring(("k1", SECRET_A)).verify(token) is None


def test_unsigned_token_is_refused() -> None:
    token = jwt.encode(
        {"iss": "multibank", "sid": "1", "pid": "2"}, None, algorithm="none", headers={"kid": "k1"}
    )
    assert ring(("k1", SECRET_A)).verify(token) is None


@pytest.mark.parametrize(
    "claims",
    [
        {"iss": "someone-else", "sid": "1", "pid": "2"},
        {"sid": "1", "pid": "2"},
        {"iss": "multibank", "pid": "2"},
        {"iss": "multibank", "sid": "1"},
        {"iss": "multibank", "sid": "one", "pid": "2"},
        {"iss": "multibank", "sid": "1", "pid": None},
    ],
)
def test_well_signed_tokens_with_bad_claims_are_refused(claims: dict[str, object]) -> None:
    token = jwt.encode(claims, SECRET_A, algorithm="HS256", headers={"kid": "k1"})
    assert ring(("k1", SECRET_A)).verify(token) is None


def test_token_without_kid_is_refused() -> None:
    token = jwt.encode({"iss": "multibank", "sid": "1", "pid": "2"}, SECRET_A, algorithm="HS256")
    assert ring(("k1", SECRET_A)).verify(token) is None


# --- sessions ------------------------------------------------------------------------------------


async def _programme(container: Container) -> int:
    async with container.db.transaction() as s:
        p, _key = await create_programme(
            s, container.clock, ProgrammeCreate(name=f"kt{secrets.token_hex(6)}")
        )
        return p.id


async def _open(container: Container, programme_id: int, now_ms: int, user_id: int = 1) -> int:
    async with container.db.transaction() as s:
        row = await open_session(
            s,
            programme_id=programme_id,
            user_id=user_id,
            credential_type="ROOT",
            identity_type="CORPORATE",
            identity_id=user_id,
            token_type="AUTH",
            now_ms=now_ms,
        )
        return row.id


async def _touch(
    container: Container, sid: int, pid: int, now_ms: int, limits: SessionLimits = LIMITS
) -> AuthSession | None:
    async with container.db.transaction() as s:
        return await touch_session(s, sid, pid, now_ms, limits)


async def _row(container: Container, sid: int) -> AuthSession:
    async with container.db.transaction() as s:
        return (await s.execute(select(AuthSession).where(AuthSession.id == sid))).scalar_one()


@pytest.fixture
async def pid(container: Container) -> int:
    return await _programme(container)


@pytest.fixture
def t0(container: Container) -> int:
    return container.clock.system_ms()


async def test_open_session_stores_the_row(container: Container, pid: int, t0: int) -> None:
    sid = await _open(container, pid, t0, user_id=77)
    row = await _row(container, sid)
    assert (row.programme_id, row.user_id, row.identity_id) == (pid, 77, 77)
    assert (row.credential_type, row.identity_type, row.token_type) == ("ROOT", "CORPORATE", "AUTH")
    assert row.stepped_up is False
    assert row.created_at == row.last_seen_at == t0
    assert row.ended_at is None


async def test_token_names_a_live_session(container: Container, pid: int, t0: int) -> None:
    sid = await _open(container, pid, t0)
    token = container.tokens().sign(sid, pid)
    named = container.tokens().verify(token)
    assert named == (sid, pid)
    live = await _touch(container, named[0], named[1], t0 + 1_000)
    assert live is not None and live.id == sid


async def test_touch_renews_last_seen(container: Container, pid: int, t0: int) -> None:
    sid = await _open(container, pid, t0)
    live = await _touch(container, sid, pid, t0 + 9_000)
    assert live is not None
    assert live.last_seen_at == t0 + 9_000
    assert (await _row(container, sid)).last_seen_at == t0 + 9_000  # committed, not just in memory
    # 18 s after opening is past the 10 s idle limit, but only 9 s after the renewal.
    live = await _touch(container, sid, pid, t0 + 18_000)
    assert live is not None and live.last_seen_at == t0 + 18_000


async def test_idle_expiry(container: Container, pid: int, t0: int) -> None:
    sid = await _open(container, pid, t0)
    assert await _touch(container, sid, pid, t0 + LIMITS.idle_ms + 1) is None
    assert (await _row(container, sid)).last_seen_at == t0  # a refused touch renews nothing
    assert await _touch(container, sid, pid, t0 + LIMITS.idle_ms + 2) is None


async def test_idle_limit_is_inclusive(container: Container, pid: int, t0: int) -> None:
    sid = await _open(container, pid, t0)
    assert await _touch(container, sid, pid, t0 + LIMITS.idle_ms) is not None


async def test_absolute_expiry(container: Container, pid: int, t0: int) -> None:
    sid = await _open(container, pid, t0)
    for step in (8_000, 16_000, 24_000):  # always renewed well within the idle limit
        assert await _touch(container, sid, pid, t0 + step) is not None
    assert await _touch(container, sid, pid, t0 + LIMITS.absolute_ms) is not None
    assert await _touch(container, sid, pid, t0 + LIMITS.absolute_ms + 1) is None
    assert (await _row(container, sid)).last_seen_at == t0 + LIMITS.absolute_ms


async def test_ended_session_is_dead(container: Container, pid: int, t0: int) -> None:
    sid = await _open(container, pid, t0)
    async with container.db.transaction() as s:
        await end_session(s, sid, t0 + 1_000)
    assert await _touch(container, sid, pid, t0 + 1_500) is None
    assert (await _row(container, sid)).ended_at == t0 + 1_000
    async with container.db.transaction() as s:  # ending again keeps the first end time
        await end_session(s, sid, t0 + 2_000)
    assert (await _row(container, sid)).ended_at == t0 + 1_000


async def test_end_session_leaves_other_sessions_alone(
    container: Container, pid: int, t0: int
) -> None:
    a = await _open(container, pid, t0)
    b = await _open(container, pid, t0)
    async with container.db.transaction() as s:
        await end_session(s, a, t0 + 1)
    assert await _touch(container, a, pid, t0 + 2) is None
    assert await _touch(container, b, pid, t0 + 2) is not None


async def test_session_of_another_programme(container: Container, pid: int, t0: int) -> None:
    other = await _programme(container)
    sid = await _open(container, pid, t0)
    assert await _touch(container, sid, other, t0 + 1_000) is None
    assert (await _row(container, sid)).last_seen_at == t0  # not renewed by the wrong programme
    assert await _touch(container, sid, pid, t0 + 1_000) is not None  # still alive for its own


async def test_unknown_session(container: Container, pid: int, t0: int) -> None:
    assert await _touch(container, new_id(), pid, t0) is None


async def test_end_user_sessions(container: Container, pid: int, t0: int) -> None:
    other = await _programme(container)
    mine = [await _open(container, pid, t0, user_id=5) for _ in range(3)]
    keep = await _open(container, pid, t0, user_id=5)
    another_user = await _open(container, pid, t0, user_id=6)
    same_user_elsewhere = await _open(container, other, t0, user_id=5)
    async with container.db.transaction() as s:
        await end_user_sessions(s, pid, 5, t0 + 100, keep=keep)
    for sid in mine:
        assert await _touch(container, sid, pid, t0 + 200) is None
        assert (await _row(container, sid)).ended_at == t0 + 100
    assert await _touch(container, keep, pid, t0 + 200) is not None
    assert await _touch(container, another_user, pid, t0 + 200) is not None
    assert await _touch(container, same_user_elsewhere, other, t0 + 200) is not None
    async with container.db.transaction() as s:  # without `keep`, every session of the user ends
        await end_user_sessions(s, pid, 5, t0 + 300)
    assert await _touch(container, keep, pid, t0 + 400) is None
    assert (await _row(container, mine[0])).ended_at == t0 + 100  # earlier ends are kept
    assert await _touch(container, another_user, pid, t0 + 400) is not None


async def test_open_touch_end_in_one_transaction(container: Container, pid: int, t0: int) -> None:
    async with container.db.transaction() as s:
        row = await open_session(
            s,
            programme_id=pid,
            user_id=9,
            credential_type="USER",
            identity_type="CONSUMER",
            identity_id=9,
            token_type="ACCESS",
            now_ms=t0,
        )
        live = await touch_session(s, row.id, pid, t0 + 5, LIMITS)
        assert live is not None and live.last_seen_at == t0 + 5
        await end_session(s, row.id, t0 + 6)
        assert await touch_session(s, row.id, pid, t0 + 7, LIMITS) is None
    stored = await _row(container, row.id)
    assert (stored.last_seen_at, stored.ended_at) == (t0 + 5, t0 + 6)
