"""`multibank clock show` and `multibank clock advance` (issue 41 §2), in-process as
tests/test_cli.py runs the CLI, on the test session's database, checked against the clock the
server's simulator answers."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.test_cli import cli, cli_database, ok, unique_name

DAY = 86_400


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with cli_database(monkeypatch, database_url):
        yield


async def _offset(client: httpx.AsyncClient, api_key: str) -> int:
    """The programme's clock offset in seconds, as the simulator answers it (one second on)."""
    r = await client.post(
        "/simulate/api/clock/advance", headers={"programme-key": api_key}, json={"seconds": 1}
    )
    assert r.status_code == 200, r.text
    return int(r.json()["offsetSeconds"]) - 1


def _refused(result: Any, code: int = 1) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    err: str = result.stderr
    return err


async def _programme(*options: str) -> tuple[str, dict[str, Any]]:
    name = unique_name()
    made = json.loads(ok(await cli("programme", "create", "--name", name, "--json", *options)))
    return name, made


async def test_clock_show_and_advance_by_days_hours_minutes_and_to_a_date(cli_env, client):
    name, made = await _programme()
    shown = ok(await cli("clock", "show", "--programme", name))
    assert re.fullmatch(
        rf"programme {name}: \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(real time\)\n", shown
    )
    said = ok(await cli("clock", "advance", "1d", "--programme", name))
    assert said.endswith("UTC (1d ahead of real time)\n"), said
    ok(await cli("clock", "advance", "2h", "--programme", name))
    said = ok(await cli("clock", "advance", "30m", "--programme", name))
    assert said.endswith("UTC (1d 2h 30m ahead of real time)\n"), said
    assert await _offset(client, made["apiKey"]) == DAY + 2 * 3600 + 30 * 60
    shown = ok(await cli("clock", "show", "--programme", name))
    assert shown.endswith("(1d 2h 30m ahead of real time)\n"), shown
    # To a date: midnight UTC a week from now on the programme's clock.
    target = (datetime.now(UTC) + timedelta(days=8)).date()
    said = ok(await cli("clock", "advance", target.isoformat(), "--programme", name))
    assert f"programme {name}: {target.isoformat()} 00:00:0" in said, said
    offset = await _offset(client, made["apiKey"])
    assert 6 * DAY < offset < 9 * DAY


async def test_clock_refusals(cli_env, client):
    name, made = await _programme()
    err = _refused(await cli("clock", "advance", "tomorrow", "--programme", name), 2)
    assert "1d, 2h, 30m" in err
    err = _refused(await cli("clock", "advance", "2020-01-01", "--programme", name))
    assert "never runs back" in err
    err = _refused(await cli("clock", "advance", "3651d", "--programme", name))
    assert "at most 10 years a step" in err
    assert await _offset(client, made["apiKey"]) == 0  # nothing moved
    live, _ = await _programme("--live")
    assert "live programme" in _refused(await cli("clock", "advance", "1d", "--programme", live))
    for command in (("show",), ("advance", "1d")):
        err = _refused(await cli("clock", *command, "--programme", unique_name()))
        assert "not found" in err
