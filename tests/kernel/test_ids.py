"""Time-ordered 64-bit ids: positive, int64, strictly increasing, unique across threads/nodes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from types import SimpleNamespace

import pytest

from multibank.kernel import ids
from multibank.kernel.ids import EPOCH_MS, IdGenerator, new_id

INT64_MAX = 2**63 - 1


def _fake_time(
    monkeypatch: pytest.MonkeyPatch, readings: Callable[[], float], max_calls: int = 200_000
) -> None:
    """Replace the `time` module the id generator sees, leaving the real one alone.

    The fake clock only moves when the test moves it, so a generator that sleeps or polls
    waiting for it would wait forever: the fake fails the test instead of letting it hang.
    """
    calls = 0
    sleeps = 0

    def fake_time() -> float:
        nonlocal calls
        calls += 1
        if calls > max_calls:
            raise AssertionError("id generator keeps polling a clock that does not move")
        return readings()

    def fake_sleep(seconds: float) -> None:
        nonlocal sleeps
        sleeps += 1
        if sleeps > 1_000:
            raise AssertionError("id generator keeps waiting for a clock that does not move")

    monkeypatch.setattr(ids, "time", SimpleNamespace(time=fake_time, sleep=fake_sleep))


def test_ids_are_positive_int64_digit_strings() -> None:
    gen = IdGenerator(node_id=7)
    for _ in range(1_000):
        s = gen.next()
        assert isinstance(s, str)
        assert s.isdigit() and s == s.strip() and not s.startswith("0")
        assert 0 < int(s) <= INT64_MAX
    for _ in range(1_000):
        i = new_id()
        assert type(i) is int
        assert 0 < i <= INT64_MAX


def test_id_carries_current_time_and_node() -> None:
    gen = IdGenerator(node_id=513)
    before = int(time.time() * 1000)
    i = gen.next_int()
    after = int(time.time() * 1000)
    assert (i >> 12) & 0x3FF == 513
    assert before <= (i >> 22) + EPOCH_MS <= after


def test_ids_of_the_year_2089_still_fit_in_int64(monkeypatch: pytest.MonkeyPatch) -> None:
    late = (EPOCH_MS + (1 << 41) - 10) / 1000  # the last few ms the 41 bits can hold
    _fake_time(monkeypatch, lambda: late)
    i = IdGenerator(node_id=1023).next_int()
    assert 0 < i <= INT64_MAX


def test_ids_strictly_increase_from_one_generator() -> None:
    gen = IdGenerator(node_id=1)
    # 20,000 ids is more than the 4,096 sequence numbers of one millisecond.
    out = [gen.next_int() for _ in range(20_000)]
    assert all(a < b for a, b in pairwise(out))


def test_ids_unique_across_threads() -> None:
    gen = IdGenerator(node_id=3)
    barrier = threading.Barrier(8)

    def work() -> list[int]:
        barrier.wait()
        return [gen.next_int() for _ in range(5_000)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        batches = list(pool.map(lambda _: work(), range(8)))
    everything = [i for batch in batches for i in batch]
    assert len(everything) == 40_000
    assert len(set(everything)) == 40_000
    for batch in batches:  # each thread sees the generator's order too
        assert all(a < b for a, b in pairwise(batch))


def test_two_nodes_never_collide_even_in_the_same_millisecond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frozen = time.time()
    _fake_time(monkeypatch, lambda: frozen)
    a, b = IdGenerator(node_id=1), IdGenerator(node_id=2)
    from_a = [a.next_int() for _ in range(3_000)]
    from_b = [b.next_int() for _ in range(3_000)]
    # Same clock reading, same sequence numbers: only the node bits keep them apart.
    assert {i & 0xFFF for i in from_a} == {i & 0xFFF for i in from_b}
    assert not set(from_a) & set(from_b)


def test_two_nodes_never_collide_on_the_real_clock() -> None:
    a, b = IdGenerator(node_id=0), IdGenerator(node_id=1023)
    from_a, from_b = set(), set()
    for _ in range(10_000):
        from_a.add(a.next_int())
        from_b.add(b.next_int())
    assert len(from_a) == len(from_b) == 10_000
    assert not from_a & from_b


@pytest.mark.parametrize("node_id", [-1, 1024, 1 << 20])
def test_node_id_outside_ten_bits_is_refused(node_id: int) -> None:
    # 1024 would spill into the time bits and collide with node 0 one millisecond later.
    with pytest.raises(ValueError):
        IdGenerator(node_id=node_id)


def test_random_node_id_fits_ten_bits() -> None:
    for _ in range(200):
        assert 0 <= IdGenerator().node_id < 1024


def test_ordering_holds_when_wall_clock_steps_back(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [time.time()]
    _fake_time(monkeypatch, lambda: now[0])
    gen = IdGenerator(node_id=9)
    out = [gen.next_int() for _ in range(100)]
    now[0] += 0.005
    out += [gen.next_int() for _ in range(100)]
    now[0] -= 5.0  # NTP steps the clock five seconds back
    out += [gen.next_int() for _ in range(100)]
    now[0] += 1.0  # still four seconds behind the highest id so far
    out += [gen.next_int() for _ in range(100)]
    assert all(a < b for a, b in pairwise(out))
    assert len(set(out)) == len(out)


def test_stepped_back_clock_does_not_stall_a_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    # More ids than one millisecond holds while the clock is behind (and does not move) must
    # neither repeat nor block until the wall clock catches up.
    now = [time.time()]
    _fake_time(monkeypatch, lambda: now[0])
    gen = IdGenerator(node_id=9)
    first = gen.next_int()
    now[0] -= 60.0
    out = [first] + [gen.next_int() for _ in range(10_000)]
    assert all(a < b for a, b in pairwise(out))
    now[0] += 60.0 + 1.0  # the wall clock catches up and passes: ids follow it again
    later = gen.next_int()
    assert later > out[-1]
    assert (later >> 22) + EPOCH_MS == int(now[0] * 1000)
