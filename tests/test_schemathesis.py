"""Schemathesis against a running server: every operation of each version, called with the
values its OpenAPI document allows and the boundary values it does not, never answers a 5xx.

Runs on the SQLite half only (it serves its own database file); the logic under test is the
same on PostgreSQL, where the rest of the suite covers it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest

from tests.conftest import DB_KIND
from tests.test_cli import MULTIBANK, _printed, serving

ST = MULTIBANK.with_name("st")
SKIP = "logout|passwords/update|lost_password|access_token|deactivate"

pytestmark = pytest.mark.skipif(DB_KIND != "sqlite", reason="serves its own SQLite file")


async def _logged_in(base: str, printed: dict[str, object]) -> tuple[str, str]:
    key = str(printed["apiKey"])
    profiles = printed["profiles"]
    assert isinstance(profiles, dict)
    h = {"api-key": key}
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        r = await http.post(
            "/multi/corporates",
            headers=h,
            json={
                "profileId": profiles["corporate"],
                "rootUser": {
                    "name": "Fuzz",
                    "surname": "Er",
                    "email": "fuzz@example.com",
                    "mobile": {"countryCode": "+44", "number": "7700900123"},
                    "companyPosition": "DIRECTOR",
                },
                "company": {"type": "LLC", "name": "Fuzz Ltd", "registrationCountry": "GB"},
                "acceptedTerms": True,
                "ipAddress": "127.0.0.1",
                "baseCurrency": "EUR",
            },
        )
        assert r.status_code == 200, r.text
        body = r.json()
        r = await http.post(
            f"/multi/passwords/{body['rootUser']['id']['id']}/create",
            headers=h,
            json={"password": {"value": "Fuzz-er-123!"}},
        )
        token = r.json()["token"]
        r = await http.post(
            f"/simulate/api/corporates/{body['id']['id']}/verify", headers={"programme-key": key}
        )
        assert r.status_code == 204
    return key, str(token)


@pytest.mark.parametrize("version", ["/multi", "/3.1.0/multi"])
async def test_no_operation_answers_a_server_error(tmp_path: Path, version: str) -> None:
    out = tmp_path / "serve.out"
    async with serving(f"sqlite+aiosqlite:///{tmp_path}/fuzz.db", out) as base:
        printed = _printed(out)
        key, token = await _logged_in(base, printed)
        env = {**os.environ, "HYPOTHESIS_STORAGE_DIRECTORY": str(tmp_path / "hypothesis")}
        proc = await asyncio.create_subprocess_exec(
            str(ST),
            "run",
            f"{base}{version}/openapi.json",
            "-H",
            f"api-key: {key}",
            "-H",
            f"Authorization: Bearer {token}",
            "--checks",
            "not_a_server_error",
            "--exclude-path-regex",
            SKIP,
            "--phases",
            "coverage",
            "--workers",
            "1",
            "--max-time",
            "120",
            cwd=tmp_path,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(proc.communicate(), 300)
    text = output.decode(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    assert "passed" in text
