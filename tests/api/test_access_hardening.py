"""Issue 10, security 1 and 2: failed logins are counted exactly under parallel attempts (in one
app and across two `multibank serve` processes on one database), and a session derived through
`POST /access_token` keeps the 12-hour limit of the login it came from."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import httpx
import pytest

from tests.api.test_ledger_concurrency import fresh_database, new_programme, two_servers
from tests.conftest import ADMIN_TOKEN, DB_KIND, Prog
from tests.factories import PASSWORD, invited_user, login, sign_up

WRONG = "Wrong-passw0rd!"


async def authorised_user(client: httpx.AsyncClient, p: Prog) -> str:
    """An active authorised user of a new corporate, with a password: its e-mail."""
    _, user_email, _ = await invited_user(client, p, await sign_up(client, p))
    return user_email


async def burst(clients: list[httpx.AsyncClient], p: Prog, user_email: str, n: int) -> None:
    """`n` wrong passwords at once, spread over the clients (the servers)."""
    replies = await asyncio.gather(
        *[login(clients[i % len(clients)], p, user_email, WRONG) for i in range(n)]
    )
    assert {r.status_code for r in replies} == {403}, [r.text for r in replies]


async def counts_exactly(clients: list[httpx.AsyncClient], p: Prog, limit: int) -> None:
    """limit - 1 parallel failures leave a user usable; with one more, an authorised user is
    deactivated and a root user locked. (Each user sees at most limit + 1 logins, under the
    per-e-mail rate limit.)"""
    client = clients[0]
    spared = await authorised_user(client, p)
    await burst(clients, p, spared, limit - 1)
    assert (await login(client, p, spared)).status_code == 200

    caught = await authorised_user(client, p)
    await burst(clients, p, caught, limit - 1)
    await burst(clients, p, caught, 1)
    assert (await login(client, p, caught)).status_code == 403  # deactivated

    root = await sign_up(client, p)
    await burst(clients, p, root.email, limit)
    assert (await login(client, p, root.email)).status_code == 423


@pytest.mark.parametrize("limit", [5, 10])
async def test_parallel_failed_logins_are_each_counted(client, programme, limit):
    await counts_exactly([client], await programme(failedLoginLimit=limit), limit)


@pytest.mark.skipif(DB_KIND != "postgres", reason="two processes on one PostgreSQL database")
async def test_parallel_failed_logins_across_two_processes(tmp_path: Path) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with (
        fresh_database(tmp_path) as url,
        two_servers(url, tmp_path) as bases,
        contextlib.AsyncExitStack() as stack,
    ):
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=b, timeout=60))
            for b in bases
        ]
        for limit in (5, 10, 15):
            p = await new_programme(clients[0], admin)
            r = await clients[0].patch(
                f"/portal/api/programmes/{p.id}/settings",
                headers=admin,
                json={"failedLoginLimit": limit},
            )
            assert r.status_code == 200, r.text
            await counts_exactly(clients, p, limit)


async def test_access_tokens_never_outlive_the_login_they_came_from(client, programme):
    """A chain of `POST /access_token` calls, each from the last token, kept busy every few
    minutes: the twelve hours count from the login, for the whole chain."""
    p = await programme()
    ident = await sign_up(client, p)
    headers = ident.headers
    body = {"identity": {"type": "CORPORATE", "id": ident.id}}
    clock = {"programme-key": p.api_key}
    elapsed = 0
    while elapsed < 12 * 3600 - 290:
        r = await client.post("/simulate/api/clock/advance", headers=clock, json={"seconds": 290})
        assert r.status_code == 200
        elapsed += 290
        r = await client.post("/multi/access_token", headers=headers, json=body)
        assert r.status_code == 200, (elapsed, r.text)
        headers = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
    r = await client.post("/simulate/api/clock/advance", headers=clock, json={"seconds": 300})
    assert (await client.get("/multi/corporates", headers=headers)).status_code == 401
    r = await client.post("/multi/access_token", headers=headers, json=body)
    assert r.status_code == 401
    # A new login starts a new twelve hours.
    assert (await login(client, p, ident.email, PASSWORD)).status_code == 200
