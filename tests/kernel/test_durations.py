"""How far to move a sandbox clock, as `multibank clock advance` and the portal's clock form
read it (issue 41 §2)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from multibank.kernel.durations import Advance, parse

NOW = int(datetime(2026, 12, 7, 17, 30, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1d", 86_400),
        ("2h", 7_200),
        ("30m", 1_800),
        ("45s", 45),
        ("1d12h", 129_600),
        ("1D 2H".replace(" ", ""), 93_600),
        (" 90m ", 5_400),
        ("300", 300),
    ],
)
def test_steps(text: str, seconds: int) -> None:
    assert parse(text) == Advance(seconds=seconds)
    assert parse(text).seconds_from(NOW) == seconds


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("2026-12-10", datetime(2026, 12, 10, tzinfo=UTC)),
        ("2026-12-08T09:15", datetime(2026, 12, 8, 9, 15, tzinfo=UTC)),
        ("2026-12-08 09:15:00+01:00", datetime(2026, 12, 8, 8, 15, tzinfo=UTC)),
        ("2026-12-08T09:15:00Z", datetime(2026, 12, 8, 9, 15, tzinfo=UTC)),
    ],
)
def test_dates_are_reached(text: str, at: datetime) -> None:
    wanted = parse(text)
    target = int(at.timestamp() * 1000)
    assert wanted == Advance(to_ms=target)
    assert wanted.seconds_from(NOW) == (target - NOW) // 1000
    assert wanted.seconds_from(NOW - 1) * 1000 >= target - NOW + 1  # never short of it


def test_a_date_behind_is_no_step() -> None:
    assert parse("2026-12-06").seconds_from(NOW) < 0
    assert parse("2026-12-07T17:30").seconds_from(NOW) == 0


@pytest.mark.parametrize(
    "text",
    ["", "1x", "d", "1h1d", "-1d", "1.5h", "\u0661d", "tomorrow", "2026-13-01", "2026-12-07T25:00"],
)
def test_anything_else_is_said_plainly(text: str) -> None:
    with pytest.raises(ValueError, match="1d, 2h, 30m"):
        parse(text)
