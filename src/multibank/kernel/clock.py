"""The one source of time. Sandbox programmes carry an offset so clients can move time forward."""

from __future__ import annotations

import time


class Clock:
    """Wall-clock time in epoch milliseconds; tests swap in a `FrozenClock`."""

    def system_ms(self) -> int:
        return int(time.time() * 1000)

    def now_ms(self, offset_ms: int = 0) -> int:
        return self.system_ms() + offset_ms


class FrozenClock(Clock):
    def __init__(self, start_ms: int) -> None:
        self.current = start_ms

    def system_ms(self) -> int:
        return self.current

    def advance(self, seconds: float) -> None:
        self.current += round(seconds * 1000)  # int() would turn 1.001 s into 1000 ms


class ProgrammeClock:
    """Time as one programme sees it: the server clock plus that programme's sandbox offset."""

    def __init__(self, clock: Clock, offset_ms: int) -> None:
        self._clock = clock
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return self._clock.now_ms(self.offset_ms)
