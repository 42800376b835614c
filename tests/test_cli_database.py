"""Which database the CLI and the server use, and the admin token (issue 41 §1, decisions 0066
and 0067): one default database whatever the folder, each command naming the database it opens,
`multibank info`, `db upgrade` saying where it creates one, and `multibank admin-token`."""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from multibank.app import build_container, create_app
from multibank.audit.models import AuditRecord
from multibank.kernel.db import Database
from multibank.kernel.migrate import upgrade
from multibank.portal.web import WRONG_TOKEN_STORED
from multibank.settings import Settings, get_settings
from tests.conftest import DB_KIND
from tests.test_cli import (
    MULTIBANK,
    READY_TIMEOUT,
    _free_port,
    _printed,
    cli,
    cli_database,
    multibank,
    ok,
    one_line,
    unique_name,
)

PROGRAMMES = "/portal/api/programmes"


def named(url: str) -> str:
    """What `database: …` says of `url` when MULTIBANK_DATABASE_URL sets it."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return f"{os.path.abspath(parsed.database or '')} (SQLite, MULTIBANK_DATABASE_URL)"
    return f"{parsed.render_as_string(hide_password=True)} (PostgreSQL, MULTIBANK_DATABASE_URL)"


def sqlite_file_exists(url: str) -> bool:
    return Path(make_url(url).database or "").exists()


@contextlib.asynccontextmanager
async def serve_in(folder: Path, env: dict[str, str], out: Path) -> AsyncIterator[str]:
    """`multibank serve` started in `folder` with only `env` beside the machine's variables (no
    MULTIBANK_* setting of the test run); yields its base URL once it is ready."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MULTIBANK_")}
    environ.setdefault(
        "PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "multibank-pycache")
    )
    environ.update({"MULTIBANK_LOG_LEVEL": "WARNING", **env})
    with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            str(MULTIBANK), "serve", "--port", str(port), cwd=folder, env=environ,
            stdout=stdout, stderr=stderr,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        async with httpx.AsyncClient(base_url=base, timeout=2) as http:
            while True:
                assert proc.returncode is None, out.with_suffix(".err").read_text()
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/readyz")).status_code == 200:
                        break
                assert time.monotonic() < deadline, "serve not ready in time"
                await asyncio.sleep(0.2)
        yield base
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()


@pytest.mark.skipif(DB_KIND != "sqlite", reason="the default database is a SQLite file")
async def test_the_cli_in_another_folder_uses_the_servers_database(tmp_path):
    """The campaign's trap: `serve` in one folder, the CLI in another. Both use the default
    database in the user's data directory, so the CLI shows the programme the server serves,
    and its API key works there; neither folder gets a database of its own."""
    data_home, here, there = tmp_path / "data", tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    env = {"XDG_DATA_HOME": str(data_home)}
    default = data_home / "multibank" / "multibank.db"
    out = tmp_path / "serve.out"
    async with serve_in(here, env, out) as base:
        printed = _printed(out)
        said = out.with_suffix(".err").read_text().splitlines()[0]
        assert said == f"database: {default} (SQLite, default): none there yet, creating it"

        code, shown, err, _ = await multibank(
            "programme", "show", "default", "--json", cwd=there, env=env
        )
        assert code == 0, err
        assert err.splitlines() == [f"database: {default} (SQLite, default)"]
        shown = json.loads(shown)
        assert (shown["programmeId"], shown["apiKey"]) == (
            printed["programmeId"],
            printed["apiKey"],
        )
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            r = await http.post(
                "/multi/passwords/validate",
                headers={"api-key": shown["apiKey"]},
                json={"password": {"value": "Abcdef1!"}},
            )
            assert r.status_code == 204, r.text

        code, info, err, _ = await multibank("info", cwd=there, env=env)
        assert code == 0, err
        assert info.splitlines()[:2] == [
            f"database: {default} (SQLite, default)",
            "  ready (schema " + info.split("(schema ")[1].split(")")[0] + ")",
        ]
        assert "admin token: generated on first start, kept in the database" in info
    assert sorted(p.name for p in here.iterdir()) == sorted(p.name for p in there.iterdir()) == []


@pytest.mark.usefixtures("container")  # the session's database, migrated
async def test_every_command_that_opens_the_database_names_it_once(database_url, monkeypatch):
    """One line on stderr, first, whatever else the command says; `programme reset` opens the
    database twice and names it once. Stdout is unchanged (scripts read it)."""
    name = unique_name()
    with cli_database(monkeypatch, database_url):
        for args in (
            ("programme", "create", "--name", name),
            ("programme", "list"),
            ("programme", "show", name),
            ("ledger", "verify", "--programme", name),
            ("programme", "reset", name, "--yes"),
            ("db", "upgrade"),
        ):
            result = await cli(*args)
            assert result.exit_code == 0, (args, result.output)
            assert result.stderr.splitlines() == [f"database: {named(database_url)}"], args
            assert "database:" not in result.stdout


async def test_db_upgrade_says_where_it_creates_a_database(fresh_database_url, monkeypatch):
    with cli_database(monkeypatch, fresh_database_url):
        first = await cli("db", "upgrade")
        assert ok(first) == "database is up to date\n"
        said = f"database: {named(fresh_database_url)}"
        if DB_KIND == "sqlite":
            assert first.stderr.splitlines() == [f"{said}: none there yet, creating it"]
        else:  # the database exists; it held no schema
            assert first.stderr.splitlines() == [
                said,
                "the database holds no schema yet: creating it",
            ]
        again = await cli("db", "upgrade")
        assert ok(again) == "database is up to date\n"
        assert again.stderr.splitlines() == [said]


async def test_info_says_where_everything_is_and_creates_nothing(fresh_database_url, monkeypatch):
    with cli_database(monkeypatch, fresh_database_url):
        before = await cli("info", "--port", "8123")
        lines = ok(before).splitlines()
        assert lines[0] == f"database: {named(fresh_database_url)}"
        if DB_KIND == "sqlite":
            assert lines[1] == (
                "  none there yet: `multibank serve` or `multibank db upgrade` creates it"
            )
            assert not sqlite_file_exists(fresh_database_url)
        else:
            assert lines[1] == "  not migrated: run `multibank db upgrade`"
        assert "  start here:      http://127.0.0.1:8123/ (API key, quick start)" in before.stdout
        assert "http://127.0.0.1:8123/multi " in before.stdout
        assert (
            lines[-1] == "admin token: none yet: `multibank serve` generates one on its first start"
        )

        ok(await cli("db", "upgrade"))
        ok(await cli("admin-token"))  # a sandbox's token, generated and kept
        after = ok(await cli("info")).splitlines()
        assert after[1].startswith("  ready (schema ")
        assert "http://127.0.0.1:8000/portal/" in after[5]
        assert after[-1] == (
            "admin token: generated on first start, kept in the database: "
            "`multibank admin-token` shows it"
        )
        monkeypatch.setenv("MULTIBANK_ADMIN_TOKEN", "a" * 40)
        get_settings.cache_clear()
        assert ok(await cli("info")).splitlines()[-1] == "admin token: from MULTIBANK_ADMIN_TOKEN"


@contextlib.asynccontextmanager
async def sandbox_server(url: str, settings: Settings) -> AsyncIterator[tuple[Any, Any]]:
    """The app as `serve` runs it (lifespan included) on `url`, with no MULTIBANK_ADMIN_TOKEN:
    a sandbox that generates its own. Yields the app and its container."""
    container = build_container(
        settings.model_copy(update={"database_url": url, "admin_token": None})
    )
    await upgrade(container.db)
    app = create_app(container=container)
    async with app.router.lifespan_context(app):
        yield app, container


async def test_admin_token_shows_and_rotates_a_sandboxs_token(
    fresh_database_url, settings, monkeypatch
):
    """`multibank admin-token` prints the token the running server checks; `--rotate` replaces
    it in the running server within a second (old token refused, new one accepted, portal
    sessions of the old one ended); the portal's wrong-token message says where to find it."""
    async with sandbox_server(fresh_database_url, settings) as (app, container):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            with cli_database(monkeypatch, fresh_database_url):
                shown = await cli("admin-token")
                old = ok(shown).strip()
                assert shown.stderr.splitlines()[1] == (
                    "admin token: kept in the database (generated on the first start)"
                )
                assert old == container.admin_token and old.startswith("mb_admin_")
                bearer = {"Authorization": f"Bearer {old}"}
                assert (await http.get(PROGRAMMES, headers=bearer)).status_code == 200

                rotated = await cli("admin-token", "--rotate")
                new = ok(rotated).strip()
                assert new != old and new.startswith("mb_admin_")
                assert "rotated" in rotated.stderr
                assert ok(await cli("admin-token")).strip() == new
            deadline = time.monotonic() + 10
            while container.admin_token != new:  # the watcher reads it once a second
                assert time.monotonic() < deadline, "the server never took the new token"
                await asyncio.sleep(0.1)
            assert (await http.get(PROGRAMMES, headers=bearer)).status_code == 401
            new_bearer = {"Authorization": f"Bearer {new}"}
            assert (await http.get(PROGRAMMES, headers=new_bearer)).status_code == 200

            form = await http.get("/portal/login")
            csrf = form.text.split('name="csrf" value="')[1].split('"')[0]
            wrong = await http.post("/portal/login", data={"token": old, "csrf": csrf})
            assert wrong.status_code == 401
            assert WRONG_TOKEN_STORED in html.unescape(wrong.text)
            # The form says the same before any wrong token.
            assert "<code>multibank admin-token</code> shows it" in form.text
            assert "`multibank admin-token`" in WRONG_TOKEN_STORED


async def test_admin_token_rotation_is_in_the_audit_log(fresh_database_url, monkeypatch):
    with cli_database(monkeypatch, fresh_database_url):
        ok(await cli("db", "upgrade"))
        token = ok(await cli("admin-token")).strip()
        ok(await cli("admin-token", "--rotate"))
        db = Database(fresh_database_url)
        try:
            async with db.transaction() as session:
                actions = list(await session.scalars(select(AuditRecord.action)))
        finally:
            await db.dispose()
    assert actions == ["admin_token.rotate"]
    assert token not in str(actions)


async def test_admin_token_from_the_environment(tmp_path):
    """Set by MULTIBANK_ADMIN_TOKEN: a sandbox shows it; a live server never does (rotate
    only: a new value to set, nothing stored). Neither opens a database."""
    missing = tmp_path / "none.db"
    base = {"MULTIBANK_DATABASE_URL": f"sqlite+aiosqlite:///{missing}"}
    token = "s" * 40
    code, out, err, _ = await multibank(
        "admin-token", settings={**base, "MULTIBANK_ADMIN_TOKEN": token}
    )
    assert (code, out, err) == (0, f"{token}\n", "admin token: from MULTIBANK_ADMIN_TOKEN\n")

    live = {
        **base,
        "MULTIBANK_MODE": "live",
        "MULTIBANK_ADMIN_TOKEN": token,
        "MULTIBANK_JWT_KEYS": "k1:" + "j" * 40,
        "MULTIBANK_CARD_DATA_KEY": "k1:" + "d" * 40,
        "MULTIBANK_CARD_VERIFICATION_KEY": "v" * 40,
    }
    code, out, err, _ = await multibank("admin-token", settings=live)
    assert (code, out) == (1, "")
    assert token not in err
    assert one_line(err).endswith("`multibank admin-token --rotate` makes a new one")

    code, out, err, _ = await multibank("admin-token", "--rotate", settings=live)
    assert code == 0, err
    fresh = out.strip()
    assert fresh.startswith("mb_admin_") and len(fresh) >= 32 and token not in out
    assert "set MULTIBANK_ADMIN_TOKEN to this new value" in one_line(err)
    assert not missing.exists()
