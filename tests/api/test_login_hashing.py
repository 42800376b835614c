"""A login's Argon2id hash holds no database connection and no lock (issue 11, goal 3).

The hash is stopped half-way (the hasher's worker waits on an event): meanwhile no pooled
connection of the server is checked out, and another request that writes goes through, also on
SQLite, whose one writer would otherwise wait for the login's transaction."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from multibank.container import Container
from tests.factories import login, open_account, verified


def checked_out(container: Container) -> int:
    pools = {
        id(e.sync_engine.pool): e.sync_engine.pool
        for e in (container.db.engine, container.db.read_engine)
    }
    return sum(p.checkedout() for p in pools.values())  # type: ignore[attr-defined]


@pytest.mark.parametrize("who", ["known", "unknown"])
async def test_no_connection_is_held_while_a_password_is_hashed(
    client, programme, container: Container, monkeypatch: pytest.MonkeyPatch, who: str
) -> None:
    p = await programme()
    ident = await verified(client, p, "corporates")
    started, release = threading.Event(), threading.Event()
    real = container.hasher._verify_sync

    def slow_verify(encoded: str, password: str) -> Any:
        started.set()
        release.wait(30)
        return real(encoded, password)

    monkeypatch.setattr(container.hasher, "_verify_sync", slow_verify)
    email = ident.email if who == "known" else "nobody@example.com"
    attempt = asyncio.create_task(login(client, p, email))
    try:
        assert await asyncio.to_thread(started.wait, 30)
        assert checked_out(container) == 0
        # A write goes through while the hash is half-way.
        account = await asyncio.wait_for(open_account(client, ident, "EUR"), 30)
        assert account["state"]["state"] == "ACTIVE"
        assert not attempt.done()
    finally:
        release.set()
    r = await attempt
    assert r.status_code == (200 if who == "known" else 403), r.text
