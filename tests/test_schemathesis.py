"""Schemathesis against a running server: each of the four OpenAPI descriptions (both versions,
the simulator, the operator API) is the contract a generated client is built from, so every
operation is called with the values its description allows and the values it does not, and
every check is on: no 5xx, each status, content type, header and body declared, schema-valid
requests accepted and schema-invalid ones refused, undeclared methods answered 405 with `Allow`.

Settings that follow the server's contract rather than schemathesis' defaults are in
`tests/st_conformance/` (413 for an over-long idempotency-ref; how the two headers of the
banking API are sent). The `ignored_auth` check is off: it takes the reference's answer to a
request without any credentials (400, "api-key header is required", contract section 2) for an
operation that ignores authentication; tests/api/test_security_matrix.py proves instead that
every authenticated operation refuses every missing or bad credential.

Runs on the SQLite half only (it serves its own database file); the logic under test is the
same on PostgreSQL, where the rest of the suite covers it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import DB_KIND
from tests.test_cli import MULTIBANK, _printed, serving

ST = MULTIBANK.with_name("st")
ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "tests" / "st_conformance" / "schemathesis.toml"
# Operations that end the one session every other call uses.
SKIP = "logout|passwords/update|lost_password|access_token|deactivate"
SECONDS_PER_DESCRIPTION = 40
# The conformance run sends thousands of requests from one address: the limits are lifted so
# that what is checked is the description, not the throttle (tests/api/test_ratelimits.py).
UNLIMITED = {
    f"MULTIBANK_RATE_LIMIT_{name}": "1000000/minute"
    for name in ("LOGIN", "CODE_SEND", "CODE_VERIFY", "IP", "API_KEY", "ADMIN_AUTH")
}

# The server serves its own SQLite file whatever the half, so the runs are shared between the
# two halves of scripts/test (which run side by side, one per core) instead of all in one.
IN_HALF = {"/simulate/api": "postgres", "/portal/api": "postgres"}


def in_half(half: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(half != DB_KIND, reason=f"runs in the {half} half of the suite")


async def _logged_in(base: str, printed: dict[str, Any]) -> str:
    """A verified corporate's root user, logged in: the token every banking call uses."""
    key = str(printed["apiKey"])
    h = {"api-key": key}
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        r = await http.post(
            "/multi/corporates",
            headers=h,
            json={
                "profileId": printed["profiles"]["corporate"],
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
        assert r.status_code == 200, r.text
        token = str(r.json()["token"])
        r = await http.post(
            f"/simulate/api/corporates/{body['id']['id']}/verify", headers={"programme-key": key}
        )
        assert r.status_code == 204, r.text
    return token


@pytest.fixture(scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, str]]:
    folder = tmp_path_factory.mktemp("conformance")
    out = folder / "serve.out"
    async with serving(f"sqlite+aiosqlite:///{folder}/fuzz.db", out, UNLIMITED) as base:
        printed = _printed(out)
        token = await _logged_in(base, printed)
        yield {
            "base": base,
            "MB_API_KEY": str(printed["apiKey"]),
            "MB_TOKEN": token,
            "MB_ADMIN_TOKEN": str(printed["adminToken"]),
        }


async def _st(
    server: dict[str, str], tmp_path: Path, *args: str, banking: bool = True
) -> tuple[int, str]:
    env = {
        **os.environ,
        "MB_SEND_API_KEY": "1" if banking else "",
        "MB_API_KEY": server["MB_API_KEY"],
        "MB_TOKEN": server["MB_TOKEN"],
        "MB_ADMIN_TOKEN": server["MB_ADMIN_TOKEN"],
        "SCHEMATHESIS_HOOKS": "tests.st_conformance.hooks",
        "PYTHONPATH": str(ROOT),
        "HYPOTHESIS_STORAGE_DIRECTORY": str(tmp_path / "hypothesis"),
    }
    proc = await asyncio.create_subprocess_exec(
        str(ST),
        "--config-file",
        str(CONFIG),
        "run",
        *args,
        "--exclude-path-regex",
        SKIP,
        "--workers",
        "1",
        "--no-color",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(proc.communicate(), SECONDS_PER_DESCRIPTION * 4 + 120)
    assert proc.returncode is not None
    return proc.returncode, output.decode(errors="replace")


# Schemathesis' fuzzing phase stalls while drawing data for some of the banking API's patterns
# (it sent nothing for minutes): there, the coverage phase (every operation with its boundary
# and invalid values, every undeclared method) and the examples are the bounded run.
PHASES = {
    "/multi": "examples,coverage",
    "/3.1.0/multi": "examples,coverage",
    "/simulate/api": "examples,coverage,fuzzing",
    "/portal/api": "examples,coverage,fuzzing",
}


@pytest.mark.parametrize(
    "api", [pytest.param(api, marks=in_half(IN_HALF.get(api, "sqlite"))) for api in PHASES]
)
async def test_the_server_answers_what_its_description_declares(
    server: dict[str, str], tmp_path: Path, api: str
) -> None:
    code, text = await _st(
        server,
        tmp_path,
        f"{server['base']}{api}/openapi.json",
        "--checks",
        "all",
        "--exclude-checks",
        "ignored_auth",
        "--phases",
        PHASES[api],
        "--max-examples",
        "10",
        "--max-time",
        str(SECONDS_PER_DESCRIPTION),
        banking=api.endswith("/multi"),
    )
    assert code == 0, text[-6000:]
    assert " passed" in text and "failure" not in text.splitlines()[-1], text[-3000:]


@in_half("sqlite")
async def test_the_run_catches_a_status_the_description_leaves_out(
    server: dict[str, str], tmp_path: Path
) -> None:
    """The check above can fail: the same run against a copy of the description that leaves
    out `GET /corporates`' 401 finds the 401 the server answers to a bad token."""
    async with httpx.AsyncClient(base_url=server["base"]) as http:
        document = (await http.get("/multi/openapi.json")).json()
    del document["paths"]["/corporates"]["get"]["responses"]["401"]
    doctored = tmp_path / "doctored.json"
    doctored.write_text(json.dumps(document))
    code, text = await _st(
        server,
        tmp_path,
        str(doctored),
        "--url",
        f"{server['base']}/multi",
        "--include-operation-id",
        "corporateGet",
        "--checks",
        "status_code_conformance",
        "--phases",
        "coverage",
    )
    assert code != 0, text[-3000:]
    assert "ST103 Undocumented status code" in text and "Received: 401" in text, text[-3000:]
