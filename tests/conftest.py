"""Test harness: one server (app + database) per test session, one fresh programme per test.

`MULTIBANK_TEST_DB` picks the database: `sqlite` (a file in a temporary folder) or `postgres`
(a database created on the server named by `MULTIBANK_TEST_POSTGRES_URL` and dropped at the end,
its name beginning with `MULTIBANK_TEST_POSTGRES_PREFIX`, default `multibank`).
Tests never share data: each asks the `programme` factory for a programme of its own.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from multibank.app import build_container, create_app, startup
from multibank.container import Container
from multibank.kernel.migrate import upgrade
from multibank.programmes import service
from multibank.programmes.schemas import ProgrammeCreate
from multibank.settings import Settings
from tests.openapi_conformance import Recorder, documents, violations

DB_KIND = os.environ.get("MULTIBANK_TEST_DB", "sqlite")
PG_ADMIN_URL = os.environ.get(
    "MULTIBANK_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
# The URL the server under test connects to, when it differs from the admin one: scripts/test's
# PgBouncer slice points it at PgBouncer (transaction pooling, issue 33 §5), while the tests
# create and drop their databases on the server itself (PgBouncer forwards any database name).
PG_SERVER_URL = os.environ.get("MULTIBANK_TEST_PGBOUNCER_URL") or PG_ADMIN_URL
ADMIN_TOKEN = "test-admin-token-" + "x" * 32
# A live server refuses to start without its own card keys (D29); tests that build one pass these.
LIVE_CARD_KEYS = {
    "card_data_key": "k1:" + "d" * 40,
    "card_verification_key": "v" * 40,
}
LIVE_CARD_ENV = {f"MULTIBANK_{k.upper()}": v for k, v in LIVE_CARD_KEYS.items()}
# Letters, digits and underscores, short enough that a whole name stays within PostgreSQL's 63.
PG_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,29}")
BASES = ("/multi", "/3.29.1/multi", "/3.1.0/multi", "/3.63.4/multi")


def pytest_configure(config: pytest.Config) -> None:
    """The user's data directory, where the default SQLite database lives (decision 0066), is a
    folder of this run's own: a command a test starts without MULTIBANK_DATABASE_URL never reads
    or writes the developer's own sandbox. (platformdirs reads XDG_DATA_HOME on Linux.)"""
    data_home = tempfile.mkdtemp(prefix="multibank-test-data-")
    os.environ["XDG_DATA_HOME"] = data_home
    config.add_cleanup(lambda: shutil.rmtree(data_home, ignore_errors=True))
    config.addinivalue_line(
        "markers",
        "any_database: the test's outcome does not depend on the database under test (it reads "
        "the source, the OpenAPI documents or the CLI's help, or starts its own SQLite server), "
        "so only the SQLite half of scripts/test runs it",
    )


def pytest_report_header() -> str:
    return f"multibank database: {DB_KIND}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if DB_KIND == "sqlite":
        return
    once = pytest.mark.skip(reason="the same whatever the database: the SQLite half runs it")
    for item in items:
        if item.get_closest_marker("any_database") is not None:
            item.add_marker(once)


def pg_database_name(label: str) -> str:
    """A new name for a database the tests create on the shared server: the prefix (so a
    server shared with others can tell, and clean up, the suite's), the label and a unique tail."""
    prefix = os.environ.get("MULTIBANK_TEST_POSTGRES_PREFIX", "multibank")
    if not PG_PREFIX.fullmatch(prefix):
        raise pytest.UsageError(
            f"MULTIBANK_TEST_POSTGRES_PREFIX must match {PG_PREFIX.pattern}, not {prefix!r}"
        )
    return f"{prefix}_{label}_{os.getpid()}_{secrets.token_hex(3)}"


async def _pg_admin(sql: str) -> None:
    engine = create_async_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


@contextlib.asynccontextmanager
async def empty_database(folder: Path, label: str) -> AsyncIterator[str]:
    """The URL of a new, empty database of the kind under test: a file in `folder` (SQLite) or
    a database created on the server and dropped afterwards (PostgreSQL)."""
    if DB_KIND == "sqlite":
        yield f"sqlite+aiosqlite:///{folder / f'{label}.db'}"
        return
    if DB_KIND != "postgres":
        raise pytest.UsageError(f"MULTIBANK_TEST_DB must be sqlite or postgres, not {DB_KIND!r}")
    name = pg_database_name(label)
    await _pg_admin(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(PG_SERVER_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        await _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
async def database_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    async with empty_database(tmp_path_factory.mktemp("db"), "test") as url:
        yield url


@pytest.fixture
async def fresh_database_url(tmp_path: Path) -> AsyncIterator[str]:
    """An empty database of the kind under test, of one test's own (migrations, `db upgrade`)."""
    async with empty_database(tmp_path, "fresh") as url:
        yield url


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        admin_token=ADMIN_TOKEN,
        log_json=True,
        # Cheaper Argon2id keeps the suite fast; production defaults are tested in test_passwords.
        argon2_memory_kib=1024,
        argon2_time_cost=1,
        # Every test's client calls from one IP, and the suite signs up, sends codes and logs in
        # faster than 1,000 times a minute (the default): the per-IP limit is tested on servers
        # of its own (test_ratelimits.py), not left to decide which test gets a 429.
        rate_limit_ip="1000000/minute",
        # The suite sends wrong admin tokens on purpose (test_portal, test_security_matrix); the
        # limit on them is tested on servers of its own (test_portal_hardening.py).
        rate_limit_admin_auth="1000000/minute",
    )


@pytest.fixture(scope="session")
async def container(settings: Settings) -> AsyncIterator[Container]:
    c = build_container(settings)
    await upgrade(c.db)
    await startup(c)
    yield c
    # Issue 5: the ledger invariants hold after the whole suite, whatever it did.
    from multibank.reconciliation import verify

    async with c.db.transaction() as session:
        violations = await verify(session)
    await c.db.dispose()
    assert violations == [], f"ledger invariants broken after the test session: {violations}"


@pytest.fixture(scope="session")
def app(container: Container) -> Iterator[Any]:
    """The server, with every answer it gives checked against its OpenAPI documents at the end
    of the session (tests/openapi_conformance.py)."""
    recorder = Recorder(create_app(container=container))
    yield recorder
    found = violations(recorder.answers, documents(recorder.app))
    assert not found, "answers the OpenAPI documents do not declare:\n" + "\n".join(found)


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


@dataclass
class Prog:
    """A programme as a client developer sees it: its id, API key and profile ids."""

    id: str
    api_key: str
    profiles: dict[str, str]
    fee_types: dict[str, Any]

    @property
    def headers(self) -> dict[str, str]:
        return {"api-key": self.api_key}


ProgrammeFactory = Callable[..., Awaitable[Prog]]


@pytest.fixture
def programme(container: Container) -> ProgrammeFactory:
    async def make(**settings: Any) -> Prog:
        name = f"p{secrets.token_hex(6)}"
        async with container.db.transaction() as session:
            p, key = await service.create_programme(
                session, container.clock, ProgrammeCreate(name=name, **settings)
            )
            d = await service.describe(session, p, api_key=key)
        return Prog(d.programmeId, key, d.profiles.model_dump(), d.feeTypes)

    return make


@pytest.fixture
def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def open_test_session(container: Container, prog: Prog, user_id: int = 1) -> str:
    """A bearer token naming a live session of `prog`, for tests of the token checks themselves
    (the login flow has tests of its own)."""
    from multibank.kernel.tokens import open_session

    async with container.db.transaction() as session:
        row = await open_session(
            session,
            programme_id=int(prog.id),
            user_id=user_id,
            credential_type="ROOT",
            identity_type="CORPORATE",
            identity_id=user_id,
            token_type="AUTH",
            now_ms=container.clock.now_ms(),
        )
    return container.tokens().sign(row.id, int(prog.id))
