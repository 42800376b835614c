"""How far to move a sandbox clock, as an operator types it: `1d`, `2h`, `30m`, `45s` (or
several, `1d12h`), a number of seconds, or a date or time to move it to (UTC unless it says)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
# Each unit once, largest first: `1d12h`, `90m`; ASCII digits only.
DURATION = re.compile(
    r"(?:([0-9]{1,12})d)?(?:([0-9]{1,12})h)?(?:([0-9]{1,12})m)?(?:([0-9]{1,12})s)?"
)
SECONDS = re.compile(r"[0-9]{1,12}")
DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}([ T].*)?")
SAID = "1d, 2h, 30m (or several, as 1d12h), a number of seconds, or a date such as 2027-01-31"


@dataclass(frozen=True)
class Advance:
    """`seconds` to move on by, or the instant (`to_ms`, epoch ms) to move to."""

    seconds: int | None = None
    to_ms: int | None = None

    def seconds_from(self, now_ms: int) -> int:
        """Whole seconds from `now_ms` on (a date is reached, not fallen short of); 0 or less
        when the date is not ahead."""
        if self.seconds is not None:
            return self.seconds
        assert self.to_ms is not None
        return -((now_ms - self.to_ms) // 1000)


def parse(text: str) -> Advance:
    """What `text` asks for; ValueError in plain words when it is none of the forms."""
    said = text.strip()
    if SECONDS.fullmatch(said):
        return Advance(seconds=int(said))
    found = DURATION.fullmatch(said.lower()) if said else None
    if found and any(found.groups()):
        units = zip(found.groups(), UNITS.values(), strict=True)
        return Advance(seconds=sum(int(n) * unit for n, unit in units if n))
    if DATE.fullmatch(said) and said.isascii():
        try:
            when = datetime.fromisoformat(said)
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            return Advance(to_ms=int(when.timestamp() * 1000))
        except (ValueError, OverflowError):
            raise ValueError(f"{said!r} is not a date: {SAID}") from None
    raise ValueError(f"{said!r} is not a step of the clock: {SAID}")
