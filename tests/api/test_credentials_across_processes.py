"""Credentials a process remembers (api/authcache.py) stop working on every process within a
second of being withdrawn on another (issue 11, "what must not change"): a logout, an API key
revoked, a user deactivated. Two `multibank serve` processes on one database; each scenario
reads through the second process first, so that it remembers the credentials, withdraws them
through the first, and a second later the second process refuses them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from tests.api.test_ledger_concurrency import fresh_database, new_programme, two_servers
from tests.conftest import ADMIN_TOKEN, Prog
from tests.factories import PASSWORD, invited_user, login, verified

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
WITHIN = 1.0  # seconds: the interface's bound for another process to notice


@contextlib.asynccontextmanager
async def two_processes(
    tmp_path: Path,
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, Prog]]:
    """Clients of two `multibank serve` processes on one fresh database, and a programme."""
    async with (
        fresh_database(tmp_path) as url,
        two_servers(url, tmp_path) as bases,
        contextlib.AsyncExitStack() as stack,
    ):
        a, b = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=u, timeout=60))
            for u in bases
        ]
        yield a, b, await new_programme(a, ADMIN)


async def test_withdrawn_credentials_stop_on_the_other_process_within_a_second(
    tmp_path: Path,
) -> None:
    async with two_processes(tmp_path) as (a, b, p):
        # A logout on A.
        ident = await verified(a, p, "corporates")
        for _ in range(3):
            assert (await b.get("/multi/corporates", headers=ident.headers)).status_code == 200
        assert (await a.post("/multi/logout", headers=ident.headers)).status_code == 204
        await asyncio.sleep(WITHIN)
        assert (await b.get("/multi/corporates", headers=ident.headers)).status_code == 401

        # A user deactivated on A (an authorised user, by the root user).
        root = await verified(a, p, "corporates")
        user_id, user_email, _ = await invited_user(a, p, root)
        r = await login(a, p, user_email)
        assert r.status_code == 200, r.text
        user_headers = {**p.headers, "authorization": f"Bearer {r.json()['token']}"}
        for _ in range(3):
            assert (await b.get("/multi/corporates", headers=user_headers)).status_code == 200
        r = await a.post(f"/multi/users/{user_id}/deactivate", headers=root.headers)
        assert r.status_code == 204, r.text
        await asyncio.sleep(WITHIN)
        assert (await b.get("/multi/corporates", headers=user_headers)).status_code == 401

        # An API key revoked on A.
        r = await a.post(f"/portal/api/programmes/{p.id}/api_keys", headers=ADMIN, json={})
        assert r.status_code == 201, r.text
        key = r.json()
        headers = {**root.headers, "api-key": key["apiKey"]}
        for _ in range(3):
            assert (await b.get("/multi/corporates", headers=headers)).status_code == 200
        r = await a.delete(f"/portal/api/programmes/{p.id}/api_keys/{key['id']}", headers=ADMIN)
        assert r.status_code == 200, r.text
        await asyncio.sleep(WITHIN)
        assert (await b.get("/multi/corporates", headers=headers)).status_code == 401
        # The programme's first key still works on both.
        for c in (a, b):
            assert (await c.get("/multi/corporates", headers=root.headers)).status_code == 200


async def test_a_password_changed_on_one_process_counts_at_once_on_the_other(
    tmp_path: Path,
) -> None:
    """B remembers the hash of a user who logged in there (decision 0025); the password
    changed on A, B refuses the old one and takes the new one at once, not a second later."""
    new = "An0ther-secret!"
    async with two_processes(tmp_path) as (a, b, p):
        ident = await verified(a, p, "corporates")
        for _ in range(2):
            assert (await login(b, p, ident.email)).status_code == 200
        body = {"oldPassword": {"value": PASSWORD}, "newPassword": {"value": new}}
        r = await a.post("/multi/passwords/update", headers=ident.headers, json=body)
        assert r.status_code == 200, r.text
        assert (await login(b, p, ident.email)).status_code == 403
        r = await login(b, p, ident.email, new)
        assert r.status_code == 200, r.text
        headers = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
        assert (await b.get("/multi/corporates", headers=headers)).status_code == 200
