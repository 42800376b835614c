"""Issue 10, scale-out 11: the database unreachable or its pool exhausted is a 503 with
Retry-After, never a 500; `serve` waits a bounded time for the database and then says why in
one line."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from multibank.app import create_app
from multibank.settings import Settings
from tests.conftest import DB_KIND

UNREACHABLE = "postgresql+asyncpg://nobody@127.0.0.1:1/none"


def assert_503(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "5"
    assert r.json() == {
        "code": "SERVICE_UNAVAILABLE",
        "message": "The database is unavailable; retry.",
    }


async def test_an_unreachable_database_answers_503(settings: Settings) -> None:
    app = create_app(settings.model_copy(update={"database_url": UNREACHABLE}))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        for method, path in (
            ("GET", "/multi/corporates"),
            ("POST", "/3.1.0/multi/login_with_password"),
            ("POST", "/simulate/api/clock/advance"),
        ):
            r = await c.request(
                method,
                path,
                headers={"api-key": "k", "programme-key": "k", "Authorization": "Bearer x"},
                json={},
            )
            if r.status_code == 400:  # the body is checked before the database is needed
                continue
            assert_503(r)
        assert (await c.get("/readyz")).status_code == 503
    await app.state.container.db.dispose()


@pytest.mark.skipif(DB_KIND != "postgres", reason="the PostgreSQL connection pool")
async def test_an_exhausted_pool_answers_503(settings: Settings, programme) -> None:
    p = await programme()
    app = create_app(
        settings.model_copy(update={"database_pool_size": 1, "database_pool_timeout_seconds": 0.5})
    )
    engine = app.state.container.db.engine
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        async with engine.connect() as held:  # the process's only connection, taken
            await held.execute(text("SELECT 1"))
            assert_503(await c.get("/multi/corporates", headers=p.headers))
        r = await c.post(
            "/multi/passwords/validate",
            headers=p.headers,
            json={"password": {"value": "Abcdef1!"}},
        )
        assert r.status_code == 204, r.text  # free again: served
    await app.state.container.db.dispose()


async def test_serve_waits_a_bounded_time_for_the_database(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MULTIBANK_")}
    env.update(
        MULTIBANK_DATABASE_URL=UNREACHABLE,
        MULTIBANK_DATABASE_STARTUP_TIMEOUT_SECONDS="2",
    )
    multibank = Path(sys.executable).with_name("multibank")
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        str(multibank),
        "serve",
        "--port",
        "1",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2, (out, err)
    assert time.monotonic() - started >= 2
    lines = err.decode().strip().splitlines()
    assert lines[0].startswith("waiting up to 2 s for the database:"), lines
    assert lines[-1].startswith("cannot use the database at postgresql+asyncpg://"), lines
    assert len(lines) == 2, lines  # no traceback
