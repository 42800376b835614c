"""The home page at `/` (issue 14, "the first five minutes"): where everything is, the `default`
programme's API key, and a quick start that works as written, replayed here from the page's text
as a reader would paste it. Also the "how to start" text of each version's OpenAPI document."""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from multibank.app import build_container, create_app
from multibank.cli import ensure_default_programme
from multibank.container import Container
from multibank.kernel.migrate import upgrade
from multibank.landing import Sandbox, render
from multibank.settings import Settings
from tests.conftest import ADMIN_TOKEN, BASES, DB_KIND, LIVE_CARD_KEYS

BASE = "http://testserver"  # the `client` fixture's base URL: the page writes it into every command
DOCS = (
    "/multi/docs",
    "/3.29.1/multi/docs",
    "/3.1.0/multi/docs",
    "/multi/openapi.json",
    "/3.29.1/multi/openapi.json",
    "/3.1.0/multi/openapi.json",
    "/simulate/api/docs",
    "/portal/",
    "/portal/api/docs",
)
STEP = re.compile(r'<pre class="step">(.*?)</pre>', re.S)
KEY = re.compile(r'<code class="key" id="api-key">(.*?)</code>', re.S)


async def default_key(container: Container) -> str:
    """The `default` sandbox programme's key, creating the programme as `multibank serve` does
    when the session's database has none (the database is shared: nothing is renamed)."""
    description, _ = await ensure_default_programme(container.db)
    assert description.apiKey, "the default programme of the test database has no usable key"
    return description.apiKey


def hrefs(page: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="([^"]*)"', page)]


async def test_home_page_links_every_interface_and_docs(client: httpx.AsyncClient) -> None:
    r = await client.get("/")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert r.headers["cache-control"] == "no-store"  # it shows an API key
    page = r.text
    links = hrefs(page)
    for path in DOCS:
        assert path in links, path
    for base in ("/multi", "/3.29.1/multi", "/3.1.0/multi"):
        docs = await client.get(f"{base}/docs")
        assert docs.status_code == 200
    # Served by the server itself: no script, no stylesheet or image from anywhere, links only
    # to this server; usable on a phone.
    assert "<script" not in page.lower()
    assert "<link" not in page.lower() and "src=" not in page.lower()
    assert all(h.startswith(("/", "#")) for h in links), links  # this server, or this page
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    assert "max-width" in page
    assert "default-src 'none'" in r.headers["content-security-policy"]


async def test_head_answers_the_headers_without_the_page(client: httpx.AsyncClient) -> None:
    r = await client.head("/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert r.content == b""


async def test_the_quick_start_works_as_written(
    client: httpx.AsyncClient, container: Container
) -> None:
    """Every command of the page, pasted in order, with the variables set as it says."""
    key = await default_key(container)
    r = await client.get("/")
    assert r.status_code == 200
    page = r.text
    shown = KEY.search(page)
    assert shown is not None and html.unescape(shown.group(1)) == key
    blocks = [html.unescape(b) for b in STEP.findall(page)]
    assert len(blocks) >= 10, blocks

    # The first command is the sign-up: its body is the JSON a client sends, with the printed key.
    first = parse(blocks[0])
    assert (first["method"], first["path"]) == ("POST", "/multi/corporates")
    assert first["headers"]["api-key"] == key
    signup = json.loads(first["data"])
    assert signup["profileId"].isdigit() and signup["rootUser"]["email"]

    variables: dict[str, str] = {}
    answers: list[tuple[str, httpx.Response]] = []
    last: httpx.Response | None = None
    for block in blocks:
        step = parse(block, variables)
        if step["only_if"] is not None:
            assert last is not None
            wanted = re.fullmatch(r"the last answer's state was (\w+)", step["only_if"])
            assert wanted is not None, step["only_if"]
            if last.json().get("state") != wanted.group(1):
                continue
        r = await client.request(
            step["method"], step["path"], headers=step["headers"], content=step["data"]
        )
        assert r.status_code == step["expect"], (block, r.status_code, r.text)
        for name, path in step["sets"]:
            value: Any = r.json()
            for part in path.split("."):
                value = value[part]
            variables[name] = str(value)
        answers.append((step["path"], r))
        last = r

    assert set(variables) == {"CORP", "USER_ID", "TOKEN", "ACCOUNT"}
    deposit = next(r for p, r in answers if p.endswith("/deposit"))
    assert deposit.json() == {"code": "COMPLETED"}
    statement = next(r for p, r in answers if p.endswith("/statement")).json()
    assert statement["entry"][0]["transactionAmount"] == {"currency": "EUR", "amount": 10000}
    assert statement["entry"][0]["actualBalanceAfter"]["amount"] == 10000
    # The account really is funded, as its owner sees it.
    account = await client.get(
        f"/multi/managed_accounts/{variables['ACCOUNT']}",
        headers={"api-key": key, "Authorization": f"Bearer {variables['TOKEN']}"},
    )
    assert account.json()["balances"]["availableBalance"] == 10000, account.text


async def test_each_load_signs_up_a_new_email(
    client: httpx.AsyncClient, container: Container
) -> None:
    """The quick start can be followed again after a reload: the sign-up is a new e-mail."""
    await default_key(container)
    bodies = []
    for _ in range(2):
        page = (await client.get("/")).text
        bodies.append(json.loads(parse(html.unescape(STEP.findall(page)[0]))["data"]))
    assert bodies[0]["rootUser"]["email"] != bodies[1]["rootUser"]["email"]


async def test_the_page_escapes_what_it_interpolates(
    client: httpx.AsyncClient, container: Container
) -> None:
    await default_key(container)
    hostile = "evil.example\"><script>alert(1)</script>'$(touch pwned)"
    r = await client.get("/", headers={"host": hostile})
    assert r.status_code == 200
    assert "<script" not in r.text.lower()
    assert "$(touch" not in html.unescape(r.text)  # not written into the shell commands
    # A host a shell cannot take as it is gives way to the default base URL.
    step = parse(html.unescape(STEP.findall(r.text)[0]), base="http://localhost:8000")
    assert step["path"] == "/multi/corporates"

    sandbox = Sandbox(
        programme_id="1<b>",
        api_key="k<script>alert('x')</script>&\"",
        profiles={"corporate": "2<i>", "corporateManagedAccount": "3&"},
        step_up_required=True,
    )
    page = render(BASE, "/root<x>", sandbox, False, "a<b>@example.com")
    assert "<script" not in page and "<b>" not in page and "<i>" not in page
    assert "<x>" not in page and "&lt;x&gt;" in page
    assert html.escape(sandbox.api_key) in page
    # The key is quoted for the shell too: the command still carries it exactly.
    step = parse(html.unescape(STEP.findall(page)[0]))
    assert step["headers"]["api-key"] == sandbox.api_key


async def test_the_page_without_a_default_programme(
    fresh_database_url: str, settings: Settings
) -> None:
    """A database where `multibank serve` never ran: the page says how to create a programme."""
    c = build_container(settings.model_copy(update={"database_url": fresh_database_url}))
    try:
        await upgrade(c.db)
        transport = httpx.ASGITransport(app=create_app(container=c), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            r = await http.get("/")
    finally:
        await c.db.dispose()
    assert r.status_code == 200, r.text
    assert "multibank programme create --name NAME" in r.text
    assert not KEY.search(r.text) and not STEP.search(r.text)
    assert "/multi/docs" in hrefs(r.text)


async def test_a_live_server_shows_no_key(settings: Settings, container: Container) -> None:
    await default_key(container)
    live = build_container(
        settings.model_copy(update={"mode": "live", "admin_token": ADMIN_TOKEN, **LIVE_CARD_KEYS})
    )
    try:
        transport = httpx.ASGITransport(app=create_app(container=live), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            r = await http.get("/")
    finally:
        await live.db.dispose()
    assert r.status_code == 200
    assert not KEY.search(r.text) and not STEP.search(r.text) and "mb_sbx_" not in r.text
    assert "live mode" in r.text


@pytest.mark.parametrize("base", BASES)
async def test_each_version_says_how_to_start(client: httpx.AsyncClient, base: str) -> None:
    info = (await client.get(f"{base}/openapi.json")).json()["info"]
    text = info["description"]
    for needed in ("api-key", "/simulate/api", "programme-key", "123456", "login_with_password"):
        assert needed in text, (base, needed)
    assert f"interface {info['version']}" in text
    payments = "Payments** (transfers, sends and outgoing wire transfers)"
    assert payments in text
    if info["version"] == "3.29.1":
        assert "exist on 3.29.1 only" in text


def parse(block: str, variables: dict[str, str] | None = None, base: str = BASE) -> dict[str, Any]:
    """One quick-start step as a shell would read it: its curl command (with `$VARS` replaced
    from `variables`), what the comments say it answers, when to run it and what to set."""
    text = block.replace(" \\\n", " ")
    command = [line for line in text.splitlines() if line.startswith("curl ")]
    assert len(command) == 1, block
    comments = [line[2:] for line in text.splitlines() if line.startswith("# ")]
    expect = re.search(r"\(answers (\d{3})\)$", comments[0])
    assert expect is not None, comments
    only_if = next((c[len("Only if ") : -1] for c in comments if c.startswith("Only if ")), None)
    sets: list[tuple[str, str]] = []
    for c in comments:
        if c.startswith("Then set from the answer: "):
            sets += re.findall(r"([A-Z_]+)=<([\w.]+)>", c)

    def expand(word: str) -> str:
        if variables is None:
            return word
        return re.sub(r"\$([A-Z_]+)", lambda m: variables[m.group(1)], word)

    words = [expand(w) for w in shlex.split(command[0])]
    method, url, data = "GET", "", None
    headers: dict[str, str] = {}
    i = 1
    while i < len(words):
        word = words[i]
        if word == "-sS":
            i += 1
            continue
        value = words[i + 1] if i + 1 < len(words) else ""
        if word == "-w":
            pass
        elif word == "-X":
            method = value
        elif word == "-H":
            name, _, header = value.partition(": ")
            headers[name] = header
        elif word == "-d":
            data = value
        else:
            assert not url and not word.startswith("-"), words
            url = word
            i += 1
            continue
        i += 2
    assert url.startswith(base + "/"), (url, base)
    return {
        "method": method,
        "path": url[len(base) :],
        "headers": headers,
        "data": data,
        "expect": int(expect.group(1)),
        "only_if": only_if,
        "sets": sets,
    }


SCRIPT = re.compile(r'<pre class="script">(.*?)</pre>', re.S)


@pytest.mark.skipif(DB_KIND != "sqlite", reason="serve runs on a fresh SQLite file")
@pytest.mark.skipif(
    not (shutil.which("bash") and shutil.which("curl") and shutil.which("jq")),
    reason="the jq variant runs in bash with curl and jq, which this machine lacks",
)
async def test_the_jq_variant_runs_whole_and_captures_every_id(tmp_path: Path) -> None:
    """The quick start's one-script variant, pasted into bash against a real `multibank serve`:
    it sets every variable from the answers and ends with the account funded."""
    from tests.test_cli import serving

    database_url = f"sqlite+aiosqlite:///{tmp_path / 'jq.db'}"
    async with (
        serving(database_url, tmp_path / "serve.out") as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        page = (await http.get("/")).text
        (found,) = SCRIPT.findall(page)
        script = html.unescape(found)
        assert base in script and "$(" in script
        # What a reader types next: the variables are still set in the shell.
        script += '\nprintf "%s\\n" "$CORP" "$USER_ID" "$ACCOUNT" "$TOKEN" >&3\n'
        done = await asyncio.to_thread(
            subprocess.run,
            ["bash", "-c", f"exec 3>{shlex.quote(str(tmp_path / 'vars'))}\n{script}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "curl:" not in done.stderr, done.stderr  # no request was refused
        corp, user_id, account, token = (tmp_path / "vars").read_text().split("\n")[:4]
        assert corp.isdigit() and user_id.isdigit() and account.isdigit() and token
        key = KEY.search(page)
        assert key is not None
        headers = {"api-key": html.unescape(key.group(1)), "authorization": f"Bearer {token}"}
        r = await http.get(f"/multi/managed_accounts/{account}", headers=headers)
        assert r.status_code == 200, r.text
        assert r.json()["balances"]["availableBalance"] == 10000, r.text
        r = await http.get("/multi/corporates", headers=headers)
        assert r.json()["id"]["id"] == corp


README = Path(__file__).resolve().parents[2] / "README.md"


def readme_first_payment() -> str:
    """The shell block of the README's "A first payment", as a reader copies it."""
    text = README.read_text()
    after = text[text.index("A first payment:") :]
    return after.split("```sh\n", 1)[1].split("```", 1)[0]


@pytest.mark.skipif(DB_KIND != "sqlite", reason="serve runs on a fresh SQLite file")
@pytest.mark.skipif(
    not (shutil.which("bash") and shutil.which("curl") and shutil.which("jq")),
    reason="the README's commands run in bash with curl and jq, which this machine lacks",
)
async def test_the_readmes_first_payment_works_as_written_on_any_port(tmp_path: Path) -> None:
    """Issue 41 §6: after the quick start's script, the README's first payment, pasted as it
    is, against a server on a port that is not 8000: the transfer is COMPLETED."""
    from tests.test_cli import serving

    database_url = f"sqlite+aiosqlite:///{tmp_path / 'first.db'}"
    async with (
        serving(database_url, tmp_path / "serve.out") as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        assert not base.endswith(":8000")
        (found,) = SCRIPT.findall((await http.get("/")).text)
        script = html.unescape(found) + "\n" + readme_first_payment()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MULTIBANK_")}
        # The CLI the README calls reads the server's database (the default one, for a reader).
        env["MULTIBANK_DATABASE_URL"] = database_url
        done = await asyncio.to_thread(
            subprocess.run,
            ["bash", "-c", f"set -e\n{script}"],
            cwd=README.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    transfer = json.loads(last)
    assert transfer["state"] == "COMPLETED", last
    assert transfer["destinationAmount"] == {"currency": "EUR", "amount": 500}
