"""The portal's sandbox clock form takes what `multibank clock advance` takes (issue 41 §2):
1d, 2h, 30m, several at once, or a date to move to; anything else is refused in plain words
and moves nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.api.test_portal_hardening import _clock
from tests.api.test_portal_web import browser, flash_of, landed, page, submit  # noqa: F401

DAY = 86_400


async def test_the_clock_form_takes_days_hours_minutes_and_dates(
    browser,  # noqa: F811
    client,
    programme,
):
    p = await programme()
    base = f"/portal/programmes/{p.id}"
    form = await page(browser, base)
    assert 'name="by" value="1d"' in form
    moved = 0
    for by, seconds in (("1d", DAY), ("2h", 7_200), ("30m", 1_800), ("1d12h", 1.5 * DAY)):
        said = flash_of(await landed(browser, await submit(browser, f"{base}/clock", base, by=by)))
        assert said.startswith("The clock moved on to "), (by, said)
        moved += int(seconds)
        assert await _clock(client, p) == moved, by
        moved += 1  # the probe's second
    for by in ("1x", "", "soon", "2020-01-01", "3651d"):
        html = await landed(browser, await submit(browser, f"{base}/clock", base, by=by))
        assert 'class="flash error"' in html, by
        assert await _clock(client, p) == moved, by
        moved += 1
    said = flash_of(
        await landed(browser, await submit(browser, f"{base}/clock", base, by="tomorrow"))
    )
    assert "1d, 2h, 30m" in said
    target = (datetime.now(UTC) + timedelta(days=10)).date().isoformat()
    said = flash_of(await landed(browser, await submit(browser, f"{base}/clock", base, by=target)))
    assert said.startswith(f"The clock moved on to {target} 00:00"), said
    assert 8 * DAY < await _clock(client, p) < 11 * DAY
