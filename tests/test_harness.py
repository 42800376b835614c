"""The test harness itself (issue 32, point 12): the PostgreSQL databases the suite creates are
named with `MULTIBANK_TEST_POSTGRES_PREFIX` (default `multibank`), so runs that share a server
can tell their databases apart and clean up their own."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from tests.conftest import DB_KIND, empty_database, pg_database_name

PREFIX = "MULTIBANK_TEST_POSTGRES_PREFIX"


def test_database_names_take_the_configured_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PREFIX, "ci_run_42")
    assert re.fullmatch(r"ci_run_42_fresh_[0-9]+_[0-9a-f]{6}", pg_database_name("fresh"))
    assert pg_database_name("fresh") != pg_database_name("fresh")
    monkeypatch.delenv(PREFIX)
    assert re.fullmatch(r"multibank_procs_[0-9]+_[0-9a-f]{6}", pg_database_name("procs"))


@pytest.mark.parametrize("prefix", ["", "bad-name", 'x"; DROP DATABASE test; --', "1st", "x" * 31])
def test_a_prefix_that_is_not_a_plain_short_identifier_is_refused(
    monkeypatch: pytest.MonkeyPatch, prefix: str
) -> None:
    monkeypatch.setenv(PREFIX, prefix)
    with pytest.raises(pytest.UsageError, match=PREFIX):
        pg_database_name("fresh")


@pytest.mark.skipif(DB_KIND != "postgres", reason="databases created on the PostgreSQL server")
async def test_a_database_the_suite_creates_carries_the_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv(PREFIX, "mbprefixed")
    async with empty_database(tmp_path, "harness") as url:
        name = make_url(url).database
        assert name is not None and name.startswith("mbprefixed_harness_")
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                assert (await conn.execute(text("SELECT current_database()"))).scalar() == name
        finally:
            await engine.dispose()
