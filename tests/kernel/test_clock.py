"""The clock: real time in epoch ms, a frozen clock for tests, per-programme sandbox offsets."""

from __future__ import annotations

import time

import pytest

from multibank.kernel.clock import Clock, FrozenClock, ProgrammeClock


def test_system_clock_is_epoch_milliseconds() -> None:
    before = int(time.time() * 1000)
    now = Clock().system_ms()
    after = int(time.time() * 1000)
    assert isinstance(now, int)
    assert before <= now <= after


def test_system_clock_now_adds_offset() -> None:
    clock = Clock()
    before = clock.system_ms()
    ahead, behind = clock.now_ms(3_600_000), clock.now_ms(-1_000)
    after = clock.system_ms()
    assert before + 3_600_000 <= ahead <= after + 3_600_000
    assert before - 1_000 <= behind <= after - 1_000


def test_frozen_clock_stands_still_until_advanced() -> None:
    clock = FrozenClock(1_700_000_000_000)
    assert clock.system_ms() == clock.system_ms() == 1_700_000_000_000
    assert clock.now_ms() == 1_700_000_000_000
    assert clock.now_ms(250) == 1_700_000_000_250


@pytest.mark.parametrize(
    ("seconds", "delta_ms"),
    [(1, 1_000), (0.5, 500), (0.001, 1), (1.001, 1_001), (0.29, 290), (86_400, 86_400_000)],
)
def test_frozen_clock_advance(seconds: float, delta_ms: int) -> None:
    clock = FrozenClock(1_000)
    clock.advance(seconds)
    assert clock.system_ms() == 1_000 + delta_ms


def test_frozen_clock_advances_accumulate() -> None:
    clock = FrozenClock(0)
    for _ in range(1_000):
        clock.advance(0.001)
    clock.advance(60)
    assert clock.system_ms() == 61_000
    assert isinstance(clock.system_ms(), int)


def test_programme_clock_adds_programme_offset() -> None:
    base = FrozenClock(1_000_000)
    assert ProgrammeClock(base, 0).now_ms() == 1_000_000
    assert ProgrammeClock(base, 7 * 86_400_000).now_ms() == 1_000_000 + 7 * 86_400_000
    assert ProgrammeClock(base, -500).now_ms() == 999_500


def test_programme_clock_follows_server_clock() -> None:
    base = FrozenClock(1_000_000)
    pc = ProgrammeClock(base, 60_000)
    base.advance(30)
    assert pc.now_ms() == 1_000_000 + 30_000 + 60_000
    assert base.system_ms() == 1_030_000  # the offset never leaks into the server clock


def test_programme_clocks_are_independent() -> None:
    base = FrozenClock(5_000)
    a, b = ProgrammeClock(base, 1_000), ProgrammeClock(base, 2_000)
    assert (a.now_ms(), b.now_ms()) == (6_000, 7_000)
    a.offset_ms += 10_000  # a sandbox client moves its programme's time forward
    assert (a.now_ms(), b.now_ms()) == (16_000, 7_000)


def test_programme_clock_on_real_clock() -> None:
    before = int(time.time() * 1000)
    now = ProgrammeClock(Clock(), 86_400_000).now_ms()
    after = int(time.time() * 1000)
    assert before + 86_400_000 <= now <= after + 86_400_000
