"""Issue 10, scale-out 11: the database unreachable or its pool exhausted is a 503 with
Retry-After, never a 500; `serve` waits a bounded time for the database and then says why in
one line."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from multibank.app import create_app, startup
from multibank.settings import Settings
from tests.conftest import DB_KIND
from tests.factories import login, verified

UNREACHABLE = "postgresql+asyncpg://nobody@127.0.0.1:1/none"


def assert_503(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "5"
    assert r.json() == {
        "code": "SERVICE_UNAVAILABLE",
        "message": "The database is unavailable; retry.",
    }


async def test_an_unreachable_database_answers_503(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """Each 503 is logged once, at WARNING, in one line: an outage is expected weather, and a
    traceback per request would bury the one line that says what is wrong (issue 41 §5)."""
    app = create_app(settings.model_copy(update={"database_url": UNREACHABLE}))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    caplog.set_level(logging.INFO)
    answered = 0
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        for method, path in (
            ("GET", "/multi/corporates"),
            ("POST", "/3.1.0/multi/login_with_password"),
            ("POST", "/simulate/api/clock/advance"),
            ("GET", "/"),  # the landing page: a route of the outer application
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
            answered += 1
        assert (await c.get("/readyz")).status_code == 503
    await app.state.container.db.dispose()
    assert answered >= 4
    records = [rec for rec in caplog.records if rec.getMessage() != "request"]  # access log
    said = [rec for rec in records if "database unavailable" in rec.getMessage()]
    assert len(said) == answered, [(r.name, r.levelname, r.getMessage()) for r in records]
    assert all(rec.levelno == logging.WARNING for rec in said)
    noisy = [rec for rec in records if rec.exc_info or rec.levelno >= logging.ERROR]
    assert not noisy, [(r.name, r.levelname, r.getMessage()) for r in noisy]


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
    with socket.socket() as s:  # a port `serve` can listen on (it checks before it waits)
        s.bind(("127.0.0.1", 0))
        free_port = s.getsockname()[1]
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        str(multibank),
        "serve",
        "--port",
        str(free_port),
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


@pytest.mark.skipif(DB_KIND != "postgres", reason="a PostgreSQL backend terminated")
@pytest.mark.parametrize("kind", ["read", "write", "login"])
async def test_a_connection_the_database_dropped_is_replaced(
    settings: Settings, programme, client, container, kind: str
) -> None:
    """PostgreSQL terminates the backend of the process's one pooled connection (as a restart,
    a failover or an idle timeout would). The connection is replaced: the next requests are
    served (the first one may answer 503 if it met the dead connection first), never a 500.
    Each kind: a read's one statement, a write's transaction, a remembered login's INSERT."""
    p = await programme()
    ident = await verified(client, p)
    app = create_app(settings.model_copy(update={"database_pool_size": 1}))
    await startup(app.state.container)  # its keys (ASGITransport runs no lifespan)
    engine = app.state.container.db.engine
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        r = await login(c, p, ident.email)
        assert r.status_code == 200, r.text
        headers = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
        tags = iter(range(100))

        async def call() -> httpx.Response:
            if kind == "read":
                return await c.get("/multi/corporates", headers=headers)
            if kind == "write":
                body = {"tag": f"tag{next(tags)}"}
                return await c.patch("/multi/corporates", headers=headers, json=body)
            return await login(c, p, ident.email)  # remembered: its INSERT alone

        assert (await call()).status_code == 200
        async with engine.connect() as conn:  # the pool's only connection
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        async with container.db.engine.connect() as other:
            await other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        first = await call()
        if first.status_code != 200:
            assert_503(first)
        for _ in range(2):
            r = await call()
            assert r.status_code == 200, r.text
    await app.state.container.db.dispose()
