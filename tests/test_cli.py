"""The `multibank` command: programme create/show/list and db upgrade in-process through typer's
CliRunner, and `multibank serve` as a real subprocess.

The CLI runs its own `asyncio.run`, which cannot run inside the test session's loop: `cli()` runs
it in a worker thread, so these tests can still check the CLI's effects through the operator API.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from click.testing import Result
from typer.testing import CliRunner

from multibank.app import build_container, startup
from multibank.cli import app as cli_app
from multibank.settings import Settings, get_settings
from tests.conftest import DB_KIND
from tests.factories import DEFAULT_MOVEMENT_FEES, PAYMENT_SETTINGS, PROFILE_KINDS

# A new programme's card fees (D19): a purchase costs 10 minor units, the rest nothing.
DEFAULT_CARD_FEES = {
    "purchase": {"EUR": 10, "GBP": 10, "USD": 10},
    "refund": {"EUR": 0, "GBP": 0, "USD": 0},
    "atmWithdrawal": {"EUR": 0, "GBP": 0, "USD": 0},
}
CARD_PROFILE_KINDS = (
    "corporatePrepaidManagedCard",
    "corporateDebitManagedCard",
    "consumerPrepaidManagedCard",
    "consumerDebitManagedCard",
)

PORTAL = "/portal/api/programmes"
STRONG_PASSWORD = {"password": {"value": "Abcdef1!"}}
D4_FEE_TYPES = {
    "ADMIN_FEE": {
        "DEFAULT": {"EUR": 100, "GBP": 100, "USD": 100},
        "PREMIUM": {"EUR": 50, "GBP": 50, "USD": 50},
    }
}
DIGITS = re.compile(r"^[0-9]{1,19}$")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
MULTIBANK = Path(sys.executable).with_name("multibank")
READY_TIMEOUT = 30.0


@contextlib.contextmanager
def cli_database(monkeypatch: pytest.MonkeyPatch, url: str) -> Iterator[None]:
    """Points `get_settings()` (and so the CLI) at `url`."""
    with monkeypatch.context() as m:
        m.setenv("MULTIBANK_DATABASE_URL", url)
        get_settings.cache_clear()
        try:
            yield
        finally:
            get_settings.cache_clear()


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI works on the test session's database, which the `client` fixture also serves."""
    with cli_database(monkeypatch, database_url):
        yield


async def cli(*args: str) -> Result:
    """Runs `multibank ARGS` in-process, in a thread of its own (it calls asyncio.run)."""
    return await asyncio.to_thread(CliRunner().invoke, cli_app, list(args))


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result.stdout


def unique_name() -> str:
    return f"cli{secrets.token_hex(6)}"


async def key_status(client: httpx.AsyncClient, key: str) -> int:
    r = await client.post(
        "/multi/passwords/validate", headers={"api-key": key}, json=STRONG_PASSWORD
    )
    return r.status_code


def assert_d4_shape(data: dict[str, Any]) -> None:
    assert list(data) == [
        "programmeId",
        "apiKey",
        "profiles",
        "currencies",
        "feeTypes",
        "movementFees",
        "cardFees",
    ]
    assert DIGITS.match(data["programmeId"])
    assert list(data["profiles"]) == list(PROFILE_KINDS)
    ids = list(data["profiles"].values())
    assert all(isinstance(i, str) and DIGITS.match(i) for i in ids)
    assert len({data["programmeId"], *ids}) == 1 + len(PROFILE_KINDS)
    assert data["currencies"] == ["EUR", "GBP", "USD"]
    assert data["feeTypes"] == D4_FEE_TYPES
    assert data["movementFees"] == DEFAULT_MOVEMENT_FEES
    assert data["cardFees"] == DEFAULT_CARD_FEES


# programme create / show / list


async def test_programme_create_json_prints_exactly_the_d4_shape(cli_env, client, admin_headers):
    name = unique_name()
    out = ok(await cli("programme", "create", "--name", name, "--json"))
    assert out.count("\n") == 1 and out.endswith("\n")
    data = json.loads(out)
    assert_d4_shape(data)
    assert data["apiKey"].startswith("mb_sbx_")
    assert await key_status(client, data["apiKey"]) == 204
    # The operator API sees the same programme, with the default settings.
    r = await client.get(f"{PORTAL}/{data['programmeId']}/summary", headers=admin_headers)
    assert r.status_code == 200, r.text
    assert r.json() == data
    r = await client.get(f"{PORTAL}/{data['programmeId']}", headers=admin_headers)
    assert r.json()["name"] == name
    assert r.json()["mode"] == "sandbox"
    assert r.json()["settings"] == {
        "stepUpRequired": False,
        "failedLoginLimit": 5,
        "ibanAllocationDelaySeconds": 2,
        "passwordExpiryDays": None,
        **PAYMENT_SETTINGS,
    }


async def test_programme_create_options_set_the_settings(cli_env, client, admin_headers):
    out = ok(
        await cli(
            "programme",
            "create",
            "--name",
            unique_name(),
            "--step-up-required",
            "--failed-login-limit",
            "3",
            "--iban-allocation-delay",
            "0",
            "--json",
        )
    )
    data = json.loads(out)
    assert_d4_shape(data)
    r = await client.get(f"{PORTAL}/{data['programmeId']}", headers=admin_headers)
    assert r.status_code == 200, r.text
    assert r.json()["settings"] == {
        "stepUpRequired": True,
        "failedLoginLimit": 3,
        "ibanAllocationDelaySeconds": 0,
        "passwordExpiryDays": None,
        **PAYMENT_SETTINGS,
    }


async def test_programme_show_json_prints_the_same_json(cli_env, client):
    name = unique_name()
    created = ok(await cli("programme", "create", "--name", name, "--json"))
    shown = ok(await cli("programme", "show", name, "--json"))
    assert shown == created
    assert json.loads(shown)["apiKey"] == json.loads(created)["apiKey"]
    # And again: the sandbox key is shown every time, not only once.
    assert ok(await cli("programme", "show", name, "--json")) == created


async def test_programme_show_without_json(cli_env):
    name = unique_name()
    data = json.loads(ok(await cli("programme", "create", "--name", name, "--json")))
    out = ok(await cli("programme", "show", name))
    lines = out.splitlines()
    assert lines[0] == f"programme {data['programmeId']}"
    assert f"  api-key: {data['apiKey']}" in lines
    for kind, pid in data["profiles"].items():
        assert f"  profile {kind}: {pid}" in lines
    assert "  currencies: EUR, GBP, USD" in lines
    assert "  fee types: ADMIN_FEE" in lines
    assert "  outgoingWireTransfers fee (minor units): EUR 100, GBP 100, USD 100" in lines


# programme movement-fee (D12)


async def test_movement_fee_sets_one_payment_kind_in_one_currency(cli_env, client, admin_headers):
    name = unique_name()
    data = json.loads(ok(await cli("programme", "create", "--name", name, "--json")))
    out = ok(
        await cli(
            "programme",
            "movement-fee",
            name,
            "--payment",
            "sends",
            "--currency",
            "GBP",
            "--amount",
            "35",
        )
    )
    expected = {**DEFAULT_MOVEMENT_FEES, "sends": {"EUR": 0, "GBP": 35, "USD": 0}}
    assert json.loads(out) == expected
    # The operator API sees the same fees: one rule, two doors.
    r = await client.get(f"{PORTAL}/{data['programmeId']}/summary", headers=admin_headers)
    assert r.json()["movementFees"] == expected


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--payment", "cards", "--currency", "EUR", "--amount", "1"], "no payment kind 'cards'"),
        (["--payment", "sends", "--currency", "CHF", "--amount", "1"], "CURRENCY_NOT_SUPPORTED"),
        (["--payment", "sends", "--currency", "eur", "--amount", "1"], "cannot set the fee"),
        (
            ["--payment", "sends", "--currency", "EUR", "--amount", "-1"],
            "greater than or equal to 0",
        ),
    ],
)
async def test_movement_fee_refusals_change_nothing(cli_env, args, says):
    name = unique_name()
    ok(await cli("programme", "create", "--name", name, "--json"))
    result = await cli("programme", "movement-fee", name, *args)
    assert result.exit_code != 0
    assert says in result.output
    shown = json.loads(ok(await cli("programme", "show", name, "--json")))
    assert shown["movementFees"] == DEFAULT_MOVEMENT_FEES


async def test_movement_fee_of_an_unknown_programme_fails(cli_env):
    result = await cli(
        "programme",
        "movement-fee",
        unique_name(),
        "--payment",
        "sends",
        "--currency",
        "EUR",
        "--amount",
        "1",
    )
    assert result.exit_code != 0
    assert "not found" in result.output


# programme card-fee (D19, D33)


async def test_programme_json_names_the_four_card_profiles_and_the_card_fees(cli_env):
    name = unique_name()
    created = json.loads(ok(await cli("programme", "create", "--name", name, "--json")))
    shown = json.loads(ok(await cli("programme", "show", name, "--json")))
    for data in (created, shown):
        card_ids = [data["profiles"][kind] for kind in CARD_PROFILE_KINDS]
        assert all(DIGITS.match(i) for i in card_ids)
        others = [v for k, v in data["profiles"].items() if k not in CARD_PROFILE_KINDS]
        assert len(set(card_ids)) == 4 and not set(card_ids) & set(others)
        assert data["cardFees"] == DEFAULT_CARD_FEES


async def test_card_fee_sets_one_fee_in_one_currency(cli_env, client, admin_headers):
    name = unique_name()
    data = json.loads(ok(await cli("programme", "create", "--name", name, "--json")))
    out = ok(
        await cli(
            "programme", "card-fee", name, "--fee", "purchase", "--currency", "GBP",
            "--amount", "35",
        )
    )  # fmt: skip
    expected = {**DEFAULT_CARD_FEES, "purchase": {"EUR": 10, "GBP": 35, "USD": 10}}
    assert json.loads(out) == expected
    assert json.loads(ok(await cli("programme", "show", name, "--json")))["cardFees"] == expected
    ok(await cli("programme", "card-fee", name, "--fee", "atmWithdrawal", "--currency", "EUR",
                 "--amount", "0"))  # fmt: skip
    ok(await cli("programme", "card-fee", name, "--fee", "refund", "--currency", "USD",
                 "--amount", "7"))  # fmt: skip
    expected["refund"] = {"EUR": 0, "GBP": 0, "USD": 7}
    # The operator API sees the same fees: one rule, two doors.
    r = await client.get(f"{PORTAL}/{data['programmeId']}/card_fees", headers=admin_headers)
    assert r.status_code == 200, r.text
    assert r.json() == expected
    shown = ok(await cli("programme", "show", name))
    assert "  card purchase fee (minor units): EUR 10, GBP 35, USD 10" in shown.splitlines()


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--fee", "cashback", "--currency", "EUR", "--amount", "1"], 2, "no card fee 'cashback'"),
        (["--fee", "purchase", "--currency", "EUR", "--amount", "-1"], 2, "--amount"),
        (["--fee", "purchase", "--currency", "eur", "--amount", "1"], 2, "--currency"),
        (["--fee", "refund", "--currency", "CHF", "--amount", "1"], 1,
         "CURRENCY_NOT_SUPPORTED_BY_PROFILE (CHF is not a currency of"),
    ],
    ids=["unknown-kind", "negative", "malformed-currency", "currency-not-the-programmes"],
)  # fmt: skip
async def test_card_fee_refusals_say_why_and_change_nothing(cli_env, args, code, says):
    name = unique_name()
    ok(await cli("programme", "create", "--name", name, "--json"))
    result = await cli("programme", "card-fee", name, *args)
    assert result.exit_code == code, result.output
    flat = " ".join(ANSI.sub("", result.output).replace("│", " ").split())
    assert says in flat, result.output
    shown = json.loads(ok(await cli("programme", "show", name, "--json")))
    assert shown["cardFees"] == DEFAULT_CARD_FEES


async def test_card_fee_of_an_unknown_programme_fails(cli_env):
    args = ("--fee", "purchase", "--currency", "EUR", "--amount", "1")
    result = await cli("programme", "card-fee", unique_name(), *args)
    assert result.exit_code == 1
    assert "not found" in result.output


async def test_programme_show_of_a_programme_created_by_the_operator_api(
    cli_env, client, admin_headers
):
    name = unique_name()
    r = await client.post(PORTAL, headers=admin_headers, json={"name": name})
    assert r.status_code == 201, r.text
    assert json.loads(ok(await cli("programme", "show", name, "--json"))) == r.json()


async def test_live_programme_key_is_not_shown_again(cli_env, client):
    name = unique_name()
    data = json.loads(ok(await cli("programme", "create", "--name", name, "--live", "--json")))
    assert data["apiKey"].startswith("mb_live_")
    assert await key_status(client, data["apiKey"]) == 204
    shown = json.loads(ok(await cli("programme", "show", name, "--json")))
    assert shown == {**data, "apiKey": None}
    assert data["apiKey"] not in ok(await cli("programme", "show", name))


async def test_programme_list_lists_it(cli_env):
    names = [unique_name(), unique_name()]
    created = {}
    for name, extra in zip(names, ([], ["--live"]), strict=True):
        out = ok(await cli("programme", "create", "--name", name, "--json", *extra))
        created[name] = json.loads(out)["programmeId"]
    lines = ok(await cli("programme", "list")).splitlines()
    assert f"{created[names[0]]}\t{names[0]}\tsandbox" in lines
    assert f"{created[names[1]]}\t{names[1]}\tlive" in lines
    assert all(line.count("\t") == 2 for line in lines)


async def test_duplicate_programme_name_fails_with_a_message(cli_env, client, admin_headers):
    name = unique_name()
    first = json.loads(ok(await cli("programme", "create", "--name", name, "--json")))
    result = await cli("programme", "create", "--name", name, "--json")
    assert result.exit_code != 0
    assert result.stdout == ""
    assert "PROGRAMME_NAME_NOT_UNIQUE" in result.stderr
    assert name in result.stderr
    lines = ok(await cli("programme", "list")).splitlines()
    assert [line for line in lines if line.split("\t")[1] == name] == [
        f"{first['programmeId']}\t{name}\tsandbox"
    ]
    # The first programme's key is still the one shown.
    assert json.loads(ok(await cli("programme", "show", name, "--json"))) == first


@pytest.mark.parametrize(
    "args",
    [
        ["--name", "bad name"],
        ["--name", "x" * 101],
        ["--name", "{name}", "--iban-allocation-delay", "86401"],
        ["--name", "{name}", "--failed-login-limit", "0"],
    ],
)
async def test_programme_create_refuses_invalid_options(cli_env, args):
    name = unique_name()
    args = [a.format(name=name) for a in args]
    result = await cli("programme", "create", *args, "--json")
    assert result.exit_code != 0
    assert result.stdout == ""
    assert result.stderr.strip(), "no message"
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)
    names = [line.split("\t")[1] for line in ok(await cli("programme", "list")).splitlines()]
    assert name not in names and "bad name" not in names


async def test_programme_show_of_an_unknown_name_fails(cli_env):
    name = unique_name()
    result = await cli("programme", "show", name, "--json")
    assert result.exit_code != 0
    assert result.stdout == ""
    assert name in result.stderr
    assert "not found" in result.stderr


# db upgrade


async def test_db_upgrade_creates_the_schema(fresh_database_url, monkeypatch):
    with cli_database(monkeypatch, fresh_database_url):
        before = await cli("programme", "list")
        assert before.exit_code != 0  # no tables yet
        assert ok(await cli("db", "upgrade")) == "database is up to date\n"
        assert ok(await cli("programme", "list")) == ""
        # A second upgrade is a no-op that keeps the data.
        name = unique_name()
        ok(await cli("programme", "create", "--name", name))
        assert ok(await cli("db", "upgrade")) == "database is up to date\n"
        [line] = ok(await cli("programme", "list")).splitlines()
        assert line.split("\t")[1:] == [name, "sandbox"]


# multibank serve


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_env(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MULTIBANK_")}
    env["MULTIBANK_DATABASE_URL"] = database_url
    env["MULTIBANK_LOG_LEVEL"] = "WARNING"
    return env


@contextlib.asynccontextmanager
async def serving(
    database_url: str, out: Path, settings: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """Starts `multibank serve` on a free port (with `MULTIBANK_*` `settings`), yields its base
    URL once /readyz answers 200, and always stops it."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            str(MULTIBANK),
            "serve",
            "--port",
            str(port),
            env={**_server_env(database_url), **(settings or {})},
            stdout=stdout,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        async with httpx.AsyncClient(base_url=base, timeout=2) as http:
            while True:
                assert proc.returncode is None, (
                    f"serve exited with {proc.returncode}: "
                    f"{out.with_suffix('.err').read_text(errors='replace')}"
                )
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/readyz")).status_code == 200:
                        break
                assert time.monotonic() < deadline, "serve not ready within 30 s"
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


def _printed(out: Path) -> dict[str, Any]:
    text = out.read_text()
    key = re.search(r"^  api-key: (\S+)$", text, re.M)
    profiles = re.search(r"^  profiles: (\{.*\})$", text, re.M)
    programme = re.search(r"^programme 'default'( \(created now\))?: id ([0-9]+)$", text, re.M)
    admin = re.search(r"^  admin token: +(\S+) \(generated now; ", text, re.M)
    source = re.search(r"^  admin token: +(.*)$", text, re.M)
    assert key and profiles and programme, text
    return {
        "text": text,
        "apiKey": key.group(1),
        "profiles": json.loads(profiles.group(1)),
        "programmeId": programme.group(2),
        "created": programme.group(1) is not None,
        "adminToken": admin.group(1) if admin else None,
        "adminTokenSource": source.group(1) if source else None,
    }


@pytest.mark.skipif(DB_KIND != "sqlite", reason="serve runs on a fresh SQLite file")
async def test_serve_creates_the_default_programme_once(tmp_path, monkeypatch):
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}"

    first_out = tmp_path / "first.out"
    async with serving(database_url, first_out) as base:
        first = _printed(first_out)
        for path in ("/multi", "/3.29.1/multi", "/3.1.0/multi"):
            assert f"{base}{path} " in first["text"] or f"{base}{path}\n" in first["text"]
        # The banner names the home page and the portal, and both answer.
        assert f"{base}/ " in first["text"] and f"{base}/portal/\n" in first["text"]
        assert first["created"]
        assert first["apiKey"].startswith("mb_sbx_")
        assert list(first["profiles"]) == list(PROFILE_KINDS)
        assert all(DIGITS.match(p) for p in first["profiles"].values())
        assert first["adminToken"]
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            for path in ("/multi", "/3.29.1/multi", "/3.1.0/multi"):
                r = await http.get(f"{path}/openapi.json")
                assert r.status_code == 200, (path, r.status_code)
                assert r.json()["openapi"].startswith("3.")
                assert "server" not in r.headers  # no `server: uvicorn` banner (issue 10)
            r = await http.post(
                "/multi/passwords/validate",
                headers={"api-key": first["apiKey"]},
                json=STRONG_PASSWORD,
            )
            assert r.status_code == 204, r.text
            r = await http.post(
                "/multi/passwords/validate",
                headers={"api-key": first["apiKey"] + "x"},
                json=STRONG_PASSWORD,
            )
            assert r.status_code == 401
            assert (await http.get("/")).status_code == 200
            portal = await http.get("/portal/", follow_redirects=True)
            assert portal.status_code == 200 and "<form" in portal.text, portal.text[:300]
            # The printed admin token opens the operator API, which shows the same programme.
            r = await http.get(
                f"{PORTAL}/{first['programmeId']}/summary",
                headers={"Authorization": f"Bearer {first['adminToken']}"},
            )
            assert r.status_code == 200, r.text
            assert r.json()["apiKey"] == first["apiKey"]
            assert r.json()["profiles"] == first["profiles"]

    second_out = tmp_path / "second.out"
    async with serving(database_url, second_out) as base:
        second = _printed(second_out)
        assert not second["created"]
        assert second["adminToken"] is None
        # Every start says where the admin token comes from (issue 41 §1).
        assert second["adminTokenSource"] == (
            "generated on first start, kept in the database: `multibank admin-token` shows it"
        )
        assert (second["programmeId"], second["apiKey"], second["profiles"]) == (
            first["programmeId"],
            first["apiKey"],
            first["profiles"],
        )
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            r = await http.post(
                "/multi/passwords/validate",
                headers={"api-key": second["apiKey"]},
                json=STRONG_PASSWORD,
            )
            assert r.status_code == 204, r.text

    third_out = tmp_path / "third.out"
    async with serving(database_url, third_out, {"MULTIBANK_ADMIN_TOKEN": "t" * 40}):
        assert _printed(third_out)["adminTokenSource"] == "from MULTIBANK_ADMIN_TOKEN"

    with cli_database(monkeypatch, database_url):
        lines = ok(await cli("programme", "list")).splitlines()
        assert lines == [f"{first['programmeId']}\tdefault\tsandbox"]
        shown = json.loads(ok(await cli("programme", "show", "default", "--json")))
    assert shown["apiKey"] == first["apiKey"]
    assert shown["profiles"] == first["profiles"]
    assert shown["programmeId"] == first["programmeId"]


# A missing, unreachable or unmigrated database (issue 10)


@pytest.mark.parametrize(
    "args",
    [
        ("ledger", "verify"),
        ("programme", "list"),
        ("programme", "show", "default"),
    ],
)
async def test_commands_on_a_missing_database_say_so_and_create_nothing(
    tmp_path, monkeypatch, args
):
    missing = tmp_path / "nowhere.db"
    with cli_database(monkeypatch, f"sqlite+aiosqlite:///{missing}"):
        result = await cli(*args)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"no database at {missing}: run `multibank db upgrade` (or `multibank serve`)"
    ]
    assert not missing.exists()


async def test_commands_on_an_unmigrated_or_unreachable_database_say_so(tmp_path, monkeypatch):
    import sqlite3

    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with cli_database(monkeypatch, f"sqlite+aiosqlite:///{empty}"):
        result = await cli("ledger", "verify")
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert line.endswith("is not migrated: run `multibank db upgrade`"), line
    with cli_database(monkeypatch, "postgresql+asyncpg://nobody:secret@127.0.0.1:1/none"):
        for args in (("programme", "list"), ("db", "upgrade")):
            result = await cli(*args)
            assert result.exit_code == 2, result.output
            [line] = result.output.strip().splitlines()
            assert line.startswith("cannot use the database at postgresql+asyncpg://nobody:***@")
            assert "secret" not in line


async def test_programme_create_with_a_webhook_url(cli_env, client, admin_headers):
    out = ok(
        await cli(
            "programme",
            "create",
            "--name",
            unique_name(),
            "--webhook-url",
            "https://hooks.example.com/multibank",
            "--json",
        )
    )
    pid = json.loads(out)["programmeId"]
    r = await client.get(f"{PORTAL}/{pid}", headers=admin_headers)
    assert r.json()["settings"]["webhookUrl"] == "https://hooks.example.com/multibank"
    # A live programme may not send its events to a private address (D16).
    name = unique_name()
    refused = await cli(
        "programme", "create", "--name", name, "--live", "--webhook-url", "http://10.0.0.7/h"
    )
    assert refused.exit_code == 1
    assert "WEBHOOK_URL_NOT_ALLOWED" in refused.output
    assert (await cli("programme", "show", name)).exit_code == 1  # nothing was created


# Start-up refusals (issue 32): one line on stderr and exit 2, nothing created, never a traceback

# Every command of the app with the arguments it needs; the first test keeps the list whole.
EVERY_COMMAND = [
    ("serve", "--port", "1"),
    ("db", "upgrade"),
    ("programme", "create", "--name", "refused"),
    ("programme", "show", "default"),
    ("programme", "list"),
    ("programme", "movement-fee", "default", "--payment", "sends", "--currency", "EUR",
     "--amount", "1"),
    ("programme", "card-fee", "default", "--fee", "purchase", "--currency", "EUR",
     "--amount", "1"),
    ("ledger", "verify"),
    ("audit", "verify"),
    ("webhooks", "listen", "--port", "0"),
    ("webhooks", "deliver"),
    ("sandbox", "seed"),
    ("cards", "pool", "create", "--profile", "1", "--count", "1"),
    ("webhooks", "trigger", "login.VERIFIED"),
    ("webhooks", "replay", "1"),
    ("programme", "reset", "default", "--yes"),
    ("programme", "export", "default"),
    ("programme", "import", "missing.json", "--name", "copy"),
    ("admin-token",),
    ("info",),
    ("clock", "show"),
    ("clock", "advance", "1d"),
]  # fmt: skip
# Those that work on a database `serve` or `db upgrade` made, and never make one themselves
# (`info` says what it finds, a missing database included: tests/test_cli_database.py).
ON_A_MADE_DATABASE = [args for args in EVERY_COMMAND if args[0] not in ("serve", "db", "info")]


def test_every_command_is_listed_here() -> None:
    def leaves(path: tuple[str, ...], command: Any) -> list[tuple[str, ...]]:
        subs = getattr(command, "commands", None)
        if subs is None:
            return [path]
        return [leaf for name, sub in subs.items() for leaf in leaves((*path, name), sub)]

    commands = set(leaves((), typer.main.get_command(cli_app)))
    listed = [next(args[:n] for n in (1, 2, 3) if args[:n] in commands) for args in EVERY_COMMAND]
    assert sorted(listed) == sorted(commands)


def one_line(err: str) -> str:
    """The only line of `err`, which holds no traceback."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


async def multibank(
    *args: str,
    settings: dict[str, str] | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> tuple[int, str, str, float]:
    """Runs `multibank ARGS` in a process of its own with only the `MULTIBANK_*` `settings`
    given (and any other variables of `env`); answers its exit code, stdout, stderr and how
    many seconds it took."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MULTIBANK_")}
    # Bytecode kept outside the tree, so each start does not compile every library again.
    environ.pop("PYTHONDONTWRITEBYTECODE", None)
    environ.setdefault(
        "PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "multibank-pycache")
    )
    environ.update({**(env or {}), **(settings or {})})
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        str(MULTIBANK),
        *args,
        env=environ,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode(), time.monotonic() - started


async def test_sandbox_seed_in_another_folder_refuses_as_programme_list_does(tmp_path):
    """No MULTIBANK_DATABASE_URL: the default database, in the user's data directory, which
    holds none yet; neither it nor the folder the commands run in gets one (issue 41 §1)."""
    data_home, folder = tmp_path / "data", tmp_path / "folder"
    folder.mkdir()
    default = data_home / "multibank" / "multibank.db"
    said = []
    for args in (("programme", "list"), ("sandbox", "seed"), ("admin-token",)):
        code, out, err, _ = await multibank(
            *args, cwd=folder, env={"XDG_DATA_HOME": str(data_home)}
        )
        assert (code, out) == (2, ""), (args, code, out, err)
        said.append(one_line(err))
    assert (
        said == [f"no database at {default}: run `multibank db upgrade` (or `multibank serve`)"] * 3
    )
    assert list(folder.iterdir()) == []  # no new database, key or admin token
    assert not data_home.exists()


@pytest.mark.parametrize("args", ON_A_MADE_DATABASE, ids=" ".join)
async def test_commands_on_an_empty_database_refuse_and_create_nothing(
    fresh_database_url, monkeypatch, args
):
    """SQLite: no file yet; PostgreSQL: a database with no tables."""
    with cli_database(monkeypatch, fresh_database_url):
        result = await cli(*args)
        assert result.exit_code == 2, (result.output, result.exception)
        assert result.stdout == ""
        line = one_line(result.stderr)
        assert line.endswith(("run `multibank db upgrade`", "(or `multibank serve`)")), line
        # Still nothing there: the next command says the same.
        again = await cli("programme", "list")
        assert (again.exit_code, again.stderr) == (2, result.stderr)


async def test_ledger_verify_of_an_unknown_programme_exits_2_not_1(cli_env):
    """1 means a broken ledger: a monitor must not page anyone for a mistyped name."""
    name = unique_name()
    result = await cli("ledger", "verify", "--programme", name)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    # The database it opened, named first (issue 41 §1), then the one line that refuses.
    opened, refused = result.stderr.strip().splitlines()
    assert opened.startswith("database: ")
    assert name in refused and "not found" in refused
    assert ok(await cli("ledger", "verify")).endswith("ledger verify: ok\n")


UNSUPPORTED_URLS = ["mysql://root@127.0.0.1/multibank", "mysql+pymysql://u:p@h/db", "oracle://h/x"]


@pytest.mark.parametrize("url", UNSUPPORTED_URLS, ids=["mysql", "mysql+pymysql", "oracle"])
@pytest.mark.parametrize("args", EVERY_COMMAND, ids=" ".join)
async def test_an_unsupported_database_url_is_one_line(monkeypatch, args, url):
    with cli_database(monkeypatch, url):
        result = await cli(*args)
    assert result.exit_code == 2, (result.output, result.exception)
    line = one_line(result.stderr)
    assert line.startswith("invalid settings: MULTIBANK_DATABASE_URL: "), line
    assert "PostgreSQL" in line and "SQLite" in line
    assert ":p@" not in line


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        ("k1:tooshort", "the secret of key 'k1' has 8 characters; at least 32 are needed"),
        ("justasecretwithoutanykeyidinfront", "pair 1 is not kid:secret"),
        (f"k1:{'s' * 40},k2:", "the secret of key 'k2' has 0 characters"),
    ],
    ids=["short", "no-kid", "empty-second"],
)
@pytest.mark.parametrize("args", EVERY_COMMAND, ids=" ".join)
async def test_wrong_jwt_keys_are_one_line(monkeypatch, tmp_path, args, keys, says):
    with cli_database(monkeypatch, f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}"):
        monkeypatch.setenv("MULTIBANK_JWT_KEYS", keys)
        result = await cli(*args)
    assert result.exit_code == 2, (result.output, result.exception)
    line = one_line(result.stderr)
    assert line.startswith(f"invalid settings: MULTIBANK_JWT_KEYS: {says}"), line
    assert "tooshort" not in line and "justasecret" not in line  # never a secret
    assert not (tmp_path / "keys.db").exists()


@pytest.mark.any_database  # its own SQLite file, or no database at all
@pytest.mark.parametrize(
    "settings",
    [
        {"MULTIBANK_DATABASE_URL": UNSUPPORTED_URLS[0]},
        {"MULTIBANK_JWT_KEYS": "k1:tooshort"},
        {"MULTIBANK_MODE": "live"},
    ],
    ids=["mysql", "short-jwt-secret", "live-without-secrets"],
)
async def test_serve_with_wrong_settings_is_one_line(tmp_path, settings):
    """The process as an operator starts it: stderr holds the one line, and no traceback."""
    database = tmp_path / "serve.db"
    code, out, err, _ = await multibank(
        "serve",
        "--port",
        str(_free_port()),
        settings={"MULTIBANK_DATABASE_URL": f"sqlite+aiosqlite:///{database}", **settings},
    )
    assert (code, out) == (2, ""), (code, out, err)
    line = one_line(err)
    assert line.startswith("invalid settings: ") and "MULTIBANK_" in line, line
    assert not database.exists()


LIVE_SECRETS = {"MULTIBANK_ADMIN_TOKEN": "a" * 40, "MULTIBANK_JWT_KEYS": "k1:" + "s" * 48}


@pytest.mark.any_database  # its own SQLite file, or no database at all
async def test_a_live_server_refuses_to_start_without_its_card_keys(tmp_path):
    """Card numbers must be readable only with keys the operator holds (D29): a live server
    never generates its own, and says which variable is missing."""
    database = tmp_path / "live.db"
    code, out, err, _ = await multibank(
        "serve",
        "--port",
        str(_free_port()),
        settings={
            "MULTIBANK_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
            "MULTIBANK_MODE": "live",
            **LIVE_SECRETS,
            "MULTIBANK_CARD_VERIFICATION_KEY": "v" * 40,
        },
    )
    assert (code, out) == (2, ""), (code, out, err)
    line = one_line(err)
    assert line.startswith("invalid settings: "), line
    assert "live mode refuses to start without MULTIBANK_CARD_DATA_KEY" in line
    assert "MULTIBANK_CARD_VERIFICATION_KEY" not in line  # that one was given
    assert "v" * 40 not in line and "s" * 48 not in line  # never a secret
    assert not database.exists()


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({}, "MULTIBANK_CARD_DATA_KEY, MULTIBANK_CARD_VERIFICATION_KEY"),
        ({"card_data_key": "k1:" + "d" * 40}, "MULTIBANK_CARD_VERIFICATION_KEY"),
        ({"card_verification_key": "v" * 40}, "MULTIBANK_CARD_DATA_KEY"),
    ],
    ids=["neither", "no-verification-key", "no-data-key"],
)
def test_live_settings_name_each_missing_card_key(given, named):
    secrets_ = {"admin_token": "a" * 40, "jwt_keys": "k1:" + "s" * 48}
    with pytest.raises(ValueError, match=rf"live mode refuses to start without {named} \["):
        Settings(mode="live", **secrets_, **given)
    both = {"card_data_key": "k1:" + "d" * 40, "card_verification_key": "v" * 40}
    assert Settings(mode="live", **secrets_, **both).card_data_key == both["card_data_key"]
    # A sandbox generates its own on first start.
    assert Settings(mode="sandbox").card_data_key is None


async def test_a_live_container_without_card_keys_does_not_start(settings):
    """Settings copied into live mode skip the validator; start-up checks again."""
    live = build_container(settings.model_copy(update={"mode": "live", "card_data_key": None}))
    try:
        with pytest.raises(RuntimeError, match="MULTIBANK_CARD_DATA_KEY"):
            await startup(live)
    finally:
        await live.db.dispose()


@pytest.mark.any_database  # its own SQLite file, or no database at all
async def test_serve_on_a_taken_port_says_so_before_anything(tmp_path):
    database = tmp_path / "serve.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err, _ = await multibank(
            "serve",
            "--port",
            str(port),
            settings={"MULTIBANK_DATABASE_URL": f"sqlite+aiosqlite:///{database}"},
        )
    assert (code, out) == (2, ""), (code, out, err)  # no "serving on"
    line = one_line(err)
    assert line.startswith(f"cannot listen on 127.0.0.1:{port}: Address already in use"), line
    assert "--port" in line
    assert not database.exists()  # said before the database was touched


@pytest.mark.any_database  # its own SQLite file, or no database at all
async def test_serve_does_not_wait_for_a_sqlite_file_it_cannot_open(tmp_path):
    """Only a database server can come up later: a SQLite path is refused at once."""
    code, out, err, took = await multibank(
        "serve",
        "--port",
        str(_free_port()),
        settings={
            "MULTIBANK_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'no' / 'such.db'}",
            "MULTIBANK_DATABASE_STARTUP_TIMEOUT_SECONDS": "60",
        },
    )
    assert (code, out) == (2, ""), (code, out, err)
    assert one_line(err).endswith(": unable to open database file")  # no "waiting up to 60 s"
    assert took < 30


@pytest.mark.skipif(DB_KIND != "postgres", reason="a PostgreSQL server that answers")
@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"database": "multibank_no_such_database"}, "does not exist"),
        ({"username": "multibank_no_such_role"}, 'role "multibank_no_such_role"'),
    ],
    ids=["missing-database", "refused-login"],
)
async def test_serve_says_at_once_what_postgresql_refused(change, says):
    """The server answers, so there is nothing to wait for: one line, within seconds."""
    from sqlalchemy.engine import make_url

    from tests.conftest import PG_ADMIN_URL

    url = make_url(PG_ADMIN_URL).set(**change).render_as_string(hide_password=False)
    code, out, err, took = await multibank(
        "serve",
        "--port",
        str(_free_port()),
        settings={
            "MULTIBANK_DATABASE_URL": url,
            "MULTIBANK_DATABASE_STARTUP_TIMEOUT_SECONDS": "60",
        },
    )
    assert (code, out) == (2, ""), (code, out, err)
    line = one_line(err)  # no "waiting up to 60 s for the database" first
    assert line.startswith("cannot use the database at postgresql") and says in line, line
    assert took < 30
