"""Rate limits: every test runs on in-process memory and on Redis.

Redis is taken from `MULTIBANK_TEST_REDIS_URL` (default redis://127.0.0.1:6379). When it is not
reachable the Redis half is skipped, or fails when `CI=true`. Each test gets its own key namespace,
deleted afterwards, so runs never see each other's counters.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
from collections.abc import AsyncIterator

import pytest

from multibank.kernel.errors import DomainError, TooManyRequests
from multibank.kernel.ratelimit import InProcessStorage, RateLimiter

REDIS_URL = os.environ.get("MULTIBANK_TEST_REDIS_URL", "redis://127.0.0.1:6379")
RUN = f"multibank-test-{os.getpid()}-{secrets.token_hex(4)}"
HEADER = re.compile(r"^\d+(, \d+;w=\d+)+$")


_reachability: dict[str, str | None] = {}  # asked once per run, not once per test


async def _redis_unreachable(limiter: RateLimiter) -> str | None:
    if REDIS_URL not in _reachability:
        try:
            ok = await asyncio.wait_for(limiter.storage.check(), timeout=3)
            _reachability[REDIS_URL] = None if ok else "check() answered False"
        except Exception as exc:  # any failure to talk to it means "not reachable"
            _reachability[REDIS_URL] = f"{type(exc).__name__}: {exc}"
    return _reachability[REDIS_URL]


@pytest.fixture(params=["memory", "redis"])
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[RateLimiter]:
    if request.param == "memory":
        yield RateLimiter()
        return
    lim = RateLimiter(REDIS_URL, namespace=f"{RUN}-{secrets.token_hex(4)}")
    problem = await _redis_unreachable(lim)
    if problem is not None:
        reason = f"Redis not reachable at {REDIS_URL} ({problem})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true requires it")
        pytest.skip(f"{reason}; set CI=true to make this a failure")
    try:
        yield lim
    finally:
        await lim.reset()  # deletes only this test's namespace


def _name() -> str:
    return f"op-{secrets.token_hex(4)}"


async def _passes(
    limiter: RateLimiter, name: str, limits: str, keys: list[tuple[str, str]]
) -> bool:
    try:
        await limiter.hit(name, limits, keys)
    except TooManyRequests:
        return False
    return True


async def test_n_hits_pass_then_429(limiter: RateLimiter) -> None:
    name, keys = _name(), [("email", "a@example.com")]
    for _ in range(3):
        await limiter.hit(name, "3/minute", keys)
    with pytest.raises(TooManyRequests) as info:
        await limiter.hit(name, "3/minute", keys)
    exc = info.value
    assert isinstance(exc, DomainError)
    assert exc.status_code == 429
    headers = exc.headers()
    assert headers["x-ratelimit-limit"] == "3, 3;w=60"
    reset = headers["x-ratelimit-reset"]
    assert reset.isdigit()
    assert 0 <= int(reset) <= 61
    with pytest.raises(TooManyRequests):  # still refused: refusals do not reset anything
        await limiter.hit(name, "3/minute", keys)


async def test_header_when_the_short_window_is_exceeded(limiter: RateLimiter) -> None:
    name, keys = _name(), [("email", "b@example.com")]
    await limiter.hit(name, "2/minute;5/hour", keys)
    await limiter.hit(name, "2/minute;5/hour", keys)
    with pytest.raises(TooManyRequests) as info:
        await limiter.hit(name, "2/minute;5/hour", keys)
    headers = info.value.headers()
    assert headers["x-ratelimit-limit"] == "2, 2;w=60, 5;w=3600"
    assert HEADER.match(headers["x-ratelimit-limit"])
    assert headers["x-ratelimit-reset"].isdigit()
    assert 0 <= int(headers["x-ratelimit-reset"]) <= 61


async def test_header_when_the_long_window_is_exceeded(limiter: RateLimiter) -> None:
    name, keys = _name(), [("ip", "192.0.2.1")]
    for _ in range(5):
        await limiter.hit(name, "10/minute;5/hour", keys)
    with pytest.raises(TooManyRequests) as info:
        await limiter.hit(name, "10/minute;5/hour", keys)
    headers = info.value.headers()
    assert headers["x-ratelimit-limit"] == "5, 10;w=60, 5;w=3600"
    assert 60 < int(headers["x-ratelimit-reset"]) <= 3601  # the hour is what must pass


async def test_other_key_values_are_independent(limiter: RateLimiter) -> None:
    name = _name()
    for _ in range(2):
        await limiter.hit(name, "2/minute", [("email", "c@example.com")])
    with pytest.raises(TooManyRequests):
        await limiter.hit(name, "2/minute", [("email", "c@example.com")])
    await limiter.hit(name, "2/minute", [("email", "d@example.com")])
    await limiter.hit(name, "2/minute", [("email", "d@example.com")])
    with pytest.raises(TooManyRequests):
        await limiter.hit(name, "2/minute", [("email", "d@example.com")])


async def test_other_names_and_dimensions_are_independent(limiter: RateLimiter) -> None:
    name, other = _name(), _name()
    await limiter.hit(name, "1/minute", [("email", "e@example.com")])
    with pytest.raises(TooManyRequests):
        await limiter.hit(name, "1/minute", [("email", "e@example.com")])
    await limiter.hit(other, "1/minute", [("email", "e@example.com")])  # another operation
    await limiter.hit(name, "1/minute", [("user", "e@example.com")])  # same value, other dimension


async def test_refused_call_does_not_consume_other_keys(limiter: RateLimiter) -> None:
    name, limits = _name(), "2/minute"
    ip, email = ("ip", "198.51.100.7"), ("email", "f@example.com")
    await limiter.hit(name, limits, [email])
    await limiter.hit(name, limits, [email])
    for _ in range(3):  # the ip is tested first, yet the spent e-mail refuses before any hit
        with pytest.raises(TooManyRequests):
            await limiter.hit(name, limits, [ip, email])
    await limiter.hit(name, limits, [ip])  # the ip still has its full allowance of two
    await limiter.hit(name, limits, [ip])
    with pytest.raises(TooManyRequests):
        await limiter.hit(name, limits, [ip])


async def test_successful_call_counts_against_every_key(limiter: RateLimiter) -> None:
    name, limits = _name(), "2/minute"
    ip, email = ("ip", "203.0.113.9"), ("email", "g@example.com")
    await limiter.hit(name, limits, [ip, email])
    await limiter.hit(name, limits, [ip, email])
    with pytest.raises(TooManyRequests):
        await limiter.hit(name, limits, [ip])
    with pytest.raises(TooManyRequests):
        await limiter.hit(name, limits, [email])


async def test_empty_key_values_are_not_a_shared_bucket(limiter: RateLimiter) -> None:
    name = _name()
    for _ in range(3):  # no e-mail given: nothing to count it against
        await limiter.hit(name, "1/minute", [("email", "")])
    await limiter.hit(name, "1/minute", [("email", ""), ("ip", "192.0.2.200")])
    with pytest.raises(TooManyRequests):  # the ip was counted
        await limiter.hit(name, "1/minute", [("email", ""), ("ip", "192.0.2.200")])


async def test_concurrent_calls_never_exceed_the_limit(limiter: RateLimiter) -> None:
    name, keys = _name(), [("email", "h@example.com")]
    results = await asyncio.gather(*(_passes(limiter, name, "3/minute", keys) for _ in range(20)))
    assert results.count(True) == 3
    assert not await _passes(limiter, name, "3/minute", keys)


async def test_reset_clears_counters(limiter: RateLimiter) -> None:
    name, keys = _name(), [("email", "i@example.com")]
    await limiter.hit(name, "1/minute", keys)
    with pytest.raises(TooManyRequests):
        await limiter.hit(name, "1/minute", keys)
    await limiter.reset()
    await limiter.hit(name, "1/minute", keys)


def test_too_many_requests_never_reports_a_negative_reset() -> None:
    exc = TooManyRequests("1, 1;w=60", -5)
    assert exc.status_code == 429
    assert exc.headers() == {"x-ratelimit-limit": "1, 1;w=60", "x-ratelimit-reset": "0"}


async def test_a_window_reopens_when_its_hits_age_out(limiter: RateLimiter) -> None:
    name = _name()
    keys = [("ip", "10.0.0.9")]
    assert await _passes(limiter, name, "2/second", keys)
    assert await _passes(limiter, name, "2/second", keys)
    assert not await _passes(limiter, name, "2/second", keys)
    await asyncio.sleep(1.1)
    assert await _passes(limiter, name, "2/second", keys)


async def test_the_memory_store_still_tidies_expired_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It tidies at most once a second (decision 0020), but it does tidy: a key whose hits
    have all expired is dropped, so the store does not grow with every address ever seen."""
    limiter = RateLimiter()
    storage = limiter.storage
    assert isinstance(storage, InProcessStorage)
    monkeypatch.setattr(InProcessStorage, "TIDY_EVERY_S", 0.0)
    await limiter.hit(_name(), "5/second", [("ip", "10.0.0.1")])
    assert len(storage.events) == 1
    await asyncio.sleep(1.1)  # the hit has expired
    await limiter.hit(_name(), "5/second", [("ip", "10.0.0.2")])  # tidies first
    for _ in range(50):
        await asyncio.sleep(0.01)
        if len(storage.events) == 1:
            break
    assert len(storage.events) == 1  # only the new key's entry is left
